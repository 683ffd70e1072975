"""Split-K (refcomp/search/split.py): a skinny contraction summed in chunks, then the chunk sums summed.

The rewrite is checked as every rule is: the split graph against NumPy on random data, for every
chunk count the search may try; then the search must split a decoding-step matmul where that pays
under the cost model (and only there), and the split program must match NumPy on the emulator.
Long maxima of few outputs (a greedy token's argmax over a vocabulary) are split alike,
exactly: the results must equal NumPy's bit for bit, ties and NaN included.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
import refcomp.search.search as search_module
from refcomp.search import evaluate
from refcomp import golden
from refcomp.ops.tensor import Tensor
from refcomp.search.cost import elements
from refcomp.ops.graph import identity_edge
from refcomp.search.split import MIN_K, chunk_counts, divisor_counts, isolated, long_and_few, skinny, split_k


def _product(rows, k, n, batch=()):
    x, w = rc.input("x", batch + (rows, k)), rc.input("w", (k, n))
    y = x @ w
    node = y.node
    assert node.op.name == "SumReduce", node  # x @ w is SumReduce(Mul(x, w)) read through a view
    return x, w, y, node


@pytest.mark.parametrize(
    "rows, k, n, batch", [(1, 256, 24, ()), (1, 768, 40, ()), (3, 384, 7, (2,)), (1, 512, 1, ())]
)
def test_a_split_contraction_is_the_same_sum_for_every_chunk_count(rows, k, n, batch):
    rng = np.random.default_rng(k + n)
    x, w, y, node = _product(rows, k, n, batch)
    feeds = {"x": rng.standard_normal(batch + (rows, k)).astype(np.float32),
             "w": rng.standard_normal((k, n)).astype(np.float32)}
    want = feeds["x"].astype(np.float64) @ feeds["w"].astype(np.float64)
    np.testing.assert_allclose(rc.evaluate(y, feeds, precision="float64"), want, rtol=1e-12, atol=1e-12)
    whole = rc.evaluate(Tensor(identity_edge(node)), feeds, precision="float64")  # the node's own layout
    counts = chunk_counts(node)
    assert counts and all(k % s == 0 and k // s >= 8 for s in counts)
    for chunks in counts:
        split = Tensor(split_k(node, chunks))
        np.testing.assert_allclose(
            rc.evaluate(split, feeds, precision="float64"), whole, rtol=1e-12, atol=1e-12
        )
        np.testing.assert_allclose(rc.evaluate(split, feeds), whole, **golden.FLOAT32_TOLERANCE)
    alone = rc.evaluate(
        Tensor(isolated(node)), {"operand0": feeds["x"], "operand1": feeds["w"]}, precision="float64"
    )
    np.testing.assert_allclose(alone, whole, rtol=1e-12, atol=1e-12)


def test_only_long_float32_contractions_of_less_than_a_tile_of_rows_or_few_outputs_are_skinny():
    count = lambda shape: elements(shape, {"B": 1, "T": 64})  # noqa: E731
    assert skinny(_product(1, 768, 3072)[3], count)
    assert skinny(_product(3, MIN_K, 5, (2,))[3], count)  # 6 rows in all
    assert not skinny(_product(16, 768, 3072)[3], count)  # a whole tile of rows
    assert not skinny(_product(1, MIN_K // 2, 3072)[3], count)  # a short K
    assert not skinny(
        (rc.input("x", ("B", "T", 768)) @ rc.input("w", (768, 3072))).node, count
    )  # 64 rows at the binding, 196,608 outputs
    assert skinny(
        (rc.input("x", ("B", "T", 768)) @ rc.input("w", (768, 8))).node, count
    )  # 64 rows, but 512 outputs: one thread each leaves the device idle
    assert skinny(_product(32, 3072, 768)[3], count)  # a batch of 32 decoding rows: 24,576 outputs
    symbolic_k = (rc.input("x", (1, "T")) @ rc.input("w", ("T", 8))).node
    assert not skinny(symbolic_k, count)  # K must be known to be cut into chunks
    half = (rc.input("x", (1, 768), "float16") @ rc.input("w", (768, 64), "float16")).node
    assert not skinny(half, count)  # partial sums would be rounded to float16


@pytest.fixture
def graph_split_only(monkeypatch):
    """Only an online softmax splits K across blocks (tests/test_matmul_splits.py): a skinny plain
    matmul is left to the graph's split, whose rewrite these tests check."""
    monkeypatch.setitem(evaluate.TAKEN_BY_ONLINE, "splits", (True,))


def _decode_step():
    """GPT-2's MLP output at one row (768 outputs): unsplit, K in slices gives 48 blocks."""
    x, w, b = rc.input("x", (1, 3072)), rc.input("w", (3072, 768)), rc.input("b", (768,))
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((1, 3072)).astype(np.float32),
             "w": (rng.standard_normal((3072, 768)) * 0.02).astype(np.float32),
             "b": rng.standard_normal(768).astype(np.float32)}
    return (x @ w + b).gelu(approximate="tanh"), feeds


def test_the_search_splits_a_decoding_steps_matmul_where_it_pays(graph_split_only, monkeypatch):
    y, feeds = _decode_step()
    prog = rc.compile(y, cache=False)
    steps = [s for s in prog.search.trace if s.rule == "split_k"]
    assert len(steps) == 1 and "chunks" in steps[0].site, prog.explain()
    assert len(prog.kernels) == 2  # the chunks, then their sum with the bias and GELU applied
    x, w, b = (feeds[k].astype(np.float64) for k in ("x", "w", "b"))
    h = x @ w + b
    want = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(prog.run(feeds), want, **golden.FLOAT32_TOLERANCE)
    monkeypatch.setattr(search_module, "split_skinny", lambda edges, count, price, *threads: (edges, []))
    whole = rc.compile(y, cache=False)
    assert not any(s.rule == "split_k" for s in whole.search.trace)
    assert prog.cost.time_s < whole.cost.time_s, (prog.cost_summary(), whole.cost_summary())


def test_two_chained_skinny_matmuls_are_both_split_and_named_in_the_searched_graph(graph_split_only):
    """The second contraction reads the first's split sum (a rebuilt node): both are split, and the
    trace names each by its number in the searched graph, as explain's "graph after" shows it."""
    x, w1, w2 = rc.input("x", (1, 16384)), rc.input("w1", (16384, 2048)), rc.input("w2", (2048, 64))
    y = (x @ w1).gelu(approximate="tanh") @ w2
    prog = rc.compile(y, cache=False)
    (step,) = [s for s in prog.search.trace if s.rule == "split_k"]
    sites = step.site.split(", ")
    assert len(sites) == 2 and all(f"{label.split()[0]} (" in prog.explain() for label in sites), step.site
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((1, 16384)).astype(np.float32),
             "w1": (rng.standard_normal((16384, 2048)) * 0.01).astype(np.float32),
             "w2": (rng.standard_normal((2048, 64)) * 0.03).astype(np.float32)}
    h = feeds["x"].astype(np.float64) @ feeds["w1"].astype(np.float64)
    gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(
        prog.run(feeds), gelu @ feeds["w2"].astype(np.float64), **golden.FLOAT32_TOLERANCE
    )


def test_a_skinny_matmul_that_is_launch_bound_is_not_split():
    x, w = rc.input("x", (1, 512)), rc.input("w", (512, 64))
    prog = rc.compile(x @ w, cache=False)
    assert not any(s.rule == "split_k" for s in prog.search.trace) and len(prog.kernels) == 1


def test_only_long_maxima_of_few_outputs_are_split_exactly():
    count = lambda shape: elements(shape, {"B": 32})  # noqa: E731
    x = rc.input("x", ("B", 50257))
    assert long_and_few(x.amax(-1).node, count)  # (a minimum is a maximum of the negation)
    assert not long_and_few(x.sum(-1).node, count)  # a float sum reassociated is no exact split
    assert not long_and_few(rc.input("s", ("B", 4095)).amax(-1).node, count)  # short
    assert not long_and_few(rc.input("m", (4096, 8192)).amax(-1).node, count)  # 4,096 rows fill the device
    assert divisor_counts(50257) == [29] and divisor_counts(8192)[-1] == 128


def test_a_greedy_tokens_argmax_over_a_vocabulary_is_split_and_exact():
    """argmax is the first index of the maximum (NaN the maximum, as in NumPy): a maximum, then a
    minimum of the candidates' indices (the maximum of their negation), both over 50,257 values,
    both split into 29 chunks, as amin's maximum of the negation is."""
    x = rc.input("x", ("B", 50257))
    outputs = {"argmax": x.argmax(-1), "max": x.amax(-1), "min": x.amin(-1)}
    prog = rc.compile(outputs, cache=False, dims_hint={"B": 3})
    (step,) = [s for s in prog.search.trace if s.rule == "split_k"]
    assert step.site.count("into 29 chunks") == 3, step.site  # argmax's max (amax's too) and min, amin
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((3, 50257)).astype(np.float32)}
    feeds["x"][0, [7, 40000, 50256]] = 9.0  # ties: the first wins
    feeds["x"][1, 31337] = np.nan
    feeds["x"][2, [0, 50256]] = [-9.0, 9.0]  # the extremes at the chunks' ends
    got = prog.run(feeds, backend="emulator")
    want = rc.evaluate(outputs, feeds)
    for key in outputs:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    np.testing.assert_array_equal(got["argmax"], np.argmax(feeds["x"], -1).astype(np.float32))
    np.testing.assert_array_equal(got["max"][[0, 2]], feeds["x"][[0, 2]].max(-1))
    np.testing.assert_array_equal(got["min"][[0, 2]], feeds["x"][[0, 2]].min(-1))
    monkeypatch_free = rc.compile(outputs, cache=False, dims_hint={"B": 3}, search=False)
    assert prog.cost.time_s < sum(k.cost.time_s for k in monkeypatch_free.kernels)


@pytest.mark.parametrize("shape", ["reshaped", "round_trip"])
def test_the_chunk_sum_takes_a_residual_through_a_view_as_its_epilogue(shape, graph_split_only):
    """GPT-2's MLP output at batch 16: (x @ W + b) + r, the chunk sum (B, 1, 768). The chunk sum applies
    the bias and the residual before its store, one kernel fewer than a separate residual kernel:
    an epilogue may hold the reduction's elements in another shape (axes of extent 1 dropped:
    "reshaped"), and reads the sum at its own row once a reshape's div/mod tower, bound to a variable,
    is replaced by its definition ("round_trip", (B, 1, 768) -> (B, 768) -> (B, 1, 768) as the decode
    step's residual stream: codegen.emit._scalar)."""
    x, w = rc.input("x", ("B", 1, 3072)), rc.input("w", (3072, 768))
    b, r = rc.input("b", (768,)), rc.input("r", ("B", 768))
    y = (x @ w + b).reshape(("B", 768)) + r
    if shape == "round_trip":
        y = y.reshape(("B", 1, 768)) + r.unsqueeze(1)
    prog = rc.compile(y, dims_hint={"B": 16}, cache=False)  # (at 32 rows a matmul in K slices wins)
    assert [s.rule for s in prog.search.trace if s.rule == "split_k"] == ["split_k"]
    assert len(prog.kernels) == 2, prog.explain()  # the chunks; their sum with bias and residual
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((5, 1, 3072)).astype(np.float32),
             "w": (rng.standard_normal((3072, 768)) / 55).astype(np.float32),
             "b": rng.standard_normal(768).astype(np.float32),
             "r": rng.standard_normal((5, 768)).astype(np.float32)}
    f = {k: v.astype(np.float64) for k, v in feeds.items()}
    want = (f["x"] @ f["w"] + f["b"]).reshape(5, 768) + f["r"]
    if shape == "round_trip":
        want = want.reshape(5, 1, 768) + f["r"][:, None]
    np.testing.assert_allclose(prog.run(feeds, backend="emulator"), want, **golden.FLOAT32_TOLERANCE)

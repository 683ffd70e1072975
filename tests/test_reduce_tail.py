"""A split maximum's last step finished by the kernel of its first (search/tail.py, codegen/tail.py,
templates/reduce_tail.cu.j2): the greedy choice over a vocabulary of 50,257 (argmax, the repetition
penalty) and a plain long maximum, each checked against NumPy written directly on the emulator at
several row counts; the rows NumPy's argmax decides by its rules (the first NaN, the first of equal
maxima across chunks, rows of -inf); the memory model's counts against the profiler's; two launches on
the same buffers; bounds under the sanitizer; nvcc for sm_90; a saved program."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp.exec.emulator import EmulatorBackend
from refcomp.exec.profile import model_disagreements
from refcomp.serving.sampling import greedy_graph
from fusion_checks import launch_split_twice, sanitized_run

VOCAB = 50257


@pytest.fixture(scope="module")
def greedy():
    outputs = {"token": greedy_graph(rc.input("logits", ("B", VOCAB)))}
    return rc.compile(outputs, dims_hint={"B": 32}, cache=False)


def _feeds(rows: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((rows, VOCAB)).astype(np.float32)
    special = [  # (row, what NumPy's argmax must find)
        lambda r: r.__setitem__(slice(None), -np.inf),  # every value -inf: index 0
        lambda r: (r.__setitem__(40000, np.nan), r.__setitem__(7, np.nan)),  # the first NaN
        lambda r: (r.__setitem__(50000, 100.0), r.__setitem__(40000, 100.0)),  # equal maxima in two chunks
        lambda r: r.__setitem__(slice(None), 1.0),  # all equal
    ]
    for row, make in zip(logits, special):
        make(row)
    seen = (rng.random((rows, VOCAB)) < 0.01).astype(np.float32)
    return {"logits": logits, "seen": seen, "penalty": rng.uniform(0.5, 2.0, rows).astype(np.float32)}


def _want(feeds) -> np.ndarray:
    lg, pen = feeds["logits"].astype(np.float64), feeds["penalty"].astype(np.float64)[:, None]
    scores = np.where(feeds["seen"] > 0, np.where(lg < 0, lg * pen, lg / pen), lg)
    return np.argmax(scores, axis=-1).astype(np.float32)


def _tailed(prog):
    return [k for k in prog.kernels if k.tail]


def test_the_greedy_choice_is_two_kernels_each_finishing_its_rows(greedy):
    """Before: a block per chunk, then a kernel of pure launch for the chunks' maximum, twice (the
    maximum, then the first index holding it). After: each chunk kernel's last block finishes."""
    assert len(greedy.kernels) == 2 and len(_tailed(greedy)) == 2
    assert any(s.rule == "carry_tails" for s in greedy.search.trace)
    first, second = greedy.kernels
    assert second.tail[-1].op.name != "MaxReduce"  # the index's epilogue (a negation) comes along
    assert "reducing the row" in str(first.launch) and "atomicAdd(ws4" in first.source
    for rows, seed in ((7, 1), (1, 2), (33, 3)):
        feeds = _feeds(rows, seed)
        np.testing.assert_array_equal(greedy.run(feeds, backend="emulator")["token"], _want(feeds))


def test_the_memory_model_counts_what_the_profiler_counts(greedy):
    assert model_disagreements(greedy, greedy.profile(_feeds(5, 4))) == []


def test_the_tickets_are_zero_again_for_the_next_launch(greedy):
    feeds = _feeds(6, 5)
    for kernel in _tailed(greedy):
        launch_split_twice(EmulatorBackend(), greedy, kernel, feeds, {"token": _want(feeds)})


def test_every_access_stays_in_its_buffers(greedy):
    feeds = _feeds(3, 6)
    np.testing.assert_array_equal(sanitized_run(greedy, feeds)["token"], _want(feeds))


def test_a_plain_long_maximum():
    """amax over 20,000 values of 3 rows, split in chunks; NaN propagates as NumPy's max does."""
    x = rc.input("x", ("B", 20000))
    prog = rc.compile({"m": x.amax(-1)}, dims_hint={"B": 3}, cache=False)
    assert len(prog.kernels) == 1 and _tailed(prog)
    rng = np.random.default_rng(7)
    for rows in (3, 1, 5):
        v = rng.standard_normal((rows, 20000)).astype(np.float32)
        v[0, 19999] = 9.0
        if rows > 1:
            v[1, 12345] = np.nan
        got = prog.run({"x": v}, backend="emulator")["m"]
        np.testing.assert_array_equal(got, v.max(-1))
    assert model_disagreements(prog, prog.profile({"x": v})) == []


def test_the_kernels_build_with_nvcc(greedy):
    from refcomp.exec.nvcc import nvcc_available, nvcc_check
    if nvcc_available() is not None:
        pytest.skip(nvcc_available())
    assert set(nvcc_check(greedy.source).kernels) == {k.name for k in greedy.kernels}


def test_a_saved_program_loads_with_its_tails(greedy, tmp_path):
    greedy.save(tmp_path / "p.json")
    loaded = rc.load_program(tmp_path / "p.json")
    assert loaded.source == greedy.source and [len(k.tail) for k in loaded.kernels] == [
        len(k.tail) for k in greedy.kernels]
    feeds = _feeds(4, 8)
    np.testing.assert_array_equal(loaded.run(feeds, backend="emulator")["token"], _want(feeds))


def test_a_tail_on_no_reduction_kernel_is_no_partition():
    """The decision is honoured only where the reduced rows are a block reduction's output: a maximum
    of an input has no kernel before it to finish it (search.tail.with_tails)."""
    from refcomp.search.evaluate import Evaluator
    x = rc.input("x", ("B", 64))
    prog = rc.compile({"m": x.amax(-1)}, dims_hint={"B": 4}, cache=False)
    result = prog.search
    (final,) = [n for n in result.graph.compute if n.op.name == "MaxReduce"]
    forced = result.schedule.decide(tails={final.id})
    assert Evaluator(result.graph, result.bindings, result.profile).partition(forced) is None

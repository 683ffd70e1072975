"""Regression tests for refcomp's reliability guarantees (docs/reliability.md): no silent wrong
answer, no crash, every failure a RefcompError.

Each test runs the same program on the NumPy reference and on the host emulator (plain and
searched) and asserts that they agree: on the values, or on the exact error they refuse with.
The kernel cache has its own file (tests/test_cache.py), ONNX import errors too
(tests/test_onnx_errors.py).
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import refcomp as rc

MODES = {"numpy": dict(backend="numpy", search=False), "plain": dict(backend="emulator", search=False),
         "searched": dict(backend="emulator", search=True)}


def raises(cls, *fragments):
    """pytest.raises for `cls` whose message contains every fragment (plain text)."""
    return pytest.raises(cls, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


def run(outputs, feeds, mode: str, dims=None):
    how = MODES[mode]
    return rc.compile(outputs, search=how["search"]).run(feeds, backend=how["backend"], dims=dims)


def outcome(outputs, feeds, mode: str, dims=None):
    """The values, or (error type, message), of one run in one mode."""
    try:
        return run(outputs, feeds, mode, dims)
    except rc.RefcompError as exc:
        return type(exc), str(exc)


def assert_modes_agree(outputs, feeds, dims=None):
    """Every mode gives the reference's values, or refuses with the reference's very error."""
    results = {mode: outcome(outputs, feeds, mode, dims) for mode in MODES}
    want = results["numpy"]
    for mode, got in results.items():
        if isinstance(want, tuple):
            assert got == want, f"{mode}: {got!r} where the reference refused with {want!r}"
        else:
            assert not isinstance(got, tuple), f"{mode} refused with {got!r} where the reference ran"
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=mode)
    return want


# --- 1. symbolic views are checked at run time on every backend -------------------------------

VIEWS = {
    "index 3": lambda x: x[:, 3],
    "last two": lambda x: x[:, -2:],
    "first": lambda x: x[:, :1],
    "drop first": lambda x: x[:, 1:] * 2.0,
    "step": lambda x: x[:, 1::2],
    "pad": lambda x: x[:, 2:].pad([(0, 0), (1, 1)]),
    "expand": lambda x: x[:, -1:].expand(-1, 3) + 1.0,
    "flip tail": lambda x: x.flip(1)[:, 2:],
}


@pytest.mark.parametrize("t", [0, 1, 2, 5])
@pytest.mark.parametrize("name", list(VIEWS))
def test_views_of_symbolic_axes_refuse_the_bindings_they_cannot_take(name, t):
    x = rc.input("x", ("B", "T"))
    feeds = {"x": np.arange(2 * t, dtype=np.float32).reshape(2, t)}
    want = assert_modes_agree(VIEWS[name](x), feeds)
    if isinstance(want, tuple):
        assert want[0] is rc.BindingError and f"T={t}" in want[1]


def test_a_refused_binding_names_the_tensor_and_the_dims():
    x = rc.input("x", ("B", "T"))
    with raises(rc.BindingError, "input 'x'", "B=2, T=2", "out of range"):
        rc.compile(x[:, 3] * 2.0).run({"x": np.ones((2, 2), np.float32)})


def test_a_window_larger_than_its_input_is_refused_not_truncated():
    """C's `/` truncates where the reference floors: a negative dividend would make them disagree."""
    x, w = rc.input("x", (1, 1, "H", "H")), rc.input("w", (1, 1, 3, 3))
    y = rc.nn.conv2d(x, w, stride=2).sum((2, 3))
    for h, want in ((2, None), (3, 9.0), (5, 36.0)):
        got = assert_modes_agree(
            y, {"x": np.ones((1, 1, h, h), np.float32), "w": np.ones((1, 1, 3, 3), np.float32)}
        )
        if want is None:
            assert got[0] is rc.BindingError and "H=2" in got[1]
        else:
            assert float(got.reshape(-1)[0]) == want


# --- 2. gather ids are checked on every backend ------------------------------------------------

def test_embedding_ids_outside_the_table_are_refused_everywhere():
    ids, table = rc.input("ids", ("T",), "int32"), rc.input("table", ("V", 2))
    out = rc.nn.embedding(ids, table)
    tab = np.arange(6, dtype=np.float32).reshape(3, 2)
    for bad in (3, -1, 2**20):
        got = assert_modes_agree(out, {"ids": np.array([0, bad, 1], np.int32), "table": tab})
        assert got[0] is rc.FeedError and "[0, 3)" in got[1] and str(bad) in got[1]


def test_only_the_ids_a_view_reads_are_checked():
    ids, table = rc.input("ids", ("T",), "int32"), rc.input("table", (3, 2))
    tab = np.arange(6, dtype=np.float32).reshape(3, 2)
    got = assert_modes_agree(
        rc.nn.embedding(ids[:2], table), {"ids": np.array([2, 0, 7], np.int32), "table": tab}
    )
    np.testing.assert_array_equal(got, tab[[2, 0]])


# --- 4. no recursion on graph depth; the search's budget holds inside a round ----------------------

@pytest.mark.parametrize(
    "ops", [pytest.param(3_000, id="3000"), pytest.param(10_000, id="10000", marks=pytest.mark.slow)]
)
def test_a_long_chain_of_ops_compiles_with_search_and_runs(ops):
    """Three times Python's recursion limit by default (any recursion on depth fails), ten thousand
    ops under `pytest -m slow`."""
    assert ops >= 3 * sys.getrecursionlimit()
    x = rc.input("x", (4, 8))
    y = x
    for i in range(ops // 2):  # two ops a step
        y = (y * 0.5 + 0.25) if i % 2 else (y + 1.0).sin()
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)}
    prog = rc.compile(y)
    assert 1 < len(prog.kernels) < 1000  # fused, and split where a kernel would grow too deep
    np.testing.assert_allclose(prog.run(feeds), rc.evaluate(y, feeds), rtol=1e-5, atol=1e-6)


def test_two_thousand_inputs_compile_with_search_and_run():
    xs = [rc.input(f"x{i}", (4,)) for i in range(2000)]
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    feeds = {f"x{i}": np.full(4, i, np.float32) for i in range(2000)}
    np.testing.assert_array_equal(rc.compile(total).run(feeds), np.full(4, sum(range(2000)), np.float32))


def test_the_search_budget_is_honoured_inside_a_round(monkeypatch):
    """With a clock that advances one second per reading, a 2 s budget ends the search within the
    first round: far fewer states than one round over this graph would explore."""
    from refcomp.search import search as search_module
    ticks = iter(range(10**9))
    monkeypatch.setattr(search_module.time, "perf_counter", lambda: float(next(ticks)))
    x = rc.input("x", (4, 8))
    y = x
    for _ in range(300):
        y = (y + 1.0).sin()
    result = search_module.search([y.edge], max_seconds=2.0, progress=False)
    assert result.states < 300


def test_nested_short_reduces_are_not_unrolled_past_the_recompute_bound():
    """Each unrolled reduce reads its source at four indices, so six nested ones would recompute 4**6
    values per element (a fuzzed graph of this kind once took minutes to compile): the search asks
    codegen, which refuses past codegen.emit.MAX_INLINED_VALUES; three nested ones still fuse."""
    from refcomp.codegen.emit import MAX_INLINED_VALUES
    from refcomp.codegen.lower import materialise_outputs
    from refcomp.codegen.legality import fusion_problem
    from refcomp.search.fusion import Graph, check_group, group_of, group_params
    from refcomp.search.schedule import Schedule
    x = rc.input("x", (4,) * 7)
    sums = [x]
    for _ in range(6):
        sums.append((sums[-1] * sums[-1] + 1.0).reciprocal().sum(-1))
    assert 4 ** 6 > MAX_INLINED_VALUES >= 4 ** 3
    for depth, fuses in ((3, True), (6, False)):
        graph = Graph(materialise_outputs([sums[depth]]))
        root = graph.output_nodes[0]
        inline_all = Schedule(inline=frozenset(n.id for n in graph.compute if n is not root))
        group = group_of(graph, inline_all, root)
        writable = lambda g: fusion_problem(g, graph.names, lambda n: n.id in inline_all.inline,  # noqa: E731
                                            group_params(inline_all, g)) is None
        assert (group is not None and check_group(inline_all, group, writable)) == fuses, depth
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (4,) * 7).astype(np.float32)}
    prog = rc.compile(sums[6], cache=False)
    np.testing.assert_allclose(prog.run(feeds), rc.evaluate(sums[6], feeds), rtol=1e-5)


def test_accurate_special_functions_still_fuse_into_one_kernel():
    """tanh's formula reads its argument many times (655 paths through the graph, 55 values once
    codegen reuses repeated reads): the path bound alone would split it; codegen's count does not."""
    x = rc.input("x", ("B", 64))
    for y in (x.tanh(), x.gelu(approximate="tanh"), x.gelu()):
        assert len(rc.compile(y, cache=False).kernels) == 1


# --- 5. deterministic output -----------------------------------------------------------------------

def _gpt2_source_digest() -> str:
    from examples.gpt2_block import build_block
    y, _ = build_block()
    prog = rc.compile(y, dims_hint={"B": 2, "T": 16})
    return hashlib.sha256((prog.source + "|" + ",".join(k.name for k in prog.kernels)).encode()).hexdigest()


def test_the_same_graph_compiles_to_the_same_source_in_one_process():
    first = _gpt2_source_digest()
    rc.compile([rc.input(f"u{i}", (3,)) * 2.0 for i in range(20)])  # moves the process-wide node counter
    assert _gpt2_source_digest() == first


def test_the_same_graph_compiles_to_the_same_source_in_two_processes():
    code = "from tests.test_reliability import _gpt2_source_digest; print(_gpt2_source_digest())"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digests = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr
        digests.add(proc.stdout.split()[-1])
    assert digests == {_gpt2_source_digest()}


# --- 6. NumPy semantics at the edges ----------------------------------------------------------------

def test_reductions_over_an_empty_axis_follow_numpy():
    x = rc.input("x", ("B", "T"))
    outputs = {
        "sum": x.sum(1),
        "max": x.amax(1),
        "min": x.amin(1),
        "mean": x.mean(1),
        "var": x.var(1, correction=0),
        "var1": x.var(1, correction=1),
    }
    feeds = {"x": np.zeros((3, 0), np.float32)}
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = {
            "sum": np.zeros(3),
            "max": np.full(3, -np.inf),
            "min": np.full(3, np.inf),
            "mean": np.full(3, np.nan),
            "var": np.full(3, np.nan),
            "var1": np.zeros((3, 0)).var(1, ddof=1),
        }
    for mode in MODES:
        got = outcome(outputs, feeds, mode)
        for key in outputs:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{mode} {key}")


SPECIALS = np.array([-np.inf, -8.0, -2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, np.inf, np.nan], np.float32)


def test_powers_follow_numpy_at_every_edge():
    x, y = rc.input("x", (12, 12)), rc.input("y", (12, 12))
    base, exponent = np.meshgrid(
        SPECIALS, np.array([-3, -2, -1, -0.5, 0, 0.3, 0.5, 1, 2, 3, np.inf, np.nan], np.float32)
    )
    feeds = {"x": base.astype(np.float32), "y": exponent.astype(np.float32)}
    outputs = {"tensor": x**y, "cube": x**3, "m2": x**-2, "p03": x**0.3, "zero": x**0, "rpow": (-2.0) ** y}
    with np.errstate(all="ignore"):
        want = {"tensor": np.power(base, exponent), "cube": base ** 3, "m2": base ** np.float32(-2),
                "p03": np.power(base, np.float32(0.3)), "zero": base ** np.float32(0),
                "rpow": np.power(np.float32(-2.0), exponent)}
    for mode in MODES:
        got = outcome(outputs, feeds, mode)
        for key in outputs:
            np.testing.assert_allclose(got[key], want[key], rtol=2e-6, err_msg=f"{mode} {key}")
            assert np.array_equal(np.signbit(got[key]), np.signbit(want[key])) or np.isnan(want[key]).any()


def test_where_selects_and_never_lets_the_other_branch_leak():
    x = rc.input("x", (12,))
    outputs = {"log": rc.where(x > 0.0, x.log(), -1.0), "recip": rc.where(x.abs() < 0.75, x, 1.0 / x),
               "inf": rc.where(x.isfinite(), x, 0.0)}
    with np.errstate(all="ignore"):
        want = {"log": np.where(SPECIALS > 0, np.log(SPECIALS), -1.0),
                "recip": np.where(np.abs(SPECIALS) < 0.75, SPECIALS, 1.0 / SPECIALS),
                "inf": np.where(np.isfinite(SPECIALS), SPECIALS, 0.0)}
    for mode in MODES:
        got = outcome(outputs, {"x": SPECIALS}, mode)
        for key in outputs:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6, err_msg=f"{mode} {key}")


def test_causal_attention_masks_with_minus_infinity():
    """Blocked scores are selected to -inf: their weights are exactly 0, whatever the scores were."""
    q, k, v = (rc.input(n, (1, 4, 2)) for n in "qkv")
    out = rc.nn.scaled_dot_product_attention(q, k, v, causal=True)
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((1, 4, 2)).astype(np.float32) for n in "qkv"}
    feeds["k"][0, 3] = np.inf  # the last key is blocked for every query but the last
    got = outcome(out, feeds, "searched")
    want = outcome(out, feeds, "numpy")
    assert np.isfinite(got[0, :3]).all() and np.isfinite(want[0, :3]).all()
    np.testing.assert_allclose(got[0, :3], want[0, :3], rtol=1e-5)


# --- 7. every failure a user can cause is a RefcompError ---------------------------------------------

@pytest.mark.parametrize("mode", list(MODES))
def test_an_impossible_allocation_says_how_many_bytes(mode):
    x = rc.input("x", (1,))
    huge = x.expand(2**20, 2**20)
    with raises(rc.AllocationError, "bytes", "TiB", "more than"):
        run(huge + 1.0, {"x": np.ones(1, np.float32)}, mode)


@pytest.mark.parametrize("mode", list(MODES))
def test_bad_feeds_and_dims_are_refcomp_errors(mode):
    z = rc.input("z", ("T",))
    prog = rc.compile(z * 2.0, search=MODES[mode]["search"])
    run = lambda feeds, dims=None: prog.run(feeds, backend=MODES[mode]["backend"], dims=dims)
    with raises(rc.FeedError, "input 'z'", "not a rectangular array"):
        run({"z": [[1.0, 2.0], [3.0]]})
    with raises(rc.BindingError, "'Q'", "not a dimension of this graph", "T"):
        run({"z": np.ones(3, np.float32)}, {"Q": 3})
    with raises(rc.BindingError, "dims['T'] = True"):
        run({"z": np.ones(1, np.float32)}, {"T": True})
    with raises(rc.BindingError, "dims must be a dict"):
        run({"z": np.ones(3, np.float32)}, [3])


def test_two_inputs_with_one_name_show_their_dtypes():
    a, ids = rc.input("a", (3,)), rc.input("a", (3,), "int32")
    out = [a * 2.0, rc.nn.embedding(ids, rc.input("t", (4, 2)))]
    for mode in ("numpy", "plain"):
        with raises(rc.RefcompError, "'a'", "(3,) float32", "(3,) int32"):
            run(out, {"a": np.ones(3, np.float32)}, mode)


def test_dims_hint_is_checked_like_dims():
    x = rc.input("x", ("B", 4))
    for hint, fragment in (
        ({"Q": 3}, "not a dimension of this graph"),
        ({"B": -1}, "non-negative int"),
        ({"B": True}, "non-negative int"),
        ({"B": "big"}, "non-negative int"),
        ([3], "must be a dict"),
    ):
        with raises(rc.BindingError, "dims_hint", fragment):
            rc.compile(x * 2.0, dims_hint=hint)
    with raises(rc.BindingError, "dims['B'] = 'x'"):
        rc.compile(x * 2.0).peak_intermediate_bytes({"B": "x"})


def test_misused_builders_say_what_they_expected():
    x = rc.input("x", ("B", 4))
    with raises(rc.ShapeError, "concat takes a list of tensors", "NoneType"):
        rc.concat(None)
    with raises(rc.ShapeError, "border value must be a number", "Tensor"):
        x.pad([(1, 1), (0, 0)], value=x)
    with raises(rc.ShapeError, "indexing input 'x'", "index tensors must be integers"):
        x[x]  # a float tensor: positions are ids only once made integers
    with raises(rc.ShapeError, "indexing input 'x'", "only ints, slices"):
        x["a"]
    with raises(rc.ShapeError, "correction must be a non-negative int"):
        x.var(1, correction=0.5)
    with raises(rc.ShapeError, "reshape of input 'x'", "not integer arithmetic on dims"):
        x.reshape(-1).pad([(1, 1)]).reshape(4, -1)  # (4 B + 2) / 4 is no whole number


def test_a_dim_only_an_output_view_mentions_is_bound_for_the_search():
    """Found by the fuzzer's shrinker: the search priced the graph without the output views' dims."""
    x = rc.input("x", (3,))
    got = assert_modes_agree((x * 2.0).expand("B", -1), {"x": np.arange(3, dtype=np.float32)}, dims={"B": 2})
    np.testing.assert_array_equal(got, [[0.0, 2.0, 4.0]] * 2)

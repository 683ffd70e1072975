"""Differential fuzzing in the normal test run: random primitive graphs (refcomp/fuzz/)
compiled with the search on and off, run on the host emulator, compared with the float64 NumPy
reference. 70 graphs, 35 to a program, two programs at a time (fixed seed: deterministic), and
`pytest -m slow` runs 210 with every coverage check (each fusion rule applied, each refusal seen).

The long run is `python -m refcomp.fuzz --count 10000 --seed 0` (see the module docstring).
Bugs the fuzzer found outside the search that are still open are listed in fuzz.KNOWN_BUGS: the
random run steers around their triggers (so one known bug does not mask the rest), and each has a
regression test in tests/test_fuzz_regressions.py, which fails until the bug is fixed.
"""
from __future__ import annotations

import io
import time
from dataclasses import replace

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp import fuzz
from refcomp.fuzz.check import TIED, feeds_of
from refcomp.search.fusion_rules import CLEANUP, FUSION

COUNT, PER_PROGRAM, SEED = (
    210,
    35,
    39,
)  # chosen so the 210 graphs reach every move, rule and refusal the checks below name
SLICE = 2 * PER_PROGRAM  # the default run checks these first graphs end to end; `pytest -m slow`, all COUNT
# A program's check is most of a minute of CPU on 2 cores (a plain program's 2 MB of source is 25 s of
# g++ alone); a cold suite sharing the cores took program 1 past 150 s with no bug.
TIMEOUT = 300


def _checked(count: int) -> fuzz.BatchResult:
    """The first `count` graphs checked end to end; every graph compared in both modes, no error."""
    out = io.StringIO()
    start = time.perf_counter()
    total = fuzz.run(
        count, SEED, PER_PROGRAM, progress=True, shrink_failures=True, out=out, jobs=2, timeout=TIMEOUT
    )
    report = out.getvalue()
    assert total.errors == [], report
    assert total.mismatches == [], report
    assert (
        total.compared >= 2 * 2 * count
    )  # every graph, both modes, two bindings (some have several outputs)
    assert total.kernels["search"] < total.kernels["plain"]
    print(f"{count} graphs in {time.perf_counter() - start:.1f} s; kernels {total.kernels}")
    return total


def _assert_the_generator_reaches_every_move(coverage) -> None:
    """A regression in the generator would silently weaken the fuzzing."""
    expected = {
        "sin",
        "exp",
        "log2",
        "sqrt",
        "recip",
        "affine",
        "relu",
        "sigmoid",
        "gelu",
        "add",
        "mul",
        "div",
        "maximum",
        "permute",
        "flip",
        "slice",
        "pad",
        "reshape",
        "expand",
        "unsqueeze",
        "transpose",
        "sum",
        "max",
        "mean",
        "var",
        "softmax",
        "log_softmax",
        "layer_norm",
        "rms_norm",
        "matmul",
        "conv2d",
        "max_pool2d",
        "avg_pool2d",
        "gather",
        "concat",
        "stack",
        "cumsum",
        "where",
        "compare",
        "fmod",
        "argmax",
        "log2_exp2_pad",
        "exp2_product_pad",
        "recip_recip_view",
        "contiguous",
        "where_nan_branch",
        "where_inf_branch",
        "masked_softmax",
        "pow_tensor",
        "pow_negative_base",
        "fragile_index",
        "deep_chain",
        "tanh",
        "erf",
        "erfc",
        "expm1",
        "log1p",
        "gelu_exact",
        "floor",
        "ceil",
        "eq",
        "conv1d",
        "conv3d",
        "attention",
        "norm_matmul",
        "skinny_matmul",
        "layers",
        "einsum",
        "triangle",
        "storage",
        "max_pool_indices",
        "index_list",
        "long_sum",
        "index_copy",
        "paged_attention",
        "paged_projection",
        "paged_rotation",
        "long_max",  # split into chunks by the search, exactly
        "int64_wrap",
        "int32_wrap",
        "float64_detour",
    }
    assert len({op for op in coverage if op.startswith("wide_")}) >= 3  # 16-bit composites of large rows
    missing = expected - set(coverage)
    assert not missing, f"the fuzz run never generated {sorted(missing)}"
    torch_math = {
        "atan",
        "asinh",
        "atanh",
        "sign",
        "round",
        "trunc",
        "elu",
        "softplus",
        "hardswish",
        "cosh",
        "logsumexp",
        "std",
        "atan2",
        "logaddexp",
        "cummax",
        "roll",
        "logcumsumexp",
        "sort",
        "unfold",
        "gather_sorted",
        "median",
        "topk",
    }  # one step draws one of these: several of them, not each, every run
    assert len(torch_math & set(coverage)) >= 6, sorted(torch_math & set(coverage))
    torch_api = {
        "clamp",
        "clamp_tensor",
        "tril",
        "max_pair",
        "max_indices",
        "split",
        "chunk",
        "var_torch",
    }  # issue 28's calls
    assert len(torch_api & set(coverage)) >= 4, sorted(torch_api & set(coverage))
    torch_methods = {
        "nan_to_num",
        "tile",
        "nansum",
        "logit",
        "norm",
        "narrow",
        "frac",
        "remainder",
        "where_method",
        "where_compared",
        "count_nonzero",
        "mse_loss",
        "huber_loss",
        "cosine_similarity",
        "group_norm",
        "adaptive_avg_pool",
        "glu",
        "index_tensor",
        "fmax",
        "nanmean",
        "addcmul",
        "diff",
    }  # the methods and rc.nn functions added after issue 28 (fuzz/torch_steps.py: step_torch_methods)
    assert len(torch_methods & set(coverage)) >= 12, sorted(torch_methods & set(coverage))


def test_random_graphs_match_the_reference_with_and_without_search():
    """The default run's slice: the first two programs checked end to end, and the full run's graphs
    generated (generation alone takes milliseconds a graph; a program's check, most of a minute)."""
    total = _checked(SLICE)
    assert total.refusals, total.refusals  # feeds or a binding the reference refuses were refused alike
    _assert_the_generator_reaches_every_move(
        {op for i in range(COUNT) for op in fuzz.generate(SEED, i, tuple(fuzz.KNOWN_BUGS)).ops}
    )


@pytest.mark.slow
def test_the_full_run_matches_and_reaches_every_move_and_rule():
    total = _checked(COUNT)
    _assert_the_generator_reaches_every_move(total.coverage)
    # the searched programs went through every fusion rule (online_softmax through the attention moves)
    # one pass over a row's statistics pays only over rows longer than the fuzzer's tensors of at most
    # 6,000 elements allow, many of them (search.tile_flops prices Welford's update and merge): it is
    # checked searched and forced on such rows by tests/test_fusion_rules.py and test_fusion_targets.py
    unused = {r.name for r in FUSION + CLEANUP} - set(total.rules) - {"one_pass_statistics"}
    assert not unused, f"the searched programs never applied {sorted(unused)}: {total.rules}"
    assert total.rules.get(TIED, 0) > 0, f"no move was tied across repeated layers: {total.rules}"
    assert total.rules.get("join_views", 0) > 0, f"no join of neighbours read as one view: {total.rules}"
    assert total.launches.get("columns", 0) > 0, (
        f"the search chose no block per 32 outputs (reduce_columns.cu.j2): {total.launches}"
    )
    tallied = lambda words: sum(n for launch, n in total.launches.items() if words(launch))  # noqa: E731
    assert tallied(lambda launch: "in K slices" in launch), f"no matmul split K in slices: {total.launches}"
    assert tallied(lambda launch: "across blocks" in launch and "online" not in launch), (
        f"no plain matmul split K across blocks (split-K in one kernel): {total.launches}"
    )
    assert tallied(lambda launch: "across blocks (online" in launch), (
        f"no online softmax split K across blocks (flash-decoding): {total.launches}"
    )
    shown = [  # words of a tallied launch, and what their absence means
        ("carrying a Scatter", "no matmul wrote a Scatter's rows (search/carry.py)"),
        ("512+ threads", "no reduction or row of 512 or 1,024 threads a block"),
        ("rows' statistics", "no matmul computed the statistics of the rows it stores (search/row_stats.py)"),
        ("rows' maximum", "no matmul computed the maximum of the rows it stores (search/row_stats.py)"),
        ("finishing its rows' reduction", "no reduction's last blocks finished a split maximum (tail.py)"),
        ("staging A's loads of k", "no matmul staging A's loads of k (codegen/staged.py)"),
        ("holding A's loads of a row", "no matmul holding A's loads of a row (codegen/staged.py)"),
    ]
    for words, missing in shown:
        assert tallied(lambda launch: words in launch), f"{missing}: {total.launches}"
    assert total.resident_runs > 0 and total.resident_left > 0, (
        "no run held its inputs on the backend and left a Scatter's write there (exec/resident.py)"
    )
    assert total.rules.get("split_k", 0) > 0, (
        f"no skinny contraction was split (search/split.py): {total.rules}"
    )
    # bindings a view cannot take and stray embedding ids were tried, and refused as the reference refuses
    assert total.refusals.get("BindingError", 0) > 0 and total.refusals.get("FeedError", 0) > 0, (
        total.refusals
    )


def test_generation_is_deterministic_and_replayable():
    a, b = fuzz.generate(SEED, 17), fuzz.generate(SEED, 17)
    assert a.code() == b.code()
    assert fuzz.bindings_for(SEED, 3) == fuzz.bindings_for(SEED, 3)
    feeds = a.feeds("", {"B": 2, "T": 3}, 0)
    again = b.feeds("", {"B": 2, "T": 3}, 0)
    assert all(np.array_equal(feeds[k], again[k]) for k in feeds)
    outputs = a.build("")  # the printed code builds the same graph
    namespace = {"rc": rc}
    exec(a.code(), namespace)
    assert set(namespace["outputs"]) == set(outputs)


def test_every_seed_generates_graphs():
    """Generation alone never fails, whatever the seed: the long runs use seeds the test run does not
    (a step once gave an input the shape (T + 1, 8), which no input can have)."""
    for seed in range(1, 9):
        for i in range(150):
            graph = fuzz.generate(seed, i)
            assert graph.code() and graph.inputs, (seed, i)


def test_generated_graphs_stay_in_safe_domains():
    """The generator's interval tracking works: references are finite (unless an input holds planted
    infinities or NaN, or NaN is NumPy's answer, or the edge binding empties a reduced axis), and the
    float32 reference is within a quarter of the tolerance of the float64
    one almost everywhere (well-conditioned graphs)."""
    worst, total = 0, 0
    for i in range(60):
        graph = fuzz.generate(SEED + 1, i)
        outputs = graph.build("")
        for k, binding in enumerate(fuzz.bindings_for(SEED + 1, i)):
            feeds = graph.feeds("", binding, k)
            try:
                want64 = rc.evaluate(
                    outputs, feeds, dims=fuzz.own_dims(outputs.values(), binding), precision="float64"
                )
            except (rc.BindingError, rc.FeedError):
                continue  # a binding these views cannot take, or stray ids: refused, nothing to compare
            want32 = rc.evaluate(
                outputs, feeds, dims=fuzz.own_dims(outputs.values(), binding), precision="float32"
            )
            for key in outputs:
                finite = np.isfinite(want64[key])
                assert not graph.finite or k == fuzz.EDGE_BINDING or finite.all(), (
                    f"non-finite reference\n{graph.code()}"
                )
                tol = golden.FLOAT32_TOLERANCE["atol"] + golden.FLOAT32_TOLERANCE["rtol"] * np.abs(
                    want64[key]
                )
                with np.errstate(invalid="ignore"):
                    worst += int(np.sum((np.abs(want32[key] - want64[key]) > tol / 4) & finite))
                total += int(finite.sum())
    assert worst <= total // 1000, f"{worst} of {total} elements are ill-conditioned"


def test_comparison_is_nan_aware():
    """A finite reference value needs a close finite value, a NaN or infinite one a NaN or infinity."""
    want = np.array([1.0, np.nan, np.inf, -np.inf])
    assert fuzz.compare(want.copy(), want, want.astype(np.float32)) is None
    assert fuzz.compare(np.array([1.0, -np.inf, np.nan, -np.inf]), want, want.astype(np.float32)) is None
    for wrong in (
        [1.0, 0.0, np.inf, -np.inf],
        [1.0, np.nan, 1e30, -np.inf],
        [np.nan, np.nan, np.inf, -np.inf],
        [1.1, np.nan, np.inf, -np.inf],
    ):
        assert "1 of 4 elements differ" in fuzz.compare(np.array(wrong), want, want.astype(np.float32))


def test_an_output_float32_computes_badly_everywhere_allows_that_error_everywhere():
    """Seed 46's graph 100: attention over scores of about 10,000 (a layer norm of a ramp through two
    matmuls). float32 is off by about 2e-3 in most rows whichever way it rounds, and the program's
    worst elements are not the float32 reference's: within 2x the reference's worst error, the
    program matches; a real error beyond it, or a small one in a well-conditioned output, does not."""
    graph = fuzz.generate(46, 100)
    outputs = {"v11": graph.build("")["v11"]}
    binding = fuzz.own_dims(outputs.values(), {})
    feeds = feeds_of(outputs, graph.feeds("", binding, 2))  # drawn as for the whole graph
    want64 = rc.evaluate(outputs, feeds, dims=binding, precision="float64")["v11"]
    want32 = rc.evaluate(outputs, feeds, dims=binding, precision="float32")["v11"]
    got = rc.compile(outputs, search=False, cache=False).run(feeds, backend="emulator", dims=binding)["v11"]
    own, err = np.abs(want32 - want64), np.abs(got - want64)
    assert own.max() > 1e-3 and (err > 4 * own + 1e-4 * np.abs(want64) + 1e-5).any()  # the old oracle failed
    assert fuzz.compare(got, want64, want32) is None
    wrong = got.copy()
    wrong[3, 5] += 0.05
    assert "1 of" in fuzz.compare(wrong, want64, want32)
    calm = np.linspace(-1.0, 1.0, 64)
    nudged = calm.copy()
    nudged[7] += 1e-3
    assert "1 of 64" in fuzz.compare(nudged, calm, calm.astype(np.float32))


def test_the_harness_catches_a_backend_that_does_not_refuse(monkeypatch):
    """A program that runs where the reference refuses a binding is a mismatch, naming the graph."""
    from refcomp.exec import program

    graph = fuzz.FuzzGraph(
        SEED, 0, [fuzz.InputSpec("x0", ("B", "T"))], [("v0", "x0[:, 3]")], ["v0"], ["fragile_index"]
    )
    assert fuzz.check_batch([graph], [{"B": 2, "T": 2}]).refusals == {"BindingError": 2}
    monkeypatch.setattr(program, "check_binding", lambda *args: None)
    res = fuzz.check_batch([graph], [{"B": 2, "T": 2}], modes=("plain",))
    assert [m.output for m in res.mismatches] == ["(refusal)"] and "returned values" in res.mismatches[
        0
    ].message


def test_the_harness_catches_a_miscompiled_op(monkeypatch):
    """A deliberately wrong C expression for Sin (cosf) must show up as a mismatch in both modes."""
    from refcomp.ops import primitives
    monkeypatch.setitem(primitives.OPS, "Sin", replace(primitives.OPS["Sin"], c=primitives.C("cosf({0})")))
    graph = fuzz.FuzzGraph(
        SEED, 0, [fuzz.InputSpec("x0", ("B", 3))], [("v0", "(x0 * 2.0).sin()")], ["v0"], ["sin"]
    )
    res = fuzz.check_batch([graph], [{"B": 2, "T": 1}])
    assert {m.mode for m in res.mismatches} == {"search", "plain"}
    assert "MISMATCH" in res.mismatches[0].report() and "(x0 * 2.0).sin()" in res.mismatches[0].report()


def test_the_harness_catches_a_reference_that_overflows():
    """Where the generator's intervals promise finite values, a non-finite reference is a mismatch:
    comparing with it could not show an overflow that the reference shares (16-bit composites once
    overflowed inside, in every backend alike)."""
    graph = fuzz.FuzzGraph(
        SEED,
        0,
        [fuzz.InputSpec("x0", (3,), "positive")],
        [("v0", "x0.half()"), ("v1", "(v0 * 60000.0)")],
        ["v1"],
        ["storage", "mul"],
    )
    res = fuzz.check_batch([graph], [{"B": 1, "T": 1}], modes=())
    assert [(m.mode, m.output) for m in res.mismatches] == [
        ("reference", "v1")
    ] and "not finite" in res.mismatches[0].message
    assert fuzz.shrink(graph, {"B": 1, "T": 1}, 0, "reference").lines == graph.lines


def test_shrinking_finds_the_smallest_failing_prefix(monkeypatch):
    from refcomp.ops import primitives
    monkeypatch.setitem(primitives.OPS, "Sin", replace(primitives.OPS["Sin"], c=primitives.C("cosf({0})")))
    graph = fuzz.FuzzGraph(
        SEED,
        0,
        [fuzz.InputSpec("x0", (3,)), fuzz.InputSpec("x1", (3,))],
        [("v0", "(x1 * 3.0)"), ("v1", "x0.sin()"), ("v2", "(v1 + v0)"), ("v3", "v2.exp()")],
        ["v3"],
        ["mul", "sin", "add", "exp"],
    )
    small = fuzz.shrink(graph, {}, 0, "plain")
    assert small.lines == [("v1", "x0.sin()")] and [s.name for s in small.inputs] == ["x0"]


def test_cli_runs_a_small_batch_and_replays(capsys):
    assert fuzz.main(["--count", "4", "--per-program", "4", "--seed", "5", "--jobs", "1"]) == 0
    assert "[fuzz] summary: 4 graphs" in capsys.readouterr().out
    assert fuzz.main(["--replay", "5:2", "--per-program", "4", "--modes", "plain"]) == 0
    assert "0 mismatches, 0 errors" in capsys.readouterr().out


def test_the_cost_model_counts_fuzzed_programs_as_the_profiler_does():
    """Random programs, plain and searched, profiled: the cost model's memory counts (codegen/access.py)
    equal the profiler's on every kernel (`python -m refcomp.fuzz --model` does this at scale)."""
    out = io.StringIO()
    total = fuzz.run(6, 5, 6, progress=True, shrink_failures=False, out=out, jobs=1, timeout=120, model=True)
    assert total.errors == [] and total.mismatches == [], out.getvalue()
    assert total.model_checked == total.kernels["search"] + total.kernels["plain"] > 6


@pytest.mark.parametrize("argv, said", [
    (["--replay", "abc"], "SEED:INDEX"),
    (["--count", "1", "--per-program", "0"], "--per-program"),
    (["--count", "0"], "--count"),
    (["--modes", "bogus", "--count", "1"], "--modes"),
])
def test_cli_refuses_bad_arguments_in_one_line(argv, said, capsys):
    """A ValueError traceback (a malformed --replay, --per-program 0) or a silent no-op (--modes
    bogus) before; argparse's one-line error and exit status 2 now."""
    with pytest.raises(SystemExit) as exited:
        fuzz.main(argv)
    assert exited.value.code == 2 and said in capsys.readouterr().err

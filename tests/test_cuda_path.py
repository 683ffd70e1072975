"""The CUDA path on the CPU: every golden case compiled, run on the host emulator, and built by nvcc.

Outputs are compared with the stored float64 golden outputs at golden.FLOAT32_TOLERANCE
(rtol 1e-4, atol 1e-5), at every stored binding (two for symbolic cases). The searched program runs
every case by default; the plain lowering (one kernel per node, a library of its own per case), the
nvcc and the AddressSanitizer builds run on cuda_cases.SLICE, which reaches every feature of every
plain program, and on every case under `pytest -m slow`.
"""
import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.exec.nvcc import nvcc_available, nvcc_check

from cuda_cases import CASE_IDS, CASES, check_case, compiled, sliced


@pytest.mark.parametrize("case", sliced())
def test_plain_lowering_matches_golden_on_emulator(case):
    assert check_case(case, "emulator", search=False) == []


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_searched_program_matches_golden_on_emulator(case):
    assert check_case(case, "emulator", search=True) == []


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_saved_program_runs_like_the_original_on_emulator(case, tmp_path):
    """Program.save then rc.load_program: the same source, and identical outputs at every binding."""
    prog = compiled(case.name, True)
    prog.save(tmp_path / "program.json")
    loaded = rc.load_program(tmp_path / "program.json")
    assert loaded.source == prog.source
    for i in range(len(case.bindings)):
        feeds, dims = golden.case_feeds(case, i)
        want, got = (
            prog.run(feeds, backend="emulator", dims=dims),
            loaded.run(feeds, backend="emulator", dims=dims),
        )
        assert golden.compare(got, want, dict(rtol=0, atol=0)) == []  # bit for bit (NaN matching NaN)


@pytest.mark.parametrize("search", [False, True], ids=["plain", "search"])
@pytest.mark.parametrize("case", sliced())
def test_source_builds_with_nvcc_for_sm90(case, search):
    reason = nvcc_available()
    if reason:
        pytest.skip(f"nvcc check skipped: {reason}")
    prog = compiled(case.name, search)
    report = nvcc_check(prog.source)  # any warning raises
    assert set(report.kernels) == {k.name for k in prog.kernels}
    assert all(r.spill_store_bytes == 0 and r.spill_load_bytes == 0 for r in report.kernels.values())


@pytest.mark.parametrize("case", sliced())
def test_plain_lowering_is_clean_under_address_sanitizer(case, monkeypatch):
    from refcomp.exec import backends
    from refcomp.exec.emulator import EmulatorBackend
    monkeypatch.setattr(backends, "_instance", lambda name: EmulatorBackend(sanitize=True))
    prog = rc.compile(case.build(), search=False)  # a fresh program: modules are cached per backend name
    feeds, dims = golden.case_feeds(case, 0)
    got = prog.run(feeds, backend="emulator", dims=dims)
    assert golden.compare(got, golden.expected(case, 0), golden.case_tolerance(case)) == []


def test_one_module_serves_every_binding():
    x = rc.input("x", ("B", "T"))
    prog = rc.compile((x * 2.0).sum(-1))
    for b, t in [(1, 1), (3, 5), (2, 300)]:
        X = np.random.default_rng(b).standard_normal((b, t)).astype(np.float32)
        np.testing.assert_allclose(
            prog.run({"x": X}, backend="emulator"), (2 * X.astype(np.float64)).sum(-1), rtol=1e-5, atol=1e-5
        )
    assert "long long dim" in prog.source and "300" not in prog.source


def test_long_reductions_use_the_block_template_and_match():
    x = rc.input("x", (3, 1000))
    prog = rc.compile({"s": x.sum(-1), "m": x.amax(-1)}, search=False)
    assert {k.launch.mode for k in prog.kernels} == {"block_per_output"}
    assert "__syncthreads()" in prog.source
    X = np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32)
    out = prog.run({"x": X}, backend="emulator")
    np.testing.assert_allclose(out["s"], X.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(out["m"], X.max(-1))


def test_input_names_never_reach_the_code():
    """A kernel's comment names its inputs (in0 = x), escaped into that one comment line."""
    evil = 'x; system("rm -rf /"); //\n*/ #include'
    x = rc.input(evil, (4,))
    prog = rc.compile(x.exp() + 1.0)
    named = [line.strip() for line in prog.source.splitlines() if "system" in line or "#include" in line]
    assert named and all(line.startswith("//") and "*/" not in line for line in named), named
    X = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(prog.run({evil: X}, backend="emulator"), np.exp(X) + 1, rtol=1e-6)


def test_memory_plan_reuses_buffers_along_a_chain():
    x = rc.input("x", ("N",))
    y = x
    for _ in range(6):
        y = y.sin()
    prog = rc.compile(y, search=False)
    assert len(prog.kernels) == 6
    # five intermediates of N floats, but at most two are alive at once
    assert prog.peak_intermediate_bytes({"N": 1000}) == 2 * 4000
    X = np.linspace(-1, 1, 1000, dtype=np.float32)
    np.testing.assert_allclose(
        prog.run({"x": X}, backend="emulator"),
        np.sin(np.sin(np.sin(np.sin(np.sin(np.sin(X.astype(np.float64))))))),
        rtol=1e-5,
        atol=1e-6,
    )


def test_run_returns_the_structure_it_was_given(rng):
    x = rc.input("x", (2, 3))
    X = rng.standard_normal((2, 3)).astype(np.float32)
    assert isinstance(rc.compile([x + 1.0, x * 2.0]).run({"x": X}, backend="emulator"), list)
    out = rc.compile({"a": x.T, "b": x.sum()}).run({"x": X}, backend="emulator")
    np.testing.assert_array_equal(out["a"], X.T)
    np.testing.assert_allclose(out["b"], X.sum(), rtol=1e-6)


def test_numpy_backend_is_the_reference(rng):
    x = rc.input("x", (5,))
    X = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal(
        rc.compile(x.exp()).run({"x": X}, backend="numpy"), rc.evaluate(x.exp(), {"x": X})
    )


def test_out_of_range_embedding_ids_are_rejected_before_launch():
    ids, table = rc.input("ids", (3,), dtype="int32"), rc.input("table", (4, 2))
    prog = rc.compile(rc.nn.embedding(ids, table))
    with pytest.raises(rc.RefcompError, match="ids"):
        prog.run(
            {"ids": np.array([0, 4, 1], np.int32), "table": np.zeros((4, 2), np.float32)}, backend="emulator"
        )


def test_unknown_backend_is_an_error():
    x = rc.input("x", (2,))
    with pytest.raises(rc.RefcompError, match="unknown backend"):
        rc.compile(x + 1.0).run({"x": np.zeros(2, np.float32)}, backend="tpu")

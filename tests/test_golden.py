"""The golden cases: stored data vs independent oracles, the reference vs stored data, and the CLI."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from refcomp import golden
from refcomp.cli import main
from refcomp.golden_update import update_result

CASES = golden.load_cases()
RUNS = [pytest.param(c, i, id=f"{c.name}[{i}]") for c in CASES for i in range(len(c.bindings))]
REQUIRED_TAGS = {"primitive", "view", "highlevel", "nn", "symbolic", "model", "broadcast"}


@pytest.fixture(autouse=True)
def _default_golden_dir(monkeypatch):
    monkeypatch.delenv("REFCOMP_GOLDEN_DIR", raising=False)


def _report(case, i, problems):
    return f"{case.name}[{i}] at {case.bindings[i]}:\n  " + "\n  ".join(problems)


# --- the data ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("case,i", RUNS)
def test_stored_outputs_agree_with_the_oracle(case, i):
    """The golden data is checked against a second, independent (NumPy float64) implementation."""
    feeds, _ = golden.case_feeds(case, i)
    problems = golden.compare(
        golden.expected(case, i), golden.run_oracle(case, feeds), golden.case_tolerance(case, "oracle")
    )
    assert not problems, _report(case, i, problems)


@pytest.mark.parametrize("case,i", RUNS)
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_reference_reproduces_stored_outputs(case, i, precision):
    feeds, dims = golden.case_feeds(case, i)
    got = golden.evaluate_case(case, feeds, dims, precision)
    problems = golden.compare(got, golden.expected(case, i), golden.case_tolerance(case, precision))
    assert not problems, _report(case, i, problems)
    if precision == "float32":  # the reference must leave most of the budget to the compiled backends
        quarter = {k: v / 4 for k, v in golden.case_tolerance(case).items()}
        problems = golden.compare(got, golden.expected(case, i), quarter)
        assert not problems, "float32 reference uses over 1/4 of its tolerance: " + _report(case, i, problems)


@pytest.mark.parametrize("case,i", RUNS)
def test_stored_data_is_current(case, i):
    """The stored binding and inputs are what the case definition draws now (no stale files)."""
    feeds, dims = golden.case_feeds(case, i)
    assert dims == case.bindings[i]
    fresh = golden.make_feeds(case, i)
    assert sorted(fresh) == sorted(feeds)
    for name, array in fresh.items():
        assert array.dtype == feeds[name].dtype and array.dtype in (np.float32, np.int32), name
        np.testing.assert_array_equal(array, feeds[name], err_msg=name)
    outputs = golden.expected(case, i)
    assert sorted(outputs) == sorted(case.build()), "stored outputs != build()'s output names"
    assert all(v.dtype == np.float64 for v in outputs.values())


def test_inventory():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    assert len(CASES) >= 40
    symbolic = [c for c in CASES if c.symbolic]
    assert len(symbolic) >= 10
    for case in CASES:
        if case.symbolic:
            assert len(case.bindings) >= 2, case.name
            assert "symbolic" in case.tags, case.name
        for i in range(len(case.bindings)):
            assert golden.data_path(case, i).is_file(), f"{case.name}[{i}]: no data file"
    assert REQUIRED_TAGS <= {t for c in CASES for t in c.tags}
    known = {golden.data_path(c, i).name for c in CASES for i in range(len(c.bindings))}
    assert {p.name for p in golden.stored_files()} == known, "stray data files"


def test_golden_folder_is_small():
    total = sum(
        p.stat().st_size
        for p in golden.golden_dir().rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    )
    assert total < 10 * 2 ** 20
    assert golden.data_size() < 2 * 2 ** 20


def test_seeds_are_deterministic_and_distinct():
    seeds = {golden.seed_of(c, i) for c in CASES for i in range(len(c.bindings))}
    assert len(seeds) == len(RUNS)
    case = CASES[0]
    a, b = golden.make_feeds(case, 0), golden.make_feeds(case, 0)
    assert all(np.array_equal(a[k], b[k]) for k in a)


# --- compare ----------------------------------------------------------------------------------------
def test_compare_reports_name_errors_and_first_bad_index():
    want = {"y": np.array([[1.0, 2.0], [3.0, 4.0]]), "z": np.zeros(3)}
    got = {"y": np.array([[1.0, 2.5], [3.0, 4.2]]), "z": np.zeros(3)}
    (msg,) = golden.compare(got, want, dict(rtol=1e-3, atol=1e-3))
    assert "'y'" in msg and "2 of 4" in msg and "first bad index (0, 1)" in msg and "max abs err 0.5" in msg
    assert golden.compare(got, got, golden.FLOAT64_TOLERANCE) == []


def test_compare_shapes_missing_nan_inf():
    tol = golden.FLOAT32_TOLERANCE
    assert "shape" in golden.compare({"y": np.zeros(3)}, {"y": np.zeros(4)}, tol)[0]
    assert "missing" in golden.compare({}, {"y": np.zeros(1)}, tol)[0]
    assert "not expected" in golden.compare({"y": np.zeros(1), "x": np.zeros(1)}, {"y": np.zeros(1)}, tol)[0]
    special = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert golden.compare({"y": special}, {"y": special.copy()}, tol) == []
    assert golden.compare({"y": np.array([np.nan, np.inf, 1.0])}, {"y": np.array([1.0, -np.inf, 1.0])}, tol)[
        0
    ].count("2 of 3")


def test_compare_uses_allclose_semantics():
    want = np.array([1.0, 100.0, 0.0])
    tol = golden.FLOAT32_TOLERANCE
    edge = want + (tol["atol"] + tol["rtol"] * np.abs(want)) * 0.99
    assert golden.compare({"y": edge}, {"y": want}, tol) == []
    np.testing.assert_allclose(edge, want, **tol)
    over = want + (tol["atol"] + tol["rtol"] * np.abs(want)) * 1.01
    assert len(golden.compare({"y": over}, {"y": want}, tol)) == 1


# --- the CLI ----------------------------------------------------------------------------------------
def _copy_golden(tmp_path: Path) -> Path:
    target = tmp_path / "golden"
    shutil.copytree(golden.default_golden_dir(), target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def _corrupt(path: Path, key: str, delta: float) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = arrays[key].copy()
    arrays[key].flat[0] += delta
    np.savez_compressed(path, **arrays)


def test_cli_check_passes(capsys):
    assert main(["golden", "check"]) == 0
    assert "all agree" in capsys.readouterr().out


def test_cli_check_detects_a_corrupted_value(tmp_path, monkeypatch, capsys):
    copy = _copy_golden(tmp_path)
    _corrupt(copy / "data" / "hl_softmax__0.npz", "out.last", 1e-3)
    monkeypatch.setenv("REFCOMP_GOLDEN_DIR", str(copy))
    assert golden.data_dir() == copy / "data"
    assert main(["golden", "check", "--precision", "float64"]) != 0
    out = capsys.readouterr().out
    assert "hl_softmax[0]" in out and "'last'" in out and "first bad index (0, 0, 0)" in out
    assert [line for line in out.splitlines() if line.startswith("FAIL")] == [
        line for line in out.splitlines() if "hl_softmax" in line and line.startswith("FAIL")
    ]


def test_cli_update_reports_changed_new_and_removed(tmp_path, monkeypatch, capsys):
    copy = _copy_golden(tmp_path)
    data = copy / "data"
    _corrupt(data / "nn_conv2d_basic__0.npz", "out.y", -0.25)
    (data / "prim_add__0.npz").unlink()
    shutil.copy(data / "prim_mul__0.npz", data / "old_case__0.npz")
    assert main(["golden", "check", "--golden-dir", str(copy), "-k", "prim_add"]) == 1
    assert "no data file prim_add__0.npz" in capsys.readouterr().out

    monkeypatch.setenv("REFCOMP_GOLDEN_DIR", str(copy))
    assert main(["golden", "update", "--dry-run"]) == 0
    assert (data / "old_case__0.npz").exists()
    capsys.readouterr()
    assert main(["golden", "update"]) == 0
    out = capsys.readouterr().out
    assert "1 new, 1 removed, 1 changed" in out
    assert "new      prim_add" in out and "removed  old_case__0" in out
    assert "changed  nn_conv2d_basic[0]: output y max abs diff 0.25" in out
    assert not (data / "old_case__0.npz").exists()
    assert main(["golden", "check", "--precision", "float64"]) == 0
    assert main(["golden", "update"]) == 0
    assert "0 new, 0 removed, 0 changed" in capsys.readouterr().out


def test_update_keeps_outputs_a_few_ulp_apart(tmp_path, monkeypatch, capsys):
    """Another CPU's SIMD lanes sum the float64 reference in another order: a last-bit difference
    is not a change (the file stays as it was), a difference past FLOAT64_TOLERANCE is."""
    copy = _copy_golden(tmp_path)
    data = copy / "data"
    path = data / "nn_conv2d_basic__0.npz"
    with np.load(path) as z:
        y = z["out.y"].flat[0]
    _corrupt(path, "out.y", 4 * np.spacing(y))
    before = path.read_bytes()
    monkeypatch.setenv("REFCOMP_GOLDEN_DIR", str(copy))
    assert main(["golden", "update", "-k", "nn_conv2d_basic"]) == 0
    assert ", 0 changed, 1 unchanged" in capsys.readouterr().out
    assert path.read_bytes() == before
    _corrupt(path, "out.y", 1e-9 * max(1.0, abs(y)))
    assert main(["golden", "update", "-k", "nn_conv2d_basic"]) == 0
    assert "changed  nn_conv2d_basic[0]: output y max abs diff" in capsys.readouterr().out


def test_update_refuses_outputs_that_disagree_with_the_oracle(tmp_path, monkeypatch):
    copy = _copy_golden(tmp_path)
    monkeypatch.setenv("REFCOMP_GOLDEN_DIR", str(copy))
    case = next(c for c in golden.load_cases() if c.name == "prim_sin")
    broken = golden.GoldenCase(
        case.name, case.build, case.make_inputs, lambda f: {"y": np.cos(f["x"].astype(np.float64))}
    )
    before = (copy / "data" / "prim_sin__0.npz").read_bytes()
    result = update_result(cases=[broken], names=["prim_sin"])
    assert not result.ok and result.refused[0][0] == "prim_sin[0]"
    assert (copy / "data" / "prim_sin__0.npz").read_bytes() == before


def test_check_reports_stale_inputs(tmp_path, monkeypatch):
    copy = _copy_golden(tmp_path)
    _corrupt(copy / "data" / "prim_exp2__0.npz", "in.x", 0.5)
    monkeypatch.setenv("REFCOMP_GOLDEN_DIR", str(copy))
    (failure,) = golden.check(names=["prim_exp2"])
    assert failure.case == "prim_exp2" and failure.what == "data" and "differ from what" in str(failure)


def test_python_m_refcomp():
    root = Path(golden.__file__).resolve().parent.parent
    env = {k: v for k, v in os.environ.items() if k != "REFCOMP_GOLDEN_DIR"}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run(
        [sys.executable, "-m", "refcomp", "golden", "check", "-k", "prim_add", "-k", "model_mlp"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 cases, 3 bindings" in done.stdout

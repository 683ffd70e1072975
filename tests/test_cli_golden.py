"""`refcomp golden add` and `refcomp golden check --dir`: golden-output tests for a user's own model."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from refcomp import golden
from refcomp.cli import main

MODEL = '''
import refcomp as rc

def tiny():
    x = rc.input("x", ("B", 8))
    w = rc.input("w", (8, 4))
    return {"h": (x @ w).relu(), "s": x.sum(axis=-1)}

def one():
    return rc.input("x", (3, 5)).exp()

def not_tensors():
    return 42
'''


@pytest.fixture
def model(tmp_path) -> Path:
    path = tmp_path / "models" / "model.py"
    path.parent.mkdir()
    path.write_text(MODEL)
    return path


def _corrupt(path: Path, key: str) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = arrays[key] + 1e-3
    np.savez(path, **arrays)


def test_add_then_check_then_catch_a_corrupted_output(model, tmp_path, monkeypatch, capsys):
    cases = tmp_path / "cases"
    assert (
        main(["golden", "add", f"{model}:tiny", "--name", "tiny", "--dir", str(cases), "--dims", "B=2"]) == 0
    )
    assert main(["golden", "add", f"{model}:one", "--name", "one", "--dir", str(cases)]) == 0
    parts = golden.read_data(cases / "tiny.npz")
    assert (
        sorted(parts["in"]) == ["w", "x"] and parts["dims"] == {"B": 2} and sorted(parts["out"]) == ["h", "s"]
    )
    assert parts["out"]["h"].dtype == np.float64 and parts["meta"]["target"] == "../models/model.py:tiny"
    assert sorted(golden.read_data(cases / "one.npz")["out"]) == ["y"]
    capsys.readouterr()

    monkeypatch.chdir(
        model.parent
    )  # the stored target is relative to the folder, not to the working directory
    assert main(["golden", "check", "--dir", str(cases), "--backend", "emulator", "--no-search"]) == 0
    out = capsys.readouterr().out
    assert (
        "PASS tiny: float64, float32, emulator (5 kernels)" in out and "PASS one:" in out
    )  # plain: 5 kernels
    assert out.splitlines()[-1] == f"golden check: 2 cases in {cases}: all agree"

    _corrupt(cases / "tiny.npz", "out.h")
    assert main(["golden", "check", "--dir", str(cases), "--backend", "numpy"]) == 1
    out = capsys.readouterr().out
    assert (
        "FAIL tiny (float64): output 'h'" in out
        and "FAIL tiny (numpy): output 'h'" in out
        and "PASS one:" in out
    )
    assert out.splitlines()[-1] == f"golden check: 1 of 2 cases failed in {cases}: tiny"
    assert main(["golden", "check", "--dir", str(cases), "--backend", "numpy", "-k", "one"]) == 0
    capsys.readouterr()
    for selector in (["-k", "tinny"], ["--case", "tinny"]):
        assert main(["golden", "check", "--dir", str(cases), "--backend", "numpy", *selector]) == 2
        assert "did you mean 'tiny'?" in capsys.readouterr().err


def test_the_same_name_draws_the_same_inputs(model, tmp_path):
    for folder in ("a", "b"):
        assert main(["golden", "add", f"{model}:one", "--name", "same", "--dir", str(tmp_path / folder)]) == 0
    a, b = (golden.read_data(tmp_path / f / "same.npz") for f in ("a", "b"))
    assert np.array_equal(a["in"]["x"], b["in"]["x"]) and np.array_equal(a["out"]["y"], b["out"]["y"])


@pytest.mark.parametrize("argv, says", [
    (["{model}:tiny", "--name", "t"], "symbolic dims B: bind them with --dims B=..."),
    (["{model}:not_tensors", "--name", "t"], "must return a dict of named output tensors or one tensor"),
    (["nn_layer_norm", "--name", "t"], "golden add takes FILE.py:FUNCTION"),
    (["{model}:one", "--name", "a/b"], "--name 'a/b'"),
    (["{model}:one", "--name", "exists"], "exists (add --force to replace it)"),
])
def test_add_mistakes_exit_2(model, tmp_path, argv, says, capsys):
    main(["golden", "add", f"{model}:one", "--name", "exists", "--dir", str(tmp_path / "cases")])
    capsys.readouterr()
    assert (
        main(["golden", "add", *[a.format(model=model) for a in argv], "--dir", str(tmp_path / "cases")]) == 2
    )
    err = capsys.readouterr().err
    assert err.startswith("refcomp: error: ") and err.count("\n") == 1 and says in err, err


def test_check_dir_mistakes_exit_2(tmp_path, capsys):
    assert main(["golden", "check", "--dir", str(tmp_path / "nowhere")]) == 2
    assert main(["golden", "check", "--dir", str(tmp_path), "--backend", "cuda"]) == 2
    assert main(["golden", "check", "--dir", str(tmp_path)]) == 2  # no cases there
    assert main(["golden", "check", "--backend", "numpy"]) == 2  # --backend without --dir
    assert capsys.readouterr().err.count("refcomp: error: ") == 4


def test_a_case_whose_model_is_gone_fails_alone(model, tmp_path, capsys):
    cases = tmp_path / "cases"
    for name in ("keep", "gone"):
        assert main(["golden", "add", f"{model}:one", "--name", name, "--dir", str(cases)]) == 0
    parts = golden.read_data(cases / "gone.npz")
    golden.write_data(
        cases / "gone.npz", parts["in"], parts["dims"], parts["out"], meta={"target": "missing.py:one"}
    )
    assert main(["golden", "check", "--dir", str(cases), "--backend", "numpy"]) == 1
    out = capsys.readouterr().out
    assert "FAIL gone (load): no such file" in out and "PASS keep" in out


def test_check_without_dir_is_unchanged(capsys):
    assert main(["golden", "check", "-k", "prim_add"]) == 0
    assert "all agree" in capsys.readouterr().out

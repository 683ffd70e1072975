"""`refcomp generate` and examples/generate.py end to end on the reference (no compile: quick)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from refcomp.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_refcomp_generate_prints_tokens_and_rate(capsys):
    assert (
        main(
            [
                "generate",
                "--backend",
                "numpy",
                "--vocab",
                "32",
                "--layers",
                "1",
                "--d-model",
                "16",
                "--heads",
                "2",
                "--batch",
                "2",
                "--max-new-tokens",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("[0] 1 2 3 4 | ") and len(out[0].split("|")[1].split()) == 3
    assert out[1].startswith("[1] 2 3 4 5 | ")
    assert "tokens/s" in out[2] and "0 compiles" in out[2]


def test_refcomp_generate_refuses_bad_arguments(capsys):
    assert main(["generate", "--backend", "numpy", "--prompt", "1,x"]) == 2
    assert "comma-separated" in capsys.readouterr().err
    assert (
        main(["generate", "--backend", "numpy", "--vocab", "32", "--top-k", "99", "--temperature", "1"]) == 2
    )
    assert "top_k" in capsys.readouterr().err
    assert main(["generate", "--backend", "numpy", "--weights", "w.safetensors"]) == 2
    assert "--config" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", "[" * 100_000 + "]" * 100_000])
def test_refcomp_generate_refuses_a_config_that_is_no_object(tmp_path, capsys, text):
    config = tmp_path / "config.json"
    config.write_text(text)
    argv = ["generate", "--backend", "numpy", "--weights", "w.safetensors", "--config", str(config)]
    assert main(argv) == 2
    assert f"--config {config}" in capsys.readouterr().err


def test_the_example_runs(capsys):
    spec = importlib.util.spec_from_file_location("generate_example", ROOT / "examples" / "generate.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert (
        example.main(
            [
                "--backend",
                "numpy",
                "--layers",
                "1",
                "--d-model",
                "16",
                "--heads",
                "2",
                "--vocab",
                "32",
                "--batch",
                "2",
                "--max-new-tokens",
                "3",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "[1, 2, 3] -> [" in out and "tokens/s at batch 2" in out

"""docs/onnx.md tells the truth about which operators import: every registered operator is in its
table, and none of those it says raise is registered (it once said Resize, RNNs and ArgMax raise)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from refcomp.frontends import onnx_ops_core
from refcomp.frontends.onnx_load import register_operators

DOC = (Path(__file__).resolve().parent.parent / "docs" / "onnx.md").read_text()


def _registered() -> set[str]:
    register_operators()
    return set(onnx_ops_core.OPS)


def test_every_operator_is_in_the_table():
    first_cells = [
        line.split("|")[1]
        for line in DOC.splitlines()
        if line.startswith("| ") and not line.startswith("| ---")
    ]
    listed = {word for cell in first_cells for word in re.findall(r"[A-Z][A-Za-z0-9]+", cell)}
    assert _registered() - listed == set()


def test_the_operators_said_to_raise_are_not_registered():
    sentence = re.search(r"Everything else \((.*?)\) raises", DOC, re.DOTALL)
    assert sentence, "docs/onnx.md lost its sentence on unsupported operators"
    named = set(
        re.findall(r"\b[A-Z][A-Za-z0-9]+\b", sentence.group(1))
    )  # If, Loop, QuantizeLinear, TopK, ...
    assert len(named) >= 5 and not named & _registered(), named & _registered()


@pytest.mark.parametrize("op", ["Resize", "RNN", "GRU", "LSTM", "ArgMax", "ArgMin"])
def test_the_operators_the_doc_once_refused_import(op):
    assert op in _registered()

"""ONNX's own conformance suite (onnx.backend.test node tests) against refcomp's ONNX backend.

Each in-scope node test runs twice: `<name>_cpu` on refcomp's NumPy reference interpreter and
`<name>_cuda` as generated CUDA on the host emulator. By default the emulator runs a representative
subset (two tests per operator plus a hand-picked list, see EMULATOR_EXTRA in onnx_backend.py); the
rest of the emulator runs are marked slow (`pytest -m slow`). Out-of-scope operators are not
collected; in-scope tests that must raise RefcompError are checked to do so; known limitations are
skipped with their reason. See docs/onnx.md.
"""
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX backend tests need the onnx package (pip install onnx)")

from refcomp.errors import RefcompError  # noqa: E402
from refcomp.onnx_backend import RefcompBackend, conformance_runner, node_test_selection  # noqa: E402

SELECTION = node_test_selection()
DEVICE = {"cpu": "CPU", "cuda": "CUDA"}

backend_test = conformance_runner(__name__)
backend_test.include(r"^(%s)_(cpu|cuda)$" % "|".join(re.escape(n) for n in SELECTION["run"]))
for (name, device), reason in sorted(SELECTION["known_failures"].items()):
    backend_test.exclude(rf"^{re.escape(name)}_{device.lower()}$")

_subset = set(SELECTION["emulator_subset"])


def _collected(cls):
    """Keep only the in-scope tests; mark emulator runs outside the subset slow; name skip reasons."""
    for attr in [a for a in vars(cls) if a.startswith("test_")]:
        func = getattr(cls, attr)
        why = getattr(func, "__unittest_skip_why__", "")
        name, device = attr.rsplit("_", 1)
        if why == "no matched include pattern":
            delattr(cls, attr)
            continue
        if (name, DEVICE[device]) in SELECTION["known_failures"]:
            func.__unittest_skip_why__ = (
                f"known limitation: {SELECTION['known_failures'][(name, DEVICE[device])]}"
            )
        elif device == "cuda" and name not in _subset:
            setattr(cls, attr, pytest.mark.slow(func))
    return cls


OnnxBackendNodeModelTest = _collected(backend_test.test_cases["OnnxBackendNodeModelTest"])


@pytest.mark.parametrize("name", sorted(SELECTION["expected_errors"]))
def test_out_of_scope_node_test_raises_refcomp_error(name):
    """Tests of in-scope operators on out-of-scope types or modes must fail loudly, never compute."""
    case = SELECTION["cases"][name]
    with pytest.raises(RefcompError):
        rep = RefcompBackend.prepare(case.model, "CPU")
        for inputs, _ in case.data_sets:
            rep.run(list(inputs))


def test_selection_patterns_are_all_used():
    from refcomp.onnx_backend import EXPECTED_ERRORS, KNOWN_FAILURES
    names = SELECTION["in_scope"]
    for pattern, *_ in EXPECTED_ERRORS + KNOWN_FAILURES:
        assert any(re.search(pattern, n) for n in names), f"pattern {pattern!r} matches no in-scope node test"
    assert len(SELECTION["run"]) > 500 and 100 < len(SELECTION["emulator_subset"]) < 250


def test_node_cases_are_generated_once_then_read_and_a_damaged_copy_is_regenerated(tmp_path, monkeypatch):
    """ONNX's node cases are pickled in refcomp's cache (onnx_backend._node_cases): generated on the first
    call, read back equal on the next, generated again when the file is damaged."""
    from onnx.backend.test import loader

    from refcomp.onnx_backend import _node_cases
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path))
    some = [SELECTION["cases"][n] for n in ("test_abs", "test_add_bcast", "test_softmax_axis_0")]
    calls = []
    monkeypatch.setattr(loader, "load_model_tests", lambda kind=None: calls.append(kind) or list(some))

    def same(cases):
        assert sorted(cases) == sorted(c.name for c in some)
        for case in some:
            got = cases[case.name]
            assert got.model.SerializeToString() == case.model.SerializeToString()
            for (ins, outs), (want_ins, want_outs) in zip(got.data_sets, case.data_sets, strict=True):
                for a, b in zip(list(ins) + list(outs), list(want_ins) + list(want_outs), strict=True):
                    assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)

    same(_node_cases())
    same(_node_cases())
    assert calls == ["node"]
    (pickled,) = (tmp_path / "onnx").iterdir()
    pickled.write_bytes(pickled.read_bytes()[:100])  # cut short, as a full disk would leave it
    same(_node_cases())
    assert calls == ["node", "node"]

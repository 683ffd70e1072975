"""ONNX's own conformance suite (onnx.backend.test node tests) against refcomp's ONNX backend.

Each in-scope node test runs twice: `<name>_cpu` on refcomp's NumPy reference interpreter and
`<name>_cuda` as generated CUDA on the host emulator. By default the emulator runs a representative
subset (two tests per operator plus a hand-picked list, see EMULATOR_EXTRA in onnx_backend.py); the
rest of the emulator runs are marked slow (`pytest -m slow`). Out-of-scope operators are not
collected; in-scope tests that must raise RefcompError are checked to do so; known limitations are
skipped with their reason. See docs/onnx.md.
"""
import re

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX backend tests need the onnx package (pip install onnx)")

import onnx.backend.test  # noqa: E402

from refcomp.errors import RefcompError  # noqa: E402
from refcomp.onnx_backend import RefcompBackend, node_test_selection  # noqa: E402

SELECTION = node_test_selection()
DEVICE = {"cpu": "CPU", "cuda": "CUDA"}

backend_test = onnx.backend.test.BackendTest(RefcompBackend, __name__)
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
            func.__unittest_skip_why__ = f"known limitation: {SELECTION['known_failures'][(name, DEVICE[device])]}"
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

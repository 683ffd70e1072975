"""The same golden cases on a real GPU through PyCUDA; skipped, with the reason, where none is usable."""
import pytest

from refcomp.exec.pycuda_backend import pycuda_unavailable_reason

from cuda_cases import CASE_IDS, CASES, check_case

pytestmark = pytest.mark.gpu
_reason = pycuda_unavailable_reason()


@pytest.mark.skipif(_reason is not None, reason=f"GPU tests need PyCUDA and a device: {_reason}")
@pytest.mark.parametrize("search", [False, True], ids=["plain", "search"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_golden_case_on_gpu(case, search):
    assert check_case(case, "pycuda", search) == []

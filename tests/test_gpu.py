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


@pytest.mark.skipif(_reason is not None, reason=f"GPU tests need PyCUDA and a device: {_reason}")
def test_flash_decoding_on_gpu():
    """K split across 16 blocks on the device, where blocks run at once and the ticket is a real
    atomic after a real fence: twice (the tickets must be back at 0), against the float64 reference."""
    from refcomp.exec.backends import get_backend
    from test_flash_decoding import launch_twice

    launch_twice(get_backend("pycuda"), splits=16, n_tiles=4, seed=4)


@pytest.mark.skipif(_reason is not None, reason=f"GPU tests need PyCUDA and a device: {_reason}")
def test_split_k_matmul_on_gpu():
    """A plain matmul's K split across 16 blocks (and 4 slices) on the device: the last block adds
    the partial sums after real fences and a real atomic; twice, the tickets back at 0, against NumPy."""
    from refcomp.exec.backends import get_backend
    from test_matmul_splits import launch_twice

    launch_twice(get_backend("pycuda"), splits=16, seed=5)

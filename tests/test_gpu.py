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
    import numpy as np

    import refcomp as rc
    from refcomp import golden
    from refcomp.exec.backends import get_backend
    from test_flash_decoding import _feeds, _paged, _program

    prog, kernel = _program(_paged(40), splits=16, n_tiles=4)
    feeds = _feeds(np.random.default_rng(4), 3, 9, 40)
    be = get_backend("pycuda")
    bindings, buffers = prog.prepare(be, feeds)
    module = be.load(prog.source, [k.signature for k in prog.kernels])
    want = rc.evaluate(_paged(40), feeds, precision="float64")
    for _ in range(2):
        for k, grid, block, args in prog.launches(buffers, bindings):
            module.launch(k.name, grid, block, args)
        be.synchronize()
        got = prog.download_outputs(be, buffers, bindings)
        np.testing.assert_allclose(got, want, **golden.FLOAT32_TOLERANCE)
        tickets = be.download(buffers[("ws1", kernel.name)], (kernel.launch.scratch(bindings)[1],), np.uint32)
        assert (tickets == 0).all()

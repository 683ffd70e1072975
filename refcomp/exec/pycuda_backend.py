"""PyCUDA backend: runs the generated CUDA source on a real GPU.

PyCUDA is an optional dependency (`pip install -e ".[cuda]"`), so it is imported lazily: importing
this module never fails, and `pycuda_unavailable_reason()` says what is missing. The module uses the
device's primary context (the one the CUDA runtime and other libraries share), compiles with
`SourceModule(no_extern_c=True)` because generated kernels already declare `extern "C"`, and
synchronizes after every launch so a kernel fault is reported at the launch that caused it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from refcomp.errors import AllocationError, RefcompError
from ..codegen.abi import POISON_WORD, Dim3, KernelSignature
from refcomp.exec.emulator import check_launch_shape
from refcomp.reference.limits import show_bytes

FIX_HINT = 'install it with `pip install -e ".[cuda]"` and check the GPU with `bash scripts/gpu_check.sh`'


@functools.lru_cache(maxsize=None)
def cuda_driver() -> Any:
    """Import pycuda, initialise the driver and push the default device's primary context (once;
    CUDA_DEVICE picks it)."""
    import pycuda.driver as drv

    try:
        import pycuda.autoprimaryctx  # noqa: F401  (retains + pushes the primary context, pops at exit)
    except ImportError:  # PyCUDA older than 2021.1
        import pycuda.autoinit  # noqa: F401
    return drv


def pycuda_unavailable_reason() -> str | None:
    """None when PyCUDA can run kernels here, else what is missing and how to fix it."""
    try:
        import pycuda  # noqa: F401
    except ImportError:
        return f"pycuda not installed: {FIX_HINT}"
    try:
        import pycuda.driver as drv

        drv.init()
        if drv.Device.count() == 0:
            return f"pycuda is installed but no CUDA device was found: {FIX_HINT}"
        cuda_driver()
    except Exception as exc:  # driver missing, no device, init failure: all mean "not usable"
        return f"pycuda is installed but CUDA driver init failed ({type(exc).__name__}: {exc}): {FIX_HINT}"
    return None


@dataclass
class DeviceBuffer:
    """A device allocation and its size (PyCUDA's DeviceAllocation does not know its size)."""
    allocation: Any
    nbytes: int


class PyCudaModule:
    def __init__(self, module: Any, kernels: Sequence[KernelSignature]):
        self.kernels = {k.name: k for k in kernels}
        self._functions = {k.name: module.get_function(k.name) for k in kernels}

    def launch(self, name: str, grid: Dim3, block: Dim3, args: Sequence[Any]) -> None:
        sig = self.kernels.get(name)
        if sig is None:
            raise RefcompError(f"no kernel named {name!r} in this module (have {sorted(self.kernels)})")
        g, b = check_launch_shape(grid, block)
        if len(args) != len(sig.params):
            raise RefcompError(f"kernel {name} takes {len(sig.params)} arguments, got {len(args)}")
        converted = []
        for param, arg in zip(sig.params, args):
            if param.ctype == "long long":
                if isinstance(arg, bool) or not isinstance(arg, (int, np.integer)):
                    raise RefcompError(f"kernel {name}: {param.ident} is long long, got {type(arg).__name__}")
                converted.append(np.int64(arg))
            elif isinstance(arg, DeviceBuffer):
                converted.append(arg.allocation)
            else:
                raise RefcompError(f"kernel {name}: {param.ident} ({param.ctype}) needs a buffer from "
                                   f"this backend, got {type(arg).__name__}")
        drv = cuda_driver()
        try:
            self._functions[name](*converted, block=b, grid=g)
            drv.Context.synchronize()
        except drv.Error as exc:
            raise RefcompError(f"kernel {name} (grid {g}, block {b}) failed on the GPU: {exc}") from exc


class PyCudaBackend:
    """abi.Backend on a CUDA GPU through PyCUDA. Buffers are `DeviceBuffer`s."""

    name = "pycuda"

    def __init__(self, arch: str | None = None):
        reason = pycuda_unavailable_reason()
        if reason is not None:
            raise RefcompError(reason)
        self._drv = cuda_driver()
        if arch is None:
            major, minor = self._drv.Context.get_device().compute_capability()
            arch = f"sm_{major}{minor}"
        self.arch = arch

    def load(self, source: str, kernels: Sequence[KernelSignature]) -> PyCudaModule:
        from pycuda.compiler import SourceModule

        try:
            module = SourceModule(source, no_extern_c=True, arch=self.arch)
            return PyCudaModule(module, kernels)
        except self._drv.CompileError as exc:
            raise RefcompError(f"nvcc (through PyCUDA) rejected the generated source:\n{exc}") from exc
        except self._drv.Error as exc:
            raise RefcompError(f"loading the compiled module failed: {exc}") from exc

    def alloc(self, nbytes: int) -> DeviceBuffer:
        # cuMemAlloc rejects 0 bytes; a 1-byte allocation keeps zero-sized tensors valid pointers.
        try:
            return DeviceBuffer(self._drv.mem_alloc(max(1, int(nbytes))), int(nbytes))
        except self._drv.MemoryError as exc:
            raise AllocationError(f"the GPU could not allocate {show_bytes(int(nbytes))}: {exc}") from exc

    def upload(self, array: np.ndarray) -> DeviceBuffer:
        host = np.ascontiguousarray(array)
        buf = self.alloc(host.nbytes)
        if host.nbytes:
            self._drv.memcpy_htod(buf.allocation, host)
        return buf

    def fill_nan(self, buffer: DeviceBuffer, nbytes: int) -> None:
        count = min(int(nbytes), buffer.nbytes) // 4
        if count:
            self._drv.memset_d32(buffer.allocation, POISON_WORD, count)

    def download(self, buffer: DeviceBuffer, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        out = np.empty(shape, dtype=np.dtype(dtype))
        if out.nbytes > buffer.nbytes:
            raise RefcompError(f"download of {shape} {out.dtype} needs {out.nbytes} bytes, "
                               f"buffer has {buffer.nbytes}")
        if out.nbytes:
            self._drv.memcpy_dtoh(out, buffer.allocation)
        return out

    def synchronize(self) -> None:
        self._drv.Context.synchronize()

    def memory_bytes(self) -> int:
        return int(self._drv.mem_get_info()[1])  # the device's total memory

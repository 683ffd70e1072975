"""Hand-written CUDA kernels and the helpers that launch them, shared by the backend tests
(test_exec_backends.py) and the emulator-only tests (test_emulator_backend.py)."""
from __future__ import annotations

import numpy as np
import pytest

from refcomp.codegen.abi import KernelSignature, Param


def sig(name: str, *ctypes: str, barrier: bool = False) -> KernelSignature:
    return KernelSignature(name, tuple(Param(f"p{i}", c) for i, c in enumerate(ctypes)), barrier)


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """Compiled kernels go to a throwaway cache, never the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REFCOMP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("REFCOMP_EMU_SANITIZE", raising=False)
        yield


def run(be, source, kernels, name, grid, block, inputs, out_sizes, ints=()):
    """Upload inputs, NaN-poison outputs, launch, download outputs as float32 arrays."""
    mod = be.load(source, kernels)
    ins = [be.upload(np.ascontiguousarray(a)) for a in inputs]
    outs = []
    for n in out_sizes:
        buf = be.alloc(4 * n)
        be.fill_nan(buf, 4 * n)
        outs.append(buf)
    mod.launch(name, grid, block, [*ins, *outs, *ints])
    be.synchronize()
    return [be.download(b, (n,), np.float32) for b, n in zip(outs, out_sizes)]


ADD = r"""
#define SCALE 0.5f
extern "C" __global__ void k0_add(const float* __restrict__ in0, float* __restrict__ out0, long long dim0) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < dim0 * 4;
         i += (long long)blockDim.x * gridDim.x) {
        out0[i] = exp2f(in0[i]) * SCALE + 1.0f;
    }
}
"""


ROWSUM = r"""
extern "C" __global__ void k1_rowsum(const float* __restrict__ in0, float* __restrict__ out0,
                                     long long dim0) {
    __shared__ float partial[256];
    long long row = blockIdx.x;  float acc = 0.0f;
    for (long long j = threadIdx.x; j < dim0; j += blockDim.x) acc += in0[row * dim0 + j];
    partial[threadIdx.x] = acc; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out0[row] = partial[0];
}
"""
ROWSUM_SIG = [sig("k1_rowsum", "const float*", "float*", "long long", barrier=True)]


HALF = r"""
extern "C" __global__ void k_half(float* __restrict__ out0, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n / 2) out0[i] = 1.0f;
}
"""

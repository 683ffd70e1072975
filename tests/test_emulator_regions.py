"""The emulator's execution modes: barrier-free regions, fibers as the fallback, parallel blocks.

Generated barrier kernels (row, reduce_block, matmul) mark their regions with RC_FOR_EACH_THREAD
and run as loops over a block's threads; hand-written barrier kernels run on fibers; a barrier
inside a region (divergent control flow) is refused naming the kernel. Blocks run on
REFCOMP_EMU_THREADS workers, and the result is bit-identical for any number of them.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp.codegen.abi import KernelSignature, Param
from refcomp.errors import RefcompError
from refcomp.exec import backends
from refcomp.exec.emulator import EmulatorBackend


def sig(name: str, *ctypes: str, barrier: bool = False) -> KernelSignature:
    return KernelSignature(name, tuple(Param(f"p{i}", c) for i, c in enumerate(ctypes)), barrier)


def _program():
    """A matmul, a softmax (row kernel) and a long sum (block reduction): every barrier template."""
    x, w = rc.input("x", ("B", 300)), rc.input("w", (300, 40))
    return rc.compile({"y": (x @ w).relu().softmax(-1), "m": x @ w + 1.0, "s": (x * x).sum(-1)},
                      dims_hint={"B": 4096})


@pytest.fixture(scope="module")
def program_and_feeds():
    rng = np.random.default_rng(0)
    return _program(), {"x": rng.standard_normal((97, 300)).astype(np.float32),
                        "w": rng.standard_normal((300, 40)).astype(np.float32)}


def test_generated_barrier_kernels_run_as_regions(program_and_feeds):
    prog, _ = program_and_feeds
    module = EmulatorBackend().load(prog.source, [k.signature for k in prog.kernels])
    modes = {k.kind: module.modes[k.name] for k in prog.kernels}
    assert modes["matmul"] == modes["row"] == "regions"
    assert all(module.modes[k.name] == "regions" for k in prog.kernels if k.signature.uses_barrier)


@pytest.mark.parametrize("sanitize", [False, True])
def test_worker_count_does_not_change_a_bit(program_and_feeds, monkeypatch, sanitize):
    prog, feeds = program_and_feeds
    monkeypatch.setattr(backends, "_instance", lambda name: EmulatorBackend(sanitize=sanitize))
    runs = []
    for workers in ("1", "2", "5"):
        monkeypatch.setenv("REFCOMP_EMU_THREADS", workers)
        runs.append(prog.run(feeds, backend="emulator"))
    for other in runs[1:]:
        for key in ("y", "m", "s"):
            np.testing.assert_array_equal(runs[0][key].view(np.uint32), other[key].view(np.uint32))
    np.testing.assert_allclose(runs[0]["s"], (feeds["x"].astype(np.float64) ** 2).sum(-1), rtol=1e-5)


ROWSUM = r"""
extern "C" __global__ void k_rowsum(const float* __restrict__ in0, float* __restrict__ out0, long long cols) {
    __shared__ float partial[128];
    float acc = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) acc += in0[blockIdx.x * cols + j];
    partial[threadIdx.x] = acc; __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out0[blockIdx.x] = partial[0];
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_hand_written_barrier_kernel_falls_back_to_fibers(monkeypatch, sanitize):
    """Unmarked barrier kernels run on fibers, each worker with its own __shared__ copy."""
    be = EmulatorBackend(sanitize=sanitize)
    module = be.load(ROWSUM, [sig("k_rowsum", "const float*", "float*", "long long", barrier=True)])
    assert module.modes == {"k_rowsum": "fibers"}
    x = np.random.default_rng(1).standard_normal((64, 200)).astype(np.float32)
    outs = []
    for workers in ("1", "3"):
        monkeypatch.setenv("REFCOMP_EMU_THREADS", workers)
        out = be.alloc(64 * 4)
        module.launch("k_rowsum", (64, 1, 1), (128, 1, 1), [be.upload(x), out, 200])
        outs.append(be.download(out, (64,), np.float32))
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    np.testing.assert_allclose(outs[0], x.sum(1), rtol=1e-4, atol=1e-4)


REGION_KERNELS = r"""
extern "C" __global__ void k_ok(float* __restrict__ out0) {
    __shared__ float s[64];
    RC_FOR_EACH_THREAD { s[threadIdx.x] = (float)threadIdx.x; }
    __syncthreads();
    RC_FOR_EACH_THREAD { out0[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x]; }
}
extern "C" __global__ void k_divergent(float* __restrict__ out0) {
    RC_FOR_EACH_THREAD {
        if (threadIdx.x < 3) __syncthreads();  // a barrier not every thread reaches
        out0[threadIdx.x] = 1.0f;
    }
}
extern "C" __global__ void k_outside(float* __restrict__ out0) {
    const unsigned t = threadIdx.x;  // per-thread code outside every region
    RC_FOR_EACH_THREAD { out0[t] = 1.0f; }
}
"""


def test_region_kernel_runs_and_divergent_barrier_is_refused():
    be = EmulatorBackend()
    module = be.load(REGION_KERNELS.split('extern "C" __global__ void k_divergent')[0],
                     [sig("k_ok", "float*", barrier=True)])
    assert module.modes == {"k_ok": "regions"}
    out = be.alloc(3 * 64 * 4)
    module.launch("k_ok", (3, 1, 1), (64, 1, 1), [out])
    np.testing.assert_array_equal(be.download(out, (3, 64), np.float32), np.tile(np.arange(64)[::-1], (3, 1)))
    with pytest.raises(RefcompError, match=r"kernel k_divergent: __syncthreads on line 10 .*divergent"):
        be.load(REGION_KERNELS, [sig("k_divergent", "float*", barrier=True)])
    with pytest.raises(RefcompError, match=r"kernel k_outside: threadIdx on line 15 is outside"):
        be.load(REGION_KERNELS, [sig("k_outside", "float*", barrier=True)])

"""Executor backends on hand-written CUDA kernels (tests/hand_kernels.py), each checked against a
NumPy oracle, on every available backend: the host emulator always, PyCUDA when it is installed and
a GPU answers (else they skip, naming what is missing). Then the nvcc check, the doctor and the
backends' protocol. What only the emulator can show is in test_emulator_backend.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from refcomp.errors import RefcompError
from refcomp.exec.emulator import EmulatorBackend
from refcomp.exec.nvcc import nvcc_available, nvcc_check, parse_ptxas
from refcomp.exec.pycuda_backend import PyCudaBackend, pycuda_unavailable_reason
from cuda_cases import MATMUL
from hand_kernels import ADD, HALF, ROWSUM, ROWSUM_SIG, private_cache, run, sig  # noqa: F401 (the fixture)


@pytest.fixture(params=["emulator", "pycuda"])
def backend(request):
    if request.param == "pycuda":
        reason = pycuda_unavailable_reason()
        if reason:
            pytest.skip(reason)
        return PyCudaBackend()
    return EmulatorBackend()


@pytest.mark.parametrize("dim0,grid", [(1, 1), (10, 3), (1000, 7), (5000, 1024)])
def test_grid_stride_elementwise(backend, rng, dim0, grid):
    x = rng.standard_normal(dim0 * 4).astype(np.float32)
    (out,) = run(backend, ADD, [sig("k0_add", "const float*", "float*", "long long")], "k0_add",
                 (grid, 1, 1), (128, 1, 1), [x], [dim0 * 4], [dim0])
    np.testing.assert_allclose(out, np.exp2(x) * 0.5 + 1.0, rtol=1e-5)


@pytest.mark.parametrize("rows,cols,block", [(1, 1, 32), (3, 7, 256), (5, 256, 256), (17, 1000, 128),
                                             (4, 333, 64)])
def test_block_reduction(backend, rng, rows, cols, block):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    (out,) = run(backend, ROWSUM, ROWSUM_SIG, "k1_rowsum", (rows, 1, 1), (block, 1, 1), [x], [rows], [cols])
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-4, atol=1e-4)




@pytest.mark.parametrize("m,n,k", [(16, 16, 16), (37, 45, 29), (1, 70, 3), (64, 5, 100)])
def test_tiled_matmul(backend, rng, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    kernels = [sig("k_mm", "const float*", "const float*", "float*", "long long", "long long", "long long",
                   barrier=True)]
    grid = ((n + 15) // 16, (m + 15) // 16, 1)
    (out,) = run(backend, MATMUL, kernels, "k_mm", grid, (16, 16, 1), [a, b], [m * n], [m, n, k])
    np.testing.assert_allclose(out.reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)


INDEX3D = r"""
extern "C" __global__ void k_idx(float* __restrict__ out0, long long W, long long H) {
    long long x = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    long long y = blockIdx.y * (long long)blockDim.y + threadIdx.y;
    long long z = blockIdx.z * (long long)blockDim.z + threadIdx.z;
    if (x < W && y < H) out0[(z * H + y) * W + x] = (float)(x + 100 * y + 10000 * z) + 0.25f * gridDim.y;
}
"""


def test_3d_grid_and_block_indices(backend):
    w, h, d = 13, 7, 3
    kernels = [sig("k_idx", "float*", "long long", "long long")]
    (out,) = run(backend, INDEX3D, kernels, "k_idx", (4, 2, 3), (4, 4, 1), [], [w * h * d], [w, h])
    z, y, x = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    np.testing.assert_array_equal(
        out.reshape(d, h, w), (x + 100 * y + 10000 * z + 0.25 * 2).astype(np.float32)
    )


ATOMIC = r"""
extern "C" __global__ void k_hist(const float* __restrict__ in0, float* __restrict__ out0, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&out0[(long long)floorf(in0[i]) % 4], 1.0f);
        atomicMax((int*)&out0[4], (int)__ldg(&in0[i]));
    }
}
extern "C" __global__ void k_zero(float* __restrict__ out0, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out0[i] = 0.0f;
}
"""


def test_atomics(backend, rng):
    x = rng.integers(0, 40, 3000).astype(np.float32) + 0.5
    kernels = [sig("k_hist", "const float*", "float*", "long long"), sig("k_zero", "float*", "long long")]
    mod = backend.load(ATOMIC, kernels)
    xin, out = backend.upload(x), backend.alloc(5 * 4)
    mod.launch("k_zero", (1, 1, 1), (32, 1, 1), [out, 5])
    mod.launch("k_hist", (12, 1, 1), (256, 1, 1), [xin, out, x.size])
    got = backend.download(out, (5,), np.float32)
    np.testing.assert_array_equal(got[:4], np.bincount(np.floor(x).astype(int) % 4, minlength=4))
    assert got[4:].view(np.int32)[0] == int(x.max())


DIALECT = r"""
__device__ __forceinline__ float sq(float v) { return v * v; }
extern "C" __global__ void k_dialect(const float* __restrict__ in0, float* __restrict__ out0, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        float v = in0[i];
        long long j = min(i + 1, n - 1), k = max(i - 1, 0ll);
        float m = fmaxf(-INFINITY, fminf(INFINITY, v));
        out0[i * 4 + 0] = sq(v) + fabsf(v) + sqrtf(fabsf(v)) * rsqrtf(1.0f + sq(v));
        out0[i * 4 + 1] = __expf(v) + __logf(1.0f + fabsf(v)) + log2f(2.0f + v * v) + tanhf(v) + erff(v);
        out0[i * 4 + 2] = sinf(v) + cosf(v) + fmodf(v, 0.75f) + floorf(v) + ceilf(v) + powf(fabsf(v), 1.5f);
        out0[i * 4 + 3] = in0[j] - in0[k] + m + (float)min(3, (int)threadIdx.x);
    }
}
"""


def test_dialect_helpers_and_math(backend, rng):
    n = 300
    v = rng.standard_normal(n).astype(np.float32)
    (out,) = run(backend, DIALECT, [sig("k_dialect", "const float*", "float*", "long long")], "k_dialect",
                 (2, 1, 1), (64, 1, 1), [v], [4 * n], [n])
    from math import erf
    i = np.arange(n)
    tid = (i % 128) % 64  # grid-stride with 2 blocks of 64: thread index of the element's thread
    a = np.abs(v)
    expect = np.stack([
        v * v + a + np.sqrt(a) / np.sqrt(1 + v * v),
        np.exp(v) + np.log(1 + a) + np.log2(2 + v * v) + np.tanh(v) + np.array([erf(t) for t in v]),
        np.sin(v) + np.cos(v) + np.fmod(v, 0.75) + np.floor(v) + np.ceil(v) + a ** 1.5,
        v[np.minimum(i + 1, n - 1)] - v[np.maximum(i - 1, 0)] + v + np.minimum(3, tid),
    ], axis=1)
    np.testing.assert_allclose(out.reshape(n, 4), expect, rtol=2e-5, atol=2e-5)


def test_nan_poison_visible_where_kernel_does_not_write(backend):
    (out,) = run(backend, HALF, [sig("k_half", "float*", "long long")], "k_half", (1, 1, 1), (64, 1, 1),
                 [], [10], [10])
    np.testing.assert_array_equal(out[:5], 1.0)
    assert np.isnan(out[5:]).all()
    assert (
        out[5:].view(np.uint32) == 0x7FFF7FFF
    ).all()  # a NaN as float32, and each half a float16 and bfloat16 NaN
    assert np.isnan(out[5:].view(np.float16)).all()


def test_launch_argument_validation(backend):
    mod = backend.load(HALF, [sig("k_half", "float*", "long long")])
    buf = backend.alloc(40)
    with pytest.raises(RefcompError, match="takes 2 arguments"):
        mod.launch("k_half", (1, 1, 1), (32, 1, 1), [buf])
    with pytest.raises(RefcompError, match="long long"):
        mod.launch("k_half", (1, 1, 1), (32, 1, 1), [buf, 2.5])
    with pytest.raises(RefcompError, match="needs a buffer"):
        mod.launch("k_half", (1, 1, 1), (32, 1, 1), [5, 10])
    with pytest.raises(RefcompError, match="exceeds CUDA's limits"):
        mod.launch("k_half", (1, 1, 1), (2048, 1, 1), [buf, 10])
    with pytest.raises(RefcompError, match="no kernel named"):
        mod.launch("nope", (1, 1, 1), (1, 1, 1), [buf, 10])


# ---- nvcc check ---------------------------------------------------------------------------------

needs_nvcc = pytest.mark.skipif(nvcc_available() is not None, reason=str(nvcc_available()))


@needs_nvcc
def test_nvcc_check_reports_resources():
    report = nvcc_check(ADD + ROWSUM + MATMUL)
    assert set(report.kernels) == {"k0_add", "k1_rowsum", "k_mm"}
    assert all(k.registers > 0 for k in report.kernels.values())
    assert report.kernels["k1_rowsum"].shared_bytes == 256 * 4
    assert report.kernels["k_mm"].shared_bytes == 2 * 16 * 17 * 4
    assert report.kernels["k0_add"].shared_bytes == 0 and report.kernels["k1_rowsum"].barriers == 1
    assert not report.cached and nvcc_check(ADD + ROWSUM + MATMUL).cached


@needs_nvcc
def test_nvcc_check_fails_on_warning():
    with pytest.raises(RefcompError, match="never referenced") as info:
        nvcc_check(ADD.replace("float* __restrict__ out0, long long dim0) {",
                               "float* __restrict__ out0, long long dim0) {\n    int unused_var = 3;", 1))
    assert "unused_var" in str(info.value)


@needs_nvcc
def test_nvcc_check_rejects_double_precision():
    with pytest.raises(RefcompError, match="double precision"):
        nvcc_check(ADD.replace("* SCALE", "* (float)(in0[i] * 0.1)"), allow_double=False)


def test_parse_ptxas_sample():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'k_a' for 'sm_90'
ptxas info    : Function properties for k_a
    16 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2176 bytes smem, 380 bytes cmem[0]
"""
    (name, res), = parse_ptxas(log).items()
    assert name == "k_a" and (res.registers, res.shared_bytes, res.barriers) == (40, 2176, 1)
    assert (res.stack_frame_bytes, res.spill_store_bytes, res.spill_load_bytes) == (16, 4, 8)


def test_doctor_names_every_executor():
    from refcomp.exec.doctor import doctor
    text = doctor()
    for name in ("numpy reference", "emulator", "nvcc check", "pycuda"):
        assert name in text
    reason = pycuda_unavailable_reason()
    assert (reason or "pycuda") in text
    assert "emulator           ok" in text  # g++ is needed for this test file anyway


def test_every_backend_implements_the_abi_protocol():
    """docs/ARCHITECTURE.md says both executors implement codegen.abi.Backend: every method, by name."""
    import inspect

    from refcomp.codegen.abi import Backend
    from refcomp.exec.emulator import EmulatorBackend
    from refcomp.exec.pycuda_backend import PyCudaBackend
    wanted = {n for n, v in vars(Backend).items() if callable(v) and not n.startswith("_")} | {"name"}
    for cls in (EmulatorBackend, PyCudaBackend):  # the classes: PyCudaBackend needs a GPU to instantiate
        missing = {n for n in wanted if not hasattr(cls, n)}
        assert not missing, f"{cls.__name__} lacks {sorted(missing)}"
        for n in wanted - {"name"}:
            assert list(inspect.signature(getattr(cls, n)).parameters) == list(
                inspect.signature(getattr(Backend, n)).parameters
            ), n
    assert isinstance(EmulatorBackend(), Backend)

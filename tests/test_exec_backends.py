"""Executor backends on hand-written CUDA kernels, each checked against a NumPy oracle.

The kernel tests run on every available backend: the host emulator always, PyCUDA when it is
installed and a GPU answers (else they skip, naming what is missing). The emulator-only tests cover
what a GPU cannot show: the disk cache, barrier misuse, divergent barriers, AddressSanitizer mode.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from refcomp.errors import RefcompError
from refcomp.exec import emulator
from refcomp.codegen.abi import KernelSignature, Param
from refcomp.exec.emulator import EmulatorBackend
from refcomp.exec.nvcc import nvcc_available, nvcc_check, parse_ptxas
from refcomp.exec.pycuda_backend import PyCudaBackend, pycuda_unavailable_reason
from cuda_cases import MATMUL


def sig(name: str, *ctypes: str, barrier: bool = False) -> KernelSignature:
    return KernelSignature(name, tuple(Param(f"p{i}", c) for i, c in enumerate(ctypes)), barrier)


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    """Compiled kernels go to a throwaway cache, never the user's ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("REFCOMP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.delenv("REFCOMP_EMU_SANITIZE", raising=False)
        yield


@pytest.fixture(params=["emulator", "pycuda"])
def backend(request):
    if request.param == "pycuda":
        reason = pycuda_unavailable_reason()
        if reason:
            pytest.skip(reason)
        return PyCudaBackend()
    return EmulatorBackend()


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


@pytest.mark.parametrize("dim0,grid", [(1, 1), (10, 3), (1000, 7), (5000, 1024)])
def test_grid_stride_elementwise(backend, rng, dim0, grid):
    x = rng.standard_normal(dim0 * 4).astype(np.float32)
    (out,) = run(backend, ADD, [sig("k0_add", "const float*", "float*", "long long")], "k0_add",
                 (grid, 1, 1), (128, 1, 1), [x], [dim0 * 4], [dim0])
    np.testing.assert_allclose(out, np.exp2(x) * 0.5 + 1.0, rtol=1e-5)


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


HALF = r"""
extern "C" __global__ void k_half(float* __restrict__ out0, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n / 2) out0[i] = 1.0f;
}
"""


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


# ---- emulator only ------------------------------------------------------------------------------

def test_disk_cache_hit_skips_gxx(tmp_path, monkeypatch):
    monkeypatch.setenv("REFCOMP_CACHE_DIR", str(tmp_path / "cache"))
    be = EmulatorBackend()
    source = HALF + "\n// cache test " + str(time.time_ns())  # a source no earlier test compiled
    kernels = [sig("k_half", "float*", "long long")]
    before = emulator.gxx_invocations()
    be.load(source, kernels)
    assert emulator.gxx_invocations() == before + 1
    libs = list((tmp_path / "cache" / "emu").glob("*.so"))
    assert len(libs) == 1
    be.load(source, kernels)  # in-process cache
    emulator.clear_memory_cache()
    mod = be.load(source, kernels)  # disk cache: no g++
    assert emulator.gxx_invocations() == before + 1
    (out,) = run(be, source, kernels, "k_half", (1, 1, 1), (32, 1, 1), [], [4], [4])
    np.testing.assert_array_equal(out, [1, 1, np.nan, np.nan])
    assert mod.kernels["k_half"].params[1].ctype == "long long"


def test_cache_dir_argument(tmp_path):
    EmulatorBackend(cache_dir=tmp_path / "elsewhere").load(
        HALF + "// dir", [sig("k_half", "float*", "long long")]
    )
    assert list((tmp_path / "elsewhere" / "emu").glob("*.so"))


def test_compile_error_is_refcomp_error():
    bad = "extern \"C\" __global__ void k_bad(float* out0, long long n) {\n    out0[0] = undefined_name;\n}\n"
    with pytest.raises(RefcompError) as info:
        EmulatorBackend().load(bad, [sig("k_bad", "float*", "long long")])
    assert "undefined_name" in str(info.value) and ">    2 |" in str(info.value)


BARRIER_MISUSE = r"""
extern "C" __global__ void k_bar(float* __restrict__ out0, long long n) {
    __shared__ float s[64];
    s[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out0[threadIdx.x] = s[63 - threadIdx.x];
}
extern "C" __global__ void k_div(float* __restrict__ out0, long long n) {
    if (threadIdx.x < 3) { __syncthreads(); }
    else { __syncthreads(); }
}
extern "C" __global__ void k_exit(float* __restrict__ out0, long long n) {
    __shared__ float s[64];
    if (threadIdx.x >= n) return;
    s[threadIdx.x] = 2.0f * threadIdx.x;
    __syncthreads();
    out0[threadIdx.x] = s[n - 1 - threadIdx.x];
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_barrier_misuse_is_reported(sanitize):
    be = EmulatorBackend(sanitize=sanitize)
    kernels = [sig("k_bar", "float*", "long long"), sig("k_div", "float*", "long long", barrier=True),
               sig("k_exit", "float*", "long long", barrier=True)]
    mod = be.load(BARRIER_MISUSE, kernels)
    out = be.alloc(64 * 4)
    with pytest.raises(RefcompError, match="uses_barrier=False"):
        mod.launch("k_bar", (1, 1, 1), (64, 1, 1), [out, 64])
    with pytest.raises(RefcompError, match="divergent __syncthreads"):
        mod.launch("k_div", (1, 1, 1), (64, 1, 1), [out, 64])
    # Threads that exit before a barrier no longer take part in it (CUDA on sm_70+).
    mod.launch("k_exit", (2, 1, 1), (64, 1, 1), [out, 40])
    got = be.download(out, (64,), np.float32)
    np.testing.assert_array_equal(got[:40], 2.0 * np.arange(40)[::-1])


def test_ucontext_fallback(monkeypatch, rng):
    monkeypatch.setattr(emulator, "FAST_FLAGS", emulator.FAST_FLAGS + ("-DREFCOMP_EMU_UCONTEXT",))
    x = rng.standard_normal((9, 300)).astype(np.float32)
    (out,) = run(EmulatorBackend(), ROWSUM, ROWSUM_SIG, "k1_rowsum", (9, 1, 1), (128, 1, 1), [x], [9], [300])
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-4, atol=1e-4)


def test_sanitize_env_var(monkeypatch):
    monkeypatch.setenv("REFCOMP_EMU_SANITIZE", "1")
    assert EmulatorBackend().sanitize and not EmulatorBackend(sanitize=False).sanitize


OOB = r"""
extern "C" __global__ void k_oob(const float* __restrict__ in0, float* __restrict__ out0, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i <= n) out0[i] = in0[i < n ? i : 0] * 2.0f;   // bug: i == n writes one past the end
}
"""


def test_sanitizer_catches_one_past_end_write(rng):
    be = EmulatorBackend(sanitize=True)
    kernels = [sig("k_oob", "const float*", "float*", "long long")]
    mod = be.load(OOB, kernels)
    x = rng.standard_normal(64).astype(np.float32)
    xin, out = be.upload(x), be.alloc(64 * 4)
    with pytest.raises(RefcompError) as info:
        mod.launch("k_oob", (2, 1, 1), (64, 1, 1), [xin, out, 64])
    text = str(info.value)
    assert "heap-buffer-overflow" in text and "WRITE of size 4" in text and "k_oob" in text
    assert "p1=[" in text  # the report names the overflowed parameter's buffer
    mod.launch("k_oob", (1, 1, 1), (63, 1, 1), [xin, out, 64])  # in bounds: fine, outputs copied back
    np.testing.assert_array_equal(be.download(out, (63,), np.float32), x[:63] * 2)


ALIAS = r"""
extern "C" __global__ void k_alias(float* a, float* b, long long n) {
    if (threadIdx.x == 0) { a[0] = 5.0f; b[0] = b[0] + 1.0f; }
}
"""


@pytest.mark.parametrize("sanitize", [False, True])
def test_same_buffer_passed_twice_is_one_buffer(sanitize):
    be = EmulatorBackend(sanitize=sanitize)
    mod = be.load(ALIAS, [sig("k_alias", "float*", "float*", "long long")])
    buf = be.upload(np.zeros(4, np.float32))
    mod.launch("k_alias", (1, 1, 1), (32, 1, 1), [buf, buf, 4])
    assert be.download(buf, (4,), np.float32)[0] == 6.0


def test_sanitizer_runs_barrier_kernels(rng):
    be = EmulatorBackend(sanitize=True)
    x = rng.standard_normal((6, 500)).astype(np.float32)
    (out,) = run(be, ROWSUM, ROWSUM_SIG, "k1_rowsum", (6, 1, 1), (256, 1, 1), [x], [6], [500])
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-4, atol=1e-4)
    a = rng.standard_normal((20, 19)).astype(np.float32)
    b = rng.standard_normal((19, 18)).astype(np.float32)
    kernels = [sig("k_mm", "const float*", "const float*", "float*", "long long", "long long", "long long",
                   barrier=True)]
    (c,) = run(be, MATMUL, kernels, "k_mm", (2, 2, 1), (16, 16, 1), [a, b], [20 * 18], [20, 18, 19])
    np.testing.assert_allclose(c.reshape(20, 18), a @ b, rtol=1e-4, atol=1e-4)


def test_barrier_kernel_speed(rng):
    """1024 blocks x 256 threads with 9 barriers each: fibers must stay cheap."""
    x = rng.standard_normal((1024, 256)).astype(np.float32)
    be = EmulatorBackend()
    mod = be.load(ROWSUM, ROWSUM_SIG)
    xin, out = be.upload(x), be.alloc(1024 * 4)
    start = time.perf_counter()
    mod.launch("k1_rowsum", (1024, 1, 1), (256, 1, 1), [xin, out, 256])
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(be.download(out, (1024,), np.float32), x.sum(axis=1), rtol=1e-4, atol=1e-4)
    assert elapsed < 10.0, f"barrier kernel took {elapsed:.2f} s"


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

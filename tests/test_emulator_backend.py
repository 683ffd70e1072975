"""The host emulator on hand-written CUDA kernels (tests/hand_kernels.py): what a GPU cannot show,
each checked against a NumPy oracle: the disk cache, compile errors, barrier misuse and divergent
barriers, the ucontext fallback, AddressSanitizer mode, a buffer passed twice.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from refcomp.errors import RefcompError
from refcomp.exec import emulator
from refcomp.exec.emulator import EmulatorBackend
from cuda_cases import MATMUL
from hand_kernels import HALF, ROWSUM, ROWSUM_SIG, private_cache, run, sig  # noqa: F401 (the fixture)


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


SCALE = r"""
// %s
extern "C" __global__ void %s(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;  // %s
    if (i < n) y[i] = x[i] * %s;
}
"""


def test_a_kernel_repeated_under_another_name_is_compiled_once_and_runs_as_itself():
    """Kernels whose definitions differ only in name and comments share one definition in the
    emulator's build (a deep model repeats its layer's kernels); one that differs in a constant, or
    holds a string literal, keeps its own; each still computes what its own source says."""
    names = ("k_a", "k_b", "k_c", "k_d")
    source = (SCALE % ("first", "k_a", "one", "2.0f") + SCALE % ("second", "k_b", "another comment", "2.0f")
              + SCALE % ("third", "k_c", "three", "3.0f")
              + SCALE.replace("// %s\n    if", '(void)"%s";\n    if') % ("fourth", "k_d", "k_d", "2.0f"))
    kernels = [sig(n, "const float*", "float*", "long long") for n in names]
    compiled = emulator.emulator_source(source, kernels)
    assert compiled.count("__global__ void") == 3, "k_b runs k_a's definition; k_c and k_d keep their own"
    assert "k_a((const float*)args[0]" in compiled.split("refcomp_call_k_b")[1].split("\n")[0]
    be = EmulatorBackend()
    x = np.linspace(-3, 3, 50, dtype=np.float32)
    for name, factor in zip(names, (2.0, 2.0, 3.0, 2.0)):
        (got,) = run(be, source, kernels, name, (1, 1, 1), (64, 1, 1), [x], [x.size], ints=(x.size,))
        np.testing.assert_array_equal(got, x * np.float32(factor))


def test_a_repeated_layer_model_defines_each_kernel_once_and_matches_numpy():
    import refcomp as rc
    x = rc.input("x", ("B", 16))
    h = x
    for _ in range(4):
        h = (h * 2.0 + 1.0).tanh()
    prog = rc.compile(h, search=False)
    source = emulator.emulator_source(prog.source, [k.signature for k in prog.kernels])
    assert source.count("__global__ void") < len(prog.kernels) / 4
    feed = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    want = feed.astype(np.float64)
    for _ in range(4):
        want = np.tanh(want * 2.0 + 1.0)
    np.testing.assert_allclose(prog.run({"x": feed}, backend="emulator"), want, rtol=2e-6, atol=2e-6)

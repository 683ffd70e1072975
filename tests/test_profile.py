"""The profiler (exec/profile.py, emu_profile.h): hand-written kernels of known counts, then every
golden case.

Known counts, as Nsight Compute reports them on a GPU: a warp reading 32 consecutive floats touches
4 sectors of 32 bytes; reading every 32nd float touches 32; all threads reading one float touch 1.
Shared memory has 32 banks of 4 bytes: a warp reading column 0 of a [32][32] array (stride 32) hits
one bank 32 times (32 wavefronts, 31 conflicts); with the row padded to 33 floats, none.
"""
from __future__ import annotations

import tempfile

import numpy as np
import pytest

from refcomp.codegen.abi import KernelSignature, Param
from refcomp.errors import RefcompError
from refcomp.exec.profile import Counters, ProfileBackend, ProfileError, example_feeds, instrument
from refcomp.exec.profile import model_disagreements
from cuda_cases import CASES, MATMUL, compiled, sliced
from refcomp import golden


def sig(name: str, *ctypes: str, barrier: bool = False) -> KernelSignature:
    return KernelSignature(name, tuple(Param(f"p{i}", c) for i, c in enumerate(ctypes)), barrier)




# Hand-written kernels compile into a throwaway cache; golden programs share the kernel cache, as the
# other golden tests do (it only saves g++ time, never changes a result).
HAND_WRITTEN_CACHE = tempfile.mkdtemp(prefix="refcomp-profile-test-")


def profile(source, kernel: KernelSignature, grid, block, inputs, out_sizes, ints=()):
    """Launch one hand-written kernel in the profile build: (Counters, outputs)."""
    be = ProfileBackend(HAND_WRITTEN_CACHE)
    mod = be.load(source, [kernel])
    ins = [be.upload(np.ascontiguousarray(a, dtype=np.float32)) for a in inputs]
    outs = [be.alloc(4 * n) for n in out_sizes]
    counters = mod.launch(kernel.name, grid, block, [*ins, *outs, *ints])
    return counters, [be.download(b, (n,), np.float32) for b, n in zip(outs, out_sizes)]


COPY = r"""
extern "C" __global__ void k_copy(const float* __restrict__ in0, float* __restrict__ out0,
                                  long long stride, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out0[i] = in0[i * stride];
}
"""
COPY_SIG = sig("k_copy", "const float*", "float*", "long long", "long long")


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (8, 32), (32, 32), (0, 1)])
def test_global_sectors_per_request(stride, sectors):
    n = 1024
    x = np.arange(max(stride, 1) * n, dtype=np.float32)
    c, (out,) = profile(COPY, COPY_SIG, (n // 128, 1, 1), (128, 1, 1), [x], [n], [stride, n])
    np.testing.assert_array_equal(out, x[::stride][:n] if stride else np.zeros(n))
    assert c.global_load_requests == n // 32
    assert c.global_load_sectors == sectors * (n // 32)
    assert (c.global_store_requests, c.global_store_sectors) == (n // 32, 4 * (n // 32))
    assert (c.shared_load_requests, c.barriers, c.flops) == (0, 0, 0)
    assert c.global_bytes == 32 * (c.global_load_sectors + c.global_store_sectors)


def test_partial_warps_and_misaligned_reads():
    """A block of 48 threads is a full warp and a warp of 16; reading from in0 + 1 straddles a sector."""
    source = COPY.replace("in0[i * stride]", "in0[i * stride + 1]")
    c, _ = profile(source, COPY_SIG, (1, 1, 1), (48, 1, 1), [np.zeros(64, np.float32)], [48], [1, 48])
    assert c.global_load_requests == 2
    assert (
        c.global_load_sectors == 5 + 3
    )  # floats 1..32 span 5 sectors, 33..48 span 3 (32..39, 40..47, 48..55)
    assert (c.global_store_requests, c.global_store_sectors) == (2, 4 + 2)


DIVERGENT = r"""
extern "C" __global__ void k_div(const float* __restrict__ in0, float* __restrict__ out0) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (threadIdx.x % 2 == 0) out0[i] = in0[i];
    else { float a = in0[i + 1]; out0[i] = a * 2.0f; }
}
"""


def test_divergent_branches_are_separate_requests():
    """Each branch is issued for its half of the warp: 2 load and 2 store requests per warp."""
    c, (out,) = profile(DIVERGENT, sig("k_div", "const float*", "float*"), (2, 1, 1), (64, 1, 1),
                        [np.arange(129, dtype=np.float32)], [128])
    np.testing.assert_array_equal(out[:4], [0, 4, 2, 8])
    assert (c.global_load_requests, c.global_store_requests) == (8, 8)
    assert c.global_load_sectors == 4 * 4 + 4 * 5  # the odd lanes' in0[i + 1] is shifted by one float
    assert c.global_store_sectors == 8 * 4
    assert c.flops == 64


MASKED = r"""
extern "C" __global__ void k_mask(const float* __restrict__ in0, float* __restrict__ out0) {
    float acc = 0.0f;
    for (int r = 0; r < 4; ++r) {
        const float v = ((threadIdx.x + r >= 3) ? in0[32 * r + threadIdx.x] : 0.0f);
        acc = acc + v;
    }
    out0[threadIdx.x] = acc;
}
"""


def test_masked_loads_in_a_loop_stay_in_their_iteration():
    """Lane l reads row r only when l + r >= 3: 4 requests, one per row, of 4 sectors each (grouping
    the lanes' k-th loads instead would mix rows: lane 0's only load, row 3, with row 0)."""
    x = np.arange(128, dtype=np.float32)
    c, (out,) = profile(MASKED, sig("k_mask", "const float*", "float*"), (1, 1, 1), (32, 1, 1), [x], [32])
    lanes = np.arange(32)
    np.testing.assert_array_equal(out, sum(np.where(lanes + r >= 3, x[32 * r + lanes], 0) for r in range(4)))
    assert (c.global_load_requests, c.global_load_sectors) == (4, 16)


def test_masked_16_bit_loads_in_a_loop_stay_in_their_iteration():
    """The masked load of a float16 buffer sits under its conversion, `c ? rc_half_to_float(in0[i]) : 0`;
    it is predicated like a float's. Found by the fuzzer (seed 11, graph 272): a half cumsum whose
    profiled sectors were a third of the real ones. Oracle: the sectors counted here in NumPy, lanes
    grouped by loop iteration as a warp executes them."""
    import refcomp as rc
    x0 = rc.input("x0", ("B", 5, "T", "B"))
    prog = rc.compile(x0.reshape(x0.shape[0], 5, -1).half().cumsum(1), search=False, cache=False)
    kernel = next(k for k in prog.kernels if k.kind == "reduce")
    assert "? rc_half_to_float(in0[" in kernel.source
    feeds = {"x0": np.random.default_rng(0).standard_normal((7, 5, 7, 7)).astype(np.float32)}
    profiled = next(
        k for k in prog.profile(feeds, dims={"B": 7, "T": 7}).kernels if k.name == kernel.name
    ).counters
    i, bt = np.arange(5 * 49 * 7), 49
    requests = sectors = 0
    for w in range(0, len(i), 32):
        lanes = i[w:w + 32]
        o0, o1, o2 = lanes // (5 * bt), (lanes // 5) % bt, lanes % 5
        for r in range(5):  # in0[(5 o0 + o2 + r - 4) B T + o1], float16, where o2 + r >= 4
            active = o2 + r >= 4
            requests += bool(active.any())
            sectors += len(set((2 * ((5 * o0 + o2 + r - 4) * bt + o1))[active] // 32))
    assert (profiled.global_load_requests, profiled.global_load_sectors) == (requests, sectors) == (270, 1130)


def test_gather_rows_the_model_assumes_stay_in_the_table():
    """The model takes output row q of a gather to read table row 2q mod rows: inside the table, so a
    flipped table (addresses falling with the row) never gives it a negative position, which it would
    count as no read. Found by the fuzzer (seed 11, graph 154): 36 load requests modeled, 54 run."""
    import refcomp as rc
    table = rc.input("t", (562,)).flip().reshape(2, -1)
    prog = rc.compile(rc.nn.embedding(rc.input("ids", (3,), "int32"), table), search=False, cache=False)
    feeds = {"t": np.arange(562, dtype=np.float32), "ids": np.array([1, 0, 1], dtype=np.int32)}
    profile_ = prog.profile(feeds)
    assert model_disagreements(prog, profile_) == []
    assert (
        profile_.kernels[-1].counters.global_load_requests == 2 * 27
    )  # ids and table, 27 warps of 843 outputs


GUARDED = MASKED.replace(
    "const float v = ((threadIdx.x + r >= 3) ? in0[32 * r + threadIdx.x] : 0.0f);",
    "float v = 0.0f;\n        if (threadIdx.x + r >= 3) { v = in0[32 * r + threadIdx.x]; }",
)


def test_guarded_blocks_in_a_loop_stay_in_their_iteration():
    x = np.arange(128, dtype=np.float32)
    done = instrument(GUARDED, [sig("k_mask", "const float*", "float*")])
    assert "if (rcp_skip(threadIdx.x + r >= 3, 0)) { v = in0(0)[" in done.source
    c, (out,) = profile(GUARDED, sig("k_mask", "const float*", "float*"), (1, 1, 1), (32, 1, 1), [x], [32])
    lanes = np.arange(32)
    np.testing.assert_array_equal(out, sum(np.where(lanes + r >= 3, x[32 * r + lanes], 0) for r in range(4)))
    assert (c.global_load_requests, c.global_load_sectors) == (4, 16)


SHARED = r"""
#define STRIDE 32
extern "C" __global__ void k_smem(const float* __restrict__ in0, float* __restrict__ out0) {
    __shared__ float s[32 * STRIDE];
    __shared__ float t[32][PAD];
    s[threadIdx.x * STRIDE] = in0[threadIdx.x];
    t[threadIdx.x][0] = in0[threadIdx.x];
    __syncthreads();
    out0[threadIdx.x] = s[threadIdx.x * STRIDE] + s[0] + t[threadIdx.x][0];
}
"""


@pytest.mark.parametrize("stride,pad,s_waves,t_waves", [(32, 32, 32, 32), (33, 33, 1, 1), (1, 32, 1, 32)])
def test_shared_bank_conflicts(stride, pad, s_waves, t_waves):
    """s[tid * stride] and t[tid][0] (rows of `pad` floats) are stored, then loaded with s[0] (a
    broadcast)."""
    source = SHARED.replace("#define STRIDE 32", f"#define STRIDE {stride}\n#define PAD {pad}")
    x = np.arange(32, dtype=np.float32)
    c, (out,) = profile(
        source, sig("k_smem", "const float*", "float*", barrier=True), (1, 1, 1), (32, 1, 1), [x], [32]
    )
    np.testing.assert_array_equal(out, 2 * x)
    assert (c.shared_store_requests, c.shared_load_requests) == (2, 3)
    assert c.shared_store_wavefronts == s_waves + t_waves
    assert c.shared_load_wavefronts == s_waves + 1 + t_waves
    assert c.shared_bank_conflicts == 2 * (s_waves - 1) + 2 * (t_waves - 1)
    assert c.barriers == 1 and c.flops == 64


def test_shared_stride_32_is_a_32_way_conflict():
    source = SHARED.replace("#define STRIDE 32", "#define STRIDE 32\n#define PAD 33")
    c, _ = profile(source, sig("k_smem", "const float*", "float*", barrier=True), (1, 1, 1), (32, 1, 1),
                   [np.zeros(32, np.float32)], [32])
    assert c.shared_store_wavefronts == 32 + 1   # s[tid * 32]: 32 wavefronts; t[tid][0] padded: 1
    assert c.shared_bank_conflicts == 31 + 31 + 0


FLOPS = r"""
extern "C" __global__ void k_flops(const float* __restrict__ in0, float* __restrict__ out0, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)blockDim.x * gridDim.x) {
        float x = in0[i];
        float y = sqrtf(x * x + 1.0f) / 3.0f;   // 3 flops, 1 math call
        y = fmaf(y, -x, 0.5f);                   // 2 flops (an fma)
        // a compare and a negation are not flops; 1 math call when x > 0
        out0[i] = x > 0.0f ? exp2f(y) : -y;
    }
}
"""


def test_flop_counts():
    n = 1000
    x = np.linspace(-1, 1, n, dtype=np.float32)
    c, (out,) = profile(
        FLOPS, sig("k_flops", "const float*", "float*", "long long"), (3, 1, 1), (128, 1, 1), [x], [n], [n]
    )
    x64 = x.astype(np.float64)
    y = (np.sqrt(x64 * x64 + 1) / 3) * -x64 + 0.5
    np.testing.assert_allclose(out, np.where(x > 0, np.exp2(y), -y), rtol=1e-5)
    assert c.flops == 5 * n
    assert c.math_calls == n + int((x > 0).sum())
    assert (
        c.global_load_requests == c.global_store_requests == -(-n // 32)
    )  # 3 x 128 threads: warps stay aligned


def test_tiled_matmul_counts():
    m = n = k = 64
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    kernel = sig(
        "k_mm", "const float*", "const float*", "float*", "long long", "long long", "long long", barrier=True
    )
    c, (out,) = profile(MATMUL, kernel, (4, 4, 1), (16, 16, 1), [a, b], [m * n], [m, n, k])
    np.testing.assert_allclose(out.reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)
    warps, tiles = 16 * 8, k // 16
    assert c.flops == 2 * m * n * k
    assert c.barriers == warps * tiles * 2
    assert (c.global_load_requests, c.global_load_sectors) == (2 * warps * tiles, 2 * warps * tiles * 4)
    assert (c.global_store_requests, c.global_store_sectors) == (warps, warps * 4)
    # a warp is two rows of 16 threads: As[ty][kk] is two words (a broadcast each), Bs[kk][tx] 16 words
    assert (
        c.shared_load_requests == warps * tiles * 16 * 2
        and c.shared_load_wavefronts == c.shared_load_requests
    )
    # the stores As[ty][tx], As[ty + 1][tx] with rows of 17 floats: bank of word 17 * (ty + 1) + 15
    # is the bank of word 17 * ty + 0, so each tile store takes 2 wavefronts
    assert (
        c.shared_store_requests == warps * tiles * 2
        and c.shared_store_wavefronts == 2 * c.shared_store_requests
    )


def test_counters_add_up():
    one = Counters(global_load_requests=1, global_load_sectors=4, flops=3)
    assert (one + one).global_load_sectors == 8 and (one + one).flops == 6 and Counters().global_bytes == 0


def test_instrument_leaves_the_original_and_numbers_sites():
    done = instrument(COPY, [COPY_SIG])
    assert "rcp_gptr<const float> in0" in done.source and "in0(1)[i * stride]" in done.source
    assert done.sites == {"k_copy": 2} and done.site_names["k_copy"] == ["out0", "in0"]
    masked = instrument(MASKED, [sig("k_mask", "const float*", "float*")])
    assert "v = (rcp_pred((threadIdx.x + r >= 3), 0) ? in0(0)[" in masked.source
    nested = instrument(
        MASKED.replace("((threadIdx.x + r >= 3) ?", "(r == 0 || (threadIdx.x >= 1 && r != 2) ?"),
        [sig("k_mask", "const float*", "float*")],
    )
    assert "v = (rcp_pred(r == 0 || (threadIdx.x >= 1 && r != 2), 0) ? in0(0)[" in nested.source
    gather = instrument(
        COPY.replace("out0[i] = in0[i * stride]", "out0[i] = (i >= 0 && i < n) ? in0[i * stride] : 0.0f"),
        [COPY_SIG],
    )
    assert "out0(0)[i] = rcp_pred((i >= 0 && i < n), 1) ? in0(1)[" in gather.source
    assert "rcp_gptr" not in COPY


def test_errors_name_the_kernel():
    bad = COPY.replace("if (i < n) out0[i] = in0[i * stride];", "const float* p = in0; out0[i] = 0.0f;")
    with pytest.raises(ProfileError, match="k_copy"):
        instrument(bad, [COPY_SIG])
    with pytest.raises(ProfileError, match="k_missing"):
        instrument(COPY, [sig("k_missing", "float*")])
    broken = COPY.replace("out0[i] = in0[i * stride];", "out0[i] = undefined_thing;")
    with pytest.raises(RefcompError, match="k_copy"):
        ProfileBackend(HAND_WRITTEN_CACHE).load(broken, [COPY_SIG])
    assert issubclass(ProfileError, RefcompError)


# --- programs -------------------------------------------------------------------------------------
def test_program_profile_table_and_outputs():
    prog = compiled("hl_softmax", True)
    feeds, dims = golden.case_feeds(next(c for c in CASES if c.name == "hl_softmax"), 0)
    p = prog.profile(feeds, dims=dims)
    ran = prog.run(feeds, dims=dims, backend="emulator")
    assert p.outputs.keys() == ran.keys()
    for name in ran:  # the same source: bit for bit the emulator's result
        np.testing.assert_array_equal(p.outputs[name], ran[name])
    assert [k.name for k in p.kernels] == [k.name for k in prog.kernels]
    text = str(p)
    assert all(k.name in text for k in prog.kernels) and "sect/req" in text and "total" in text
    widths = {len(line) for line in text.splitlines()[1:]}
    assert len(widths) == 1, "every row of the table is as wide as its header"


def _output_bytes(outputs) -> int:
    if isinstance(outputs, np.ndarray):
        return outputs.nbytes
    if isinstance(outputs, dict):
        return sum(_output_bytes(v) for v in outputs.values())
    return sum(_output_bytes(v) for v in outputs)


@pytest.mark.parametrize("case", sliced())
def test_every_golden_case_profiles(case):
    """Profiled at the case's first binding: the instrumented build computes the golden outputs,
    the counters are consistent (every output element is stored, sectors bound the requests), and
    the cost model's memory counts are the profiler's (tests/test_cost_model.py does the plain side).
    cuda_cases.SLICE by default, every case under `pytest -m slow`."""
    prog = compiled(case.name, True, cache=False)
    feeds, dims = golden.case_feeds(case, 0)
    p = prog.profile(feeds, dims=dims)
    problems = golden.compare(p.outputs, golden.expected(case, 0), golden.case_tolerance(case))
    assert not problems
    assert model_disagreements(prog, p) == []
    t = p.total
    assert t.global_store_sectors * 32 >= _output_bytes(p.outputs)
    assert t.global_store_requests <= t.global_store_sectors <= 32 * t.global_store_requests
    assert t.global_load_requests <= t.global_load_sectors <= 32 * t.global_load_requests
    assert t.shared_load_requests <= t.shared_load_wavefronts <= 32 * t.shared_load_requests
    for k in p.kernels:
        assert k.cost.bytes >= 0 and k.cost.time_s > 0
        if k.grid is not None and k.counters.barriers:
            assert k.counters.shared_store_requests > 0


def test_a_float_cast_to_an_index_profiles():
    """median's kernels look values up at a position computed in float ((long long)x, and
    (long long)in0[i] straight from memory): the instrumented build converts the counted float and
    the recording reference alike (the fuzzer's finding: both casts failed to compile), computes the
    median, and the memory model's counts are the profiler's."""
    import refcomp as rc

    x = rc.input("x", (3, 7))
    prog = rc.compile(x.median(-1), cache=False)
    feeds = {"x": np.random.default_rng(4).standard_normal((3, 7)).astype(np.float32)}
    p = prog.profile(feeds)
    want = np.sort(feeds["x"], -1)[:, 3]  # torch's median of 7 values: the 4th smallest
    np.testing.assert_array_equal(p.outputs[0], want)
    assert model_disagreements(prog, p) == []


def test_example_feeds_profile_a_program():
    prog = compiled("sym_embedding", True)
    feeds, dims = example_feeds(prog)
    p = prog.profile(feeds, dims=dims)
    assert p.bindings == dims
    assert p.total.global_store_requests > 0


def test_cli_profile(capsys):
    from refcomp.cli import main
    assert main(["profile", "hl_softmax"]) == 0
    out = capsys.readouterr().out
    assert "sect/req" in out and "k0_softmax" in out

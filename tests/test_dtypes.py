"""float16 and bfloat16 storage (refcomp/ops/dtypes.py), checked against PyTorch on the CPU.

The conversions are compared bit for bit with torch's on the values where rounding is delicate
(ties, subnormals, the overflow threshold, infinities, NaN), in the reference and in generated
kernels (stores, loads, and a 16-bit node rounded inside a fused kernel). Then promotion, the
contraction rule, whole programs plain and searched, the cost model's and the profiler's bytes,
feeds and errors.
"""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.codegen.access import global_counts
from refcomp.exec.nvcc import nvcc_available, nvcc_check
from refcomp.ops.dtypes import round_to

torch = pytest.importorskip("torch")
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def delicate_values() -> np.ndarray:
    """float32 values around every rounding boundary of float16 and bfloat16, and random ones."""
    rng = np.random.default_rng(0)
    special = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        1.0,
        -1.0,
        65504.0,
        65519.996,
        65520.0,
        65536.0,
        -65520.0,
        1e-8,
        2.0**-24,
        2.0**-25,
        2.0**-25 * 1.0000001,
        3 * 2.0**-26,
        2.0**-14,
        2.0**-14 - 2.0**-25,
        6.1e-5,
        3.0e38,
        -3.4e38,
        1.17549435e-38,
        1e-40,
    ]
    ties16 = (1.0 + (2 * np.arange(64) + 1) * 2.0**-11) * 2.0 ** rng.integers(
        -14, 15, 64
    )  # midway between halves
    ties_bf = (1.0 + (2 * np.arange(64) + 1) * 2.0 ** -8) * 2.0 ** rng.integers(-100, 100, 64)
    subnormal = rng.uniform(0, 2.0 ** -14, 64) * rng.choice([-1, 1], 64)
    spread = rng.standard_normal(512) * 10.0 ** rng.integers(-8, 6, 512)
    values = np.concatenate([special, ties16, ties_bf, subnormal, spread]).astype(np.float32)
    return np.concatenate(
        [values, np.nextafter(values, np.float32(np.inf)), np.nextafter(values, np.float32(-np.inf))]
    )


def torch_round(values: np.ndarray, dtype: str) -> np.ndarray:
    return torch.from_numpy(values).to(TORCH[dtype]).float().numpy()


def same_values(got, want) -> bool:
    got, want = np.asarray(got, dtype=np.float32), np.asarray(want, dtype=np.float32)
    return bool(np.all((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rounding_matches_torch_bit_for_bit(dtype):
    x = delicate_values()
    want = torch_round(x, dtype)
    assert same_values(round_to(x, dtype), want)  # the reference's rounding
    t = rc.input("x", (len(x),))
    stored = rc.compile(t.to(dtype), search=False, cache=False).run({"x": x}, backend="emulator")
    assert same_values(stored.astype(np.float32), want)  # a kernel's store
    inline = rc.compile(t.to(dtype).float() * 1.0, cache=False)  # rounded inside one fused kernel
    assert len(inline.kernels) == 1
    assert same_values(inline.run({"x": x}, backend="emulator"), want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_loads_widen_every_16_bit_pattern_exactly(dtype):
    bits = np.arange(1 << 16, dtype=np.uint16)
    want = torch.from_numpy(bits.view(np.int16)).view(TORCH[dtype]).float().numpy()
    feed = bits.view(np.float16) if dtype == "float16" else want  # bfloat16 feeds as float32 values
    x = rc.input("x", (1 << 16,), dtype)
    got = rc.compile(x.float(), search=False, cache=False).run({"x": feed}, backend="emulator")
    assert got.dtype == np.float32 and same_values(got, want)


def test_promotion_follows_torch():
    shapes = {"float32": rc.input("f", (3,)), "float16": rc.input("h", (3,), "float16"),
              "bfloat16": rc.input("b", (3,), "bfloat16")}
    for a, x in shapes.items():
        for b, y in shapes.items():
            want = torch.promote_types(getattr(torch, a), getattr(torch, b))
            assert (x + y).dtype == str(want).replace("torch.", ""), (a, b)
        assert (
            (x * 2.0).dtype == a and (x + rc.constant(1.5)).dtype == a and x.exp().dtype == a
        )  # scalars are weak
        assert rc.where(shapes["float32"] > 0, x, x).dtype == a  # the condition only selects
        assert x.sum(-1).dtype == a and (x + rc.arange(3.0)).dtype == a
    assert (
        shapes["float16"].half() is shapes["float16"]
        and shapes["float32"].to(torch.float16).dtype == "float16"
    )
    assert (
        shapes["float16"].to(np.float32).dtype == "float32"
        and shapes["float16"].type("bf16").dtype == "bfloat16"
    )


def test_elementwise_chain_matches_torch_exactly():
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((4, 33)).astype(np.float32) * 3 for _ in range(3))
    for dtype in ("float16", "bfloat16"):
        x, y, z = (rc.input(n, (4, 33), dtype) for n in "abc")
        out = ((x + y) * z - x).abs() * 0.5
        ta, tb, tc = (torch.from_numpy(v).to(TORCH[dtype]) for v in (a, b, c))
        want = (((ta + tb) * tc - ta).abs() * 0.5).float().numpy()
        feeds = {"a": a, "b": b, "c": c}
        assert same_values(rc.evaluate(out, feeds), want)
        for search in (False, True):
            got = rc.compile(out, search=search, cache=False).run(feeds, backend="emulator")
            assert same_values(np.asarray(got, dtype=np.float32), want), (dtype, search)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_contractions_accumulate_in_float32_and_round_once(dtype):
    rng = np.random.default_rng(2)
    a, w = rng.standard_normal((5, 64)).astype(np.float32), rng.standard_normal((64, 7)).astype(np.float32)
    x, y = rc.input("a", (5, 64), dtype), rc.input("w", (64, 7), dtype)
    exact = torch_round(a, dtype).astype(np.float64) @ torch_round(w, dtype).astype(np.float64)
    want = torch_round(exact.astype(np.float32), dtype)  # the exact sum, rounded once
    ulp = np.abs(want) * (2.0 ** -10 if dtype == "float16" else 2.0 ** -7)
    assert (x @ y).dtype == dtype
    for search in (
        False,
        True,
    ):  # float32 accumulation: the exact sum's rounding, or one unit away near a tie
        ours = np.asarray(
            rc.compile(x @ y, search=search, cache=False).run({"a": a, "w": w}, backend="emulator"),
            np.float32,
        )
        assert np.all(np.abs(ours - want) <= ulp) and np.mean(ours == want) > 0.9
    theirs = (torch.from_numpy(a).to(TORCH[dtype]) @ torch.from_numpy(w).to(TORCH[dtype])).float().numpy()
    assert np.all(np.abs(theirs - want) <= ulp)  # torch's CPU kernel: its own order, at most one unit apart


def _block(dtype):
    x = rc.input("x", ("T", 32), dtype)
    w1, w2 = rc.input("w1", (32, 64), dtype), rc.input("w2", (64, 32), dtype)
    h = rc.nn.layer_norm(x, rc.input("g", (32,), dtype), rc.input("b", (32,), dtype))
    return {"y": x + (h @ w1).gelu(approximate="tanh") @ w2, "p": (x @ x.transpose(0, 1) * 0.2).softmax(-1)}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16_bit_block_agrees_plain_searched_and_with_torch(dtype):
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.standard_normal((6, 32)),
        "w1": rng.standard_normal((32, 64)) * 0.2,
        "w2": rng.standard_normal((64, 32)) * 0.2,
        "g": 1 + 0.1 * rng.standard_normal(32),
        "b": 0.1 * rng.standard_normal(32),
    }
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    outs = _block(dtype)
    ref = rc.evaluate(outs, feeds)
    tol = golden.STORAGE_TOLERANCE[dtype]
    for search in (False, True):
        prog = rc.compile(outs, search=search, cache=False)
        got = prog.run(feeds, backend="emulator")
        for k in outs:
            assert got[k].dtype == (np.float16 if dtype == "float16" else np.float32)
            np.testing.assert_allclose(
                np.asarray(got[k], dtype=np.float32), ref[k], err_msg=f"{k} search={search}", **tol
            )
    t = {k: torch.from_numpy(v).to(TORCH[dtype]) for k, v in feeds.items()}
    h = torch.nn.functional.layer_norm(t["x"], (32,), t["g"], t["b"])
    y = t["x"] + torch.nn.functional.gelu(h @ t["w1"], approximate="tanh") @ t["w2"]
    np.testing.assert_allclose(ref["y"], y.float().numpy(), rtol=4 * tol["rtol"], atol=4 * tol["atol"])


def test_compile_dtype_stores_inputs_and_outputs_in_16_bits():
    x, w = rc.input("x", ("B", 256)), rc.input("w", (256,))
    out = (x * w).exp()
    rng = np.random.default_rng(4)
    feeds = {
        "x": rng.standard_normal((8, 256)).astype(np.float32),
        "w": rng.standard_normal(256).astype(np.float32),
    }
    wide = rc.compile(out, cache=False)
    for dtype in ("float16", "bfloat16"):
        prog = rc.compile(out, dtype=dtype, cache=False)
        got = prog.run(feeds, backend="emulator")
        rounded = {k: torch_round(v, dtype) for k, v in feeds.items()}
        want = torch_round(np.exp(rounded["x"].astype(np.float64) * rounded["w"]).astype(np.float32), dtype)
        np.testing.assert_allclose(np.asarray(got, dtype=np.float32), want, rtol=2.0 ** -7, atol=0)
        assert [p.ctype for p in prog.kernels[0].signature.params[:3]] == ["const unsigned short*"] * 2 + [
            "unsigned short*"
        ]
        # the cost model's bytes: 2-byte elements read and written once, half the float32 program's
        model = global_counts(prog.kernels[0], {"B": 8})
        assert model.global_bytes == 2 * 3 * 8 * 256  # x, w (read again for every row) and the output
        assert model.global_bytes * 2 == global_counts(wide.kernels[0], {"B": 8}).global_bytes
        measured = prog.profile(feeds).kernels[0].counters  # the profiler counts the same sectors
        assert measured.global_load_sectors == model.global_load_sectors
        assert measured.global_store_sectors == model.global_store_sectors
    with pytest.raises(rc.RefcompError, match="storage type"):
        rc.compile(out, dtype="int32")


def test_feeds_results_and_saved_programs(tmp_path):
    x = rc.input("x", (4,), "float16")
    prog = rc.compile(x * 3.0, cache=False)
    got = prog.run(
        {"x": np.array([1.0, 0.1, 70000.0, -2.5], np.float64)}, backend="emulator"
    )  # rounded on the way in
    assert got.dtype == np.float16
    with np.errstate(over="ignore"):  # 70000 is past float16's largest value: inf
        assert (
            got.tolist() == (np.array([1.0, 0.1, 70000.0, -2.5]).astype(np.float16) * np.float16(3)).tolist()
        )
    with pytest.raises(rc.FeedError, match="input 'x' takes float16"):
        prog.run({"x": np.arange(4)}, backend="emulator")
    prog.save(tmp_path / "p.json")
    loaded = rc.load_program(tmp_path / "p.json")
    assert np.array_equal(
        loaded.run({"x": np.ones(4, np.float16)}, backend="emulator"), np.full(4, 3.0, np.float16)
    )


def test_misuse_is_refused_by_name():
    x = rc.input("x", (3,))
    with pytest.raises(rc.ShapeError, match="input 'x'.*uint8.*not supported"):
        x.to(np.uint8)
    with pytest.raises(rc.ShapeError, match="embedding ids must be an integer tensor.*input 'ids'"):
        rc.nn.embedding(rc.input("ids", (3,)), rc.input("table", (4, 2), "int64"))


def test_16_bit_programs_build_with_nvcc():
    reason = nvcc_available()
    if reason:
        pytest.skip(f"nvcc check skipped: {reason}")
    outs = _block("float16") | {"z": rc.input("z", (4, 8), "bfloat16").exp().sum(-1)}
    prog = rc.compile(outs, cache=False)
    assert "rc_float_to_half" in prog.source and "rc_float_to_bf16" in prog.source
    assert set(nvcc_check(prog.source).kernels) == {k.name for k in prog.kernels}

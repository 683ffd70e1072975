"""16-bit composites accumulate in float32 and round once, as PyTorch's CUDA kernels do.

Each case is one whose intermediates leave float16's range (or lose bfloat16's precision) although
its result does not: a layer norm of [300, -300, ...] rows squares to 90,000, the mean of 70,000
ones sums past 65,504, a softmax over 70,000 keys sums its exponentials past it. The oracle is
torch computing in float32 from the 16-bit inputs and rounding the result once: that is what the
CUDA kernels do, while some of torch's CPU half kernels accumulate in 16 bits themselves (the
mean cross entropy of these rows is inf there). Each runs on the reference and on the emulator.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc
from refcomp.ops.dtypes import round_to

torch = pytest.importorskip("torch")
F = torch.nn.functional
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16}
ULPS = 4  # "a few units in the last place" (docs/api.md, Dtypes)


def ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of `dtype`'s values at each of `values` (its subnormal spacing near zero)."""
    bits, tiny = (10, 2.0 ** -24) if dtype == "float16" else (7, 2.0 ** -133)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log2(np.abs(values.astype(np.float64))))
    return np.maximum(np.where(np.isfinite(exponent), 2.0 ** (exponent - bits), 0.0), tiny)


def rounded_once(fn, dtype: str, *arrays):
    """torch's float32 computation from the 16-bit inputs, rounded once to `dtype`."""
    wide = [torch.from_numpy(np.asarray(a, np.float32)).to(TORCH[dtype]).float() for a in arrays]
    return fn(*wide).to(TORCH[dtype]).float().numpy()


def check(out, feeds: dict, want: np.ndarray, dtype: str):
    """The reference and the emulator both within ULPS of `want`, finite where it is."""
    assert out.dtype == dtype
    got = {"reference": rc.evaluate(out, feeds),
           "emulator": rc.compile(out, cache=False).run(feeds, backend="emulator")}
    for where, values in got.items():
        values = np.asarray(values, np.float64)
        assert values.shape == want.shape, where
        err = np.where(values == want, 0.0, np.abs(values - want))  # infinities included
        worst = float(np.max(np.where(np.isnan(err), np.inf, err / ulp(want, dtype)), initial=0.0))
        assert worst <= ULPS, (
            f"{where}: {worst:.3g} units in the last place of {dtype} from torch's "
            f"(got {values.ravel()[:4]}, want {want.ravel()[:4]})"
        )


def alternating(rows: int, n: int, value: float = 300.0) -> np.ndarray:
    return np.tile(np.array([value, -value], np.float32), (rows, n // 2))


def test_layer_norm_of_rows_whose_squares_overflow():
    x = alternating(2, 32) * np.linspace(0.5, 1.0, 32, dtype=np.float32)  # squares up to 90,000
    g = rc.input("x", (2, 32), "float16")
    want = rounded_once(lambda t: F.layer_norm(t, (32,)), "float16", x)
    check(rc.nn.layer_norm(g), {"x": x}, want, "float16")


def test_rms_norm_of_rows_whose_squares_overflow():
    x = alternating(2, 16)
    g = rc.input("x", (2, 16), "float16")
    want = rounded_once(lambda t: t * (t.pow(2).mean(-1, keepdim=True) + 1e-6).rsqrt(), "float16", x)
    check(rc.nn.rms_norm(g), {"x": x}, want, "float16")


def test_bfloat16_layer_norm_does_not_round_its_mean():
    """bfloat16 has float32's range but 8 bits: a mean of ~100 rounded to it moves by up to 0.25,
    which is 40% of these rows' spread."""
    x = (100.0 + np.random.default_rng(0).uniform(-1, 1, (3, 24))).astype(np.float32)
    g = rc.input("x", (3, 24), "bfloat16")
    want = rounded_once(lambda t: F.layer_norm(t, (24,)), "bfloat16", x)
    check(rc.nn.layer_norm(g), {"x": x}, want, "bfloat16")


def test_std_and_var_of_rows_whose_squares_overflow():
    x = alternating(2, 8)
    g = rc.input("x", (2, 8), "float16")
    check(
        g.std(-1, correction=0),
        {"x": x},
        rounded_once(lambda t: t.std(-1, correction=0), "float16", x),
        "float16",
    )
    x = alternating(2, 8, 150.0)  # a variance of 25,714 from squares of 22,500
    check(g.var(dim=-1), {"x": x}, rounded_once(lambda t: t.var(-1), "float16", x), "float16")


def test_mean_of_70000_ones():
    x = np.ones(70000, np.float32)
    g = rc.input("x", (70000,), "float16")
    check(g.mean(), {"x": x}, rounded_once(lambda t: t.mean(), "float16", x), "float16")
    # a plain sum accumulates in float32 too and rounds once: past 65,504 that is inf, as in torch
    assert torch.from_numpy(x).half().sum().item() == math.inf
    assert rc.evaluate(g.sum(), {"x": x}) == np.inf
    assert rc.evaluate(g[:60000].sum(), {"x": x}) == 60000.0
    pair = rc.input("p", (2, 2), "float16")  # over several axes, one accumulation: no inf - inf between axes
    check(pair.sum(), {"p": np.array([[6e4, 6e4], [-6e4, -6e4]], np.float32)}, np.zeros(()), "float16")


def test_softmax_and_log_softmax_over_70000_keys():
    x = np.zeros((1, 70000), np.float32)
    x[0, ::1000] = -1.0  # the exponentials sum to 69,974
    g = rc.input("x", (1, 70000), "float16")
    check(g.softmax(-1), {"x": x}, rounded_once(lambda t: t.softmax(-1), "float16", x), "float16")
    check(g.log_softmax(-1), {"x": x}, rounded_once(lambda t: t.log_softmax(-1), "float16", x), "float16")


def test_attention_whose_scores_overflow_before_scaling():
    """q . k reaches 160,000 before the 1/sqrt(d) scale brings the scores back into range."""
    rng = np.random.default_rng(1)
    q = (200.0 * rng.choice([-1.0, 1.0], (1, 2, 6, 4)) * rng.uniform(0.9, 1.0, (1, 2, 6, 4))).astype(
        np.float32
    )
    v = rng.standard_normal((1, 2, 6, 4)).astype(np.float32)
    gq, gv = rc.input("q", q.shape, "float16"), rc.input("v", v.shape, "float16")
    want = rounded_once(lambda a, b: F.scaled_dot_product_attention(a, a, b, is_causal=True), "float16", q, v)
    check(rc.nn.scaled_dot_product_attention(gq, gq, gv, causal=True), {"q": q, "v": v}, want, "float16")


def test_cross_entropy_whose_sum_overflows():
    """128 rows with a loss of 600 each: the mean is 600, the sum on the way 76,800."""
    logits = alternating(128, 2)
    target = np.ones(128, np.int32)
    g, t = rc.input("logits", (128, 2), "float16"), rc.input("target", (128,), "int32")
    want = rounded_once(lambda a: F.cross_entropy(a, torch.from_numpy(target).long()), "float16", logits)
    check(rc.nn.cross_entropy(g, t), {"logits": logits, "target": target}, want, "float16")


def test_result_types_follow_promotion_and_float32_is_untouched():
    """A 16-bit composite's result has its arguments' promoted type (cross entropy's int32 target and
    its one-hot rows do not widen it, as in torch); a float32 composite gets no casts of its own."""
    x, w = rc.input("x", (4, 8), "float16"), rc.input("w", (8,))
    assert rc.nn.cross_entropy(x, rc.input("ids", (4,), "int32")).dtype == "float16"
    assert rc.nn.layer_norm(x, w).dtype == "float32"
    assert rc.nn.layer_norm(x, w.half()).dtype == "float16"
    ops = [n.op.name for n in rc.ops.graph.toposort([x.float().softmax(-1).node])]
    assert ops.count("Cast") == 1  # x.float() alone
    assert round_to(np.float32(65520.0), "float16") == np.inf  # the threshold these cases cross


def test_onnx_normalisations_and_reductions_in_float16():
    """The importer's own composites (LayerNormalization, InstanceNormalization, ReduceMean, ReduceL2)
    of a FLOAT16 model, on the same rows."""
    pytest.importorskip("onnx")
    from onnx import TensorProto as TP, helper
    x = alternating(2, 8).reshape(1, 2, 8)
    ones = np.ones((7, 10000), np.float32)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1),
             helper.make_node("InstanceNormalization", ["x", "s", "c"], ["inorm"]),
             helper.make_node("ReduceMean", ["ones"], ["mean"], keepdims=0),
             helper.make_node("ReduceL2", ["x"], ["l2"], axes=[2], keepdims=0)]
    half = lambda name, shape: helper.make_tensor_value_info(name, TP.FLOAT16, shape)  # noqa: E731
    graph = helper.make_graph(
        nodes,
        "norms",
        [
            half("x", [1, 2, 8]),
            half("g", [8]),
            half("b", [8]),
            half("s", [2]),
            half("c", [2]),
            half("ones", [7, 10000]),
        ],
        [half("ln", [1, 2, 8]), half("inorm", [1, 2, 8]), half("mean", []), half("l2", [1, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g, b = np.linspace(0.5, 1.5, 8, dtype=np.float32), np.full(8, 0.25, np.float32)
    s, c = np.array([1.0, 2.0], np.float32), np.array([0.0, -1.0], np.float32)
    feeds = {k: v.astype(np.float16) for k, v in dict(x=x, g=g, b=b, s=s, c=c, ones=ones).items()}
    want = {"ln": rounded_once(lambda t, w, o: F.layer_norm(t, (8,), w, o), "float16", x, g, b),
            "inorm": rounded_once(lambda t, w, o: F.instance_norm(t, weight=w, bias=o), "float16", x, s, c),
            "mean": rounded_once(lambda t: t.mean(), "float16", ones),
            "l2": rounded_once(lambda t: t.norm(dim=2), "float16", x)}
    imported = rc.onnx.import_model(model)
    for backend in ("numpy", "emulator"):
        got = imported.run(feeds, backend=backend)
        for k, w in want.items():
            err = np.abs(got[k].astype(np.float64) - w)
            assert got[k].dtype == np.float16 and np.all(err <= ULPS * ulp(w, "float16")), (
                backend,
                k,
                got[k],
                w,
            )


# Unary math made of several primitives (exp is exp2 of x log2 e, cos is sin(x + pi/2), sigmoid,
# silu, the hyperbolic and inverse functions, the activations): one rounding, at the end. Rounding
# every primitive in 16 bits put bfloat16's exp 24 ulps and float16's silu 143 ulps from torch.
UNARY = {
    "exp": ((-10, 10), None), "expm1": ((-10, 10), None), "log": ((0.01, 100), None),
    "log10": ((0.01, 100), None), "log1p": ((-0.9, 10), None), "rsqrt": ((0.01, 100), None),
    "cos": ((-10, 10), None), "tan": ((-1.5, 1.5), None), "tanh": ((-6, 6), None),
    "sigmoid": ((-12, 12), None), "erf": ((-3, 3), None), "erfc": ((-3, 3), None),
    "atan": ((-20, 20), None), "asinh": ((-20, 20), None), "sinh": ((-8, 8), None), "cosh": ((-8, 8), None),
    # gelu above -4: below, torch's CPU form 1 + erf(x / sqrt 2) cancels (refcomp keeps erfc's accuracy)
    "silu": ((-12, 12), F.silu), "gelu": ((-4, 6), F.gelu), "softplus": ((-20, 20), F.softplus),
    "elu": ((-6, 6), F.elu), "mish": ((-6, 6), F.mish), "hardswish": ((-5, 5), F.hardswish),
    "logsigmoid": ((-12, 12), F.logsigmoid),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_composites_round_once(name, dtype):
    (lo, hi), functional = UNARY[name]
    x = np.random.default_rng(len(name)).uniform(lo, hi, 64).astype(np.float32)
    g = rc.input("x", (64,), dtype)
    out = getattr(rc.nn, name)(g) if functional is not None else getattr(g, name)()
    want = rounded_once(functional or (lambda t: getattr(t, name)()), dtype, x)
    check(out, {"x": x}, want, dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("call", ["x ** 2.5", "x ** y", "x ** -1.5", "x.lerp(y, 0.3)", "x.round(decimals=1)"])
def test_powers_lerp_and_rounding_to_decimals_round_once(call, dtype):
    rng = np.random.default_rng(len(call))
    x, y = rng.uniform(0.1, 10, 64).astype(np.float32), rng.uniform(-3, 3, 64).astype(np.float32)
    gx, gy = rc.input("x", (64,), dtype), rc.input("y", (64,), dtype)
    out = eval(call, {"x": gx, "y": gy})  # noqa: S307  (the literals above)
    feeds = {"x": x, "y": y} if "y" in call else {"x": x}
    want = rounded_once(lambda a, b: eval(call, {"x": a, "y": b}), dtype, x, y)  # noqa: S307
    check(out, feeds, want, dtype)

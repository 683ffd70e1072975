"""The math library of ops/: special functions (ops/special.py), equality, and the N-D convolution
(ops/nn.py), against independent oracles: math.erf/erfc, NumPy and PyTorch (CPU) in float64.

Each special function is checked at its edges (+-0.0 with the sign, tiny values by relative error,
huge values, +-inf, NaN), over dense grids against the accuracy bound stated in ops/special.py, on
the reference interpreter (`rc.evaluate`) and on the host emulator (`rc.compile(y).run`).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc
from refcomp.ops import special

torch = pytest.importorskip("torch")
F = torch.nn.functional

ORACLES = {
    "tanh": np.tanh, "expm1": np.expm1, "log1p": np.log1p, "floor": np.floor, "ceil": np.ceil,
    "erf": np.vectorize(math.erf, otypes=[np.float64]), "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
}
EDGES = np.array(
    [
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        3e-8,
        -3e-8,
        0.5,
        -0.5,
        1.0,
        -1.0,
        2.5,
        -7.25,
        40.0,
        -40.0,
        1e30,
        -1e30,
        np.inf,
        -np.inf,
        np.nan,
    ],
    np.float32,
)


def evaluate(fn, xs):
    x = rc.input("x", ("N",))
    return rc.evaluate(fn(x), {"x": xs})


def oracle(name, xs):
    """The float64 answer rounded to float32 (NaN where the function is undefined, as NumPy says)."""
    with np.errstate(all="ignore"):
        want = (
            np.array(
                [
                    ORACLES[name](v) if not (name == "log1p" and v < -1) else np.nan
                    for v in xs.astype(np.float64)
                ],
                np.float64,
            )
            if name.startswith("erf")
            else ORACLES[name](xs.astype(np.float64))
        )
    return want


def assert_matches_at_edges(got, want, xs, rtol):
    """Equal NaN-ness, equal infinities, equal signs of zero, and a relative error below rtol."""
    got = got.astype(np.float64)
    for x, g, w in zip(xs, got, want):
        if np.isnan(w) or np.isinf(w) or w == 0.0:
            assert (np.isnan(g) and np.isnan(w)) or (g == w and np.signbit(g) == np.signbit(w)), (x, g, w)
        else:
            assert abs(g - w) <= rtol * abs(w), (x, g, w, abs(g - w) / abs(w))


@pytest.mark.parametrize("name", sorted(ORACLES))
def test_special_functions_at_the_edges(name):
    xs = EDGES if name != "log1p" else np.concatenate([EDGES, np.float32([-0.999, -1.0, -2.0])])
    want = oracle(name, xs)
    got = evaluate(lambda t: getattr(t, name)(), xs)
    assert_matches_at_edges(got, want, xs, rtol=2e-6)
    # the rc. function is the method
    np.testing.assert_array_equal(evaluate(lambda t: getattr(rc, name)(t), xs), got)


def _grid(lo, hi, n=100001):
    tiny = np.geomspace(1e-30, 1.0, 3001)
    xs = np.concatenate([np.linspace(lo, hi, n), tiny, -tiny]).astype(np.float32)
    return xs[(xs >= lo) & (xs <= hi)]


def _relative(got, want):
    return np.abs(got.astype(np.float64) - want) / np.abs(want)


# (function, grid, measure, bound): the bounds stated in ops/special.py's docstring
ACCURACY = [
    ("tanh", _grid(-12.0, 12.0), "relative", special.TANH_MAX_REL_ERROR),
    ("erf", _grid(-8.0, 8.0), "absolute", special.ERF_MAX_ABS_ERROR),
    ("erfc", _grid(-8.0, 3.0), "relative", special.ERFC_MAX_REL_ERROR),
    ("erfc", _grid(-8.0, 9.0), "absolute", 2e-7),
    ("expm1", _grid(-80.0, 1.0), "relative", special.EXPM1_MAX_REL_ERROR),
    ("expm1", _grid(1.0, 10.0), "relative", 1e-6),  # exp's own error, about 6e-8 |x|
    (
        "log1p",
        np.concatenate([_grid(-0.9999, 10.0), np.geomspace(10, 1e30, 2001).astype(np.float32)]),
        "relative",
        special.LOG1P_MAX_REL_ERROR,
    ),
]


@pytest.mark.parametrize("name, xs, measure, bound", ACCURACY, ids=[f"{a[0]}-{a[2]}" for a in ACCURACY])
def test_special_functions_meet_their_stated_accuracy(name, xs, measure, bound):
    want = oracle(name, xs)
    got = evaluate(lambda t: getattr(t, name)(), xs)
    nonzero = want != 0
    err = (
        _relative(got[nonzero], want[nonzero])
        if measure == "relative"
        else np.abs(got.astype(np.float64) - want)
    )
    assert err.max() <= bound, (
        name,
        err.max(),
        xs[nonzero][err.argmax()] if measure == "relative" else xs[err.argmax()],
    )


def test_erf_and_tanh_are_relatively_accurate_near_zero():
    xs = np.concatenate([np.geomspace(1e-30, 1e-3, 4001), -np.geomspace(1e-30, 1e-3, 4001)]).astype(
        np.float32
    )
    assert _relative(evaluate(lambda t: t.erf(), xs), oracle("erf", xs)).max() < 2e-7
    assert _relative(evaluate(lambda t: t.tanh(), xs), oracle("tanh", xs)).max() < 5e-7


def test_floor_and_ceil_are_exact_for_every_kind_of_float32():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)  # every exponent
    xs = np.concatenate(
        [
            bits,
            np.arange(-20, 20, 0.25, dtype=np.float32),
            EDGES,
            np.float32([2.0**23 + 1, -(2.0**23) - 1, 0.49999997, -0.49999997, 1e-40, -1e-40]),
        ]
    )
    with np.errstate(invalid="ignore"):  # NaN inputs
        wants = (("floor", np.floor(xs)), ("ceil", np.ceil(xs)))
    for name, want in wants:
        got = evaluate(lambda t: getattr(t, name)(), xs)
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all(), name


def test_special_functions_on_the_emulator():
    """The same formulas compiled to C and run on the host emulator: one program, every function."""
    xs = np.concatenate([np.linspace(-9, 9, 6001), np.geomspace(1e-30, 1, 301), -np.geomspace(1e-30, 1, 301),
                         EDGES]).astype(np.float32)
    x = rc.input("x", ("N",))
    outputs = {name: getattr(x, name)() for name in ORACLES}
    outputs["log1p"] = (x.abs() - 0.5).log1p()  # over (-0.5, ...), where log1p is defined
    got = rc.compile(outputs).run({"x": xs}, backend="emulator")
    for name in ORACLES:
        arg = np.abs(xs) - np.float32(0.5) if name == "log1p" else xs
        want = oracle(name, arg)
        finite = np.isfinite(want.astype(np.float32))
        assert_matches_at_edges(got[name][~finite], want[~finite], xs[~finite], rtol=0)
        err = np.abs(got[name][finite].astype(np.float64) - want[finite])
        if name in ("floor", "ceil"):
            assert err.max() == 0, name
        elif name in ("erf", "erfc"):
            assert err.max() <= special.ERF_MAX_ABS_ERROR, (name, err.max())
        else:
            bound = {"tanh": special.TANH_MAX_REL_ERROR, "expm1": 1e-6, "log1p": special.LOG1P_MAX_REL_ERROR}[
                name
            ]
            nonzero = want[finite] != 0
            assert (err[nonzero] / np.abs(want[finite][nonzero])).max() <= bound, name


def test_gelu_exact_and_tanh_forms_match_pytorch():
    xs = np.concatenate(
        [np.linspace(-12, 12, 20001), [0.0, -0.0, 1e-30, -1e-30, 40.0, np.inf, np.nan]]
    ).astype(np.float32)
    for approximate, atol in (("none", 1e-7), ("tanh", 1e-6)):  # the tanh form's 1 + tanh cancels: |x| ulp(1)
        want = F.gelu(torch.from_numpy(xs.astype(np.float64)), approximate=approximate).numpy()
        got = evaluate(lambda t: t.gelu(approximate=approximate), xs).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=atol, equal_nan=True)
    # the exact form keeps its relative accuracy in the negative tail, where 1 + erf(x / sqrt 2) cancels
    tail = np.linspace(-9, -3, 601).astype(np.float32)
    want = np.array(
        [v * 0.5 * math.erfc(-v / math.sqrt(2.0)) for v in tail.astype(np.float64)]
    )  # torch's cancels too
    assert _relative(evaluate(lambda t: t.gelu(approximate="none"), tail), want).max() < 2e-5
    with pytest.raises(rc.ShapeError, match="approximate.*'tanh' or 'none'.*'exact'"):
        rc.input("x", (3,)).gelu(approximate="exact")


def test_equality_is_numpys_at_the_edges():
    values = np.float32([0.0, -0.0, 1.0, -1.0, 1e-30, np.inf, -np.inf, np.nan])
    a, b = np.repeat(values, len(values)), np.tile(values, len(values))
    x, y = rc.input("a", a.shape), rc.input("b", b.shape)
    out = rc.evaluate({"eq": x == y, "eq_method": x.eq(y), "ne": x != y, "eq_number": x == 0.0, "le": x <= y},
                      {"a": a, "b": b})
    np.testing.assert_array_equal(out["eq"], (a == b).astype(np.float32))  # -0.0 == 0.0, NaN != NaN
    np.testing.assert_array_equal(out["eq_method"], (a == b).astype(np.float32))
    np.testing.assert_array_equal(out["ne"], (a != b).astype(np.float32))
    np.testing.assert_array_equal(out["eq_number"], (a == 0.0).astype(np.float32))
    np.testing.assert_array_equal(out["le"], (a <= b).astype(np.float32))


# --- N-D convolution against torch.nn.functional.conv1d / conv2d / conv3d ---------------------
TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_CASES = [  # (spatial sizes, kernel, config)
    ((9,), (3,), dict()),
    ((11,), (2,), dict(stride=2, padding=1, dilation=3)),
    ((10,), (3,), dict(groups=2, padding=2, stride=3)),
    ((7, 8), (3, 2), dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)),
    ((5, 6, 7), (2, 3, 2), dict()),
    ((6, 5, 7), (3, 2, 3), dict(stride=(1, 2, 2), padding=(1, 0, 2), dilation=(2, 1, 1), groups=2)),
    ((4, 4, 5), (1, 3, 3), dict(groups=4, padding=1)),
]


def _conv_operands(spatial, kernel, config, rng):
    groups = config.get("groups", 1)
    x = rng.standard_normal((2, 4) + spatial).astype(np.float32)
    w = rng.standard_normal((6 if groups != 4 else 4, 4 // groups) + kernel).astype(np.float32)
    b = rng.standard_normal(w.shape[0]).astype(np.float32)
    return x, w, b


def _torch_conv(x, w, b, **config):
    d = x.ndim - 2
    return TORCH_CONV[d](*(torch.from_numpy(a.astype(np.float64)) for a in (x, w, b)), **config).numpy()


@pytest.mark.parametrize("spatial, kernel, config", CONV_CASES, ids=str)
def test_nd_conv_matches_pytorch(spatial, kernel, config):
    rng = np.random.default_rng(len(spatial) * 10 + len(config))
    x, w, b = _conv_operands(spatial, kernel, config, rng)
    want = _torch_conv(x, w, b, **config)
    d = len(spatial)
    xi, wi, bi = rc.input("x", x.shape), rc.input("w", w.shape), rc.input("b", b.shape)
    feeds = {"x": x, "w": w, "b": b}
    got = rc.evaluate(
        {
            "conv": rc.nn.conv(xi, wi, bi, **config),
            f"conv{d}d": getattr(rc.nn, f"conv{d}d")(xi, wi, bi, **config),
        },
        feeds,
    )
    for key in got:
        np.testing.assert_allclose(got[key], want, rtol=1e-4, atol=1e-5)


def test_nd_conv_with_asymmetric_pads_matches_padded_pytorch():
    rng = np.random.default_rng(7)
    x, w, b = _conv_operands((5, 6, 4), (2, 3, 2), dict(groups=2), rng)
    pads = [(0, 2), (1, 0), (2, 1)]
    padded = np.pad(x, [(0, 0), (0, 0)] + pads)
    want = _torch_conv(padded, w, b, stride=(2, 1, 1), groups=2)
    got = rc.evaluate(
        rc.nn.conv(
            rc.input("x", x.shape),
            rc.input("w", w.shape),
            rc.input("b", b.shape),
            stride=(2, 1, 1),
            padding=pads,
            groups=2,
        ),
        {"x": x, "w": w, "b": b},
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_nd_conv_on_the_emulator_with_a_symbolic_length():
    rng = np.random.default_rng(11)
    x1, w1, b1 = _conv_operands((13,), (3,), dict(groups=2), rng)
    x3, w3, b3 = _conv_operands((4, 5, 6), (2, 2, 3), dict(), rng)
    y1 = rc.nn.conv1d(
        rc.input("x1", (2, 4, "L")),
        rc.input("w1", w1.shape),
        rc.input("b1", b1.shape),
        stride=2,
        padding=1,
        dilation=2,
        groups=2,
    )
    y3 = rc.nn.conv3d(
        rc.input("x3", x3.shape), rc.input("w3", w3.shape), None, stride=(1, 2, 1), padding=(1, 1, 0)
    )
    got = rc.compile({"y1": y1, "y3": y3}).run(
        {"x1": x1, "w1": w1, "b1": b1, "x3": x3, "w3": w3}, backend="emulator"
    )
    np.testing.assert_allclose(
        got["y1"], _torch_conv(x1, w1, b1, stride=2, padding=1, dilation=2, groups=2), rtol=1e-4, atol=1e-5
    )
    want3 = F.conv3d(
        torch.from_numpy(x3.astype(np.float64)),
        torch.from_numpy(w3.astype(np.float64)),
        stride=(1, 2, 1),
        padding=(1, 1, 0),
    ).numpy()
    np.testing.assert_allclose(got["y3"], want3, rtol=1e-4, atol=1e-5)


def test_nd_conv_errors_name_the_tensors():
    x3 = rc.input("vol", (1, 4, 5, 5, 5))
    with pytest.raises(rc.ShapeError, match="conv1d weight.*3-D.*input 'k'"):
        rc.nn.conv1d(rc.input("seq", (1, 4, 9)), rc.input("k", (2, 4, 3, 3)))
    with pytest.raises(rc.ShapeError, match="conv expects a 5-D tensor.*input 'seq'"):
        rc.nn.conv(rc.input("seq", (1, 4, 9)), rc.input("k", (2, 4, 3, 3, 3)))
    with pytest.raises(rc.ShapeError, match="conv3d.*input 'vol'.*4 channels.*input 'k'.*3 x 1"):
        rc.nn.conv3d(x3, rc.input("k", (2, 3, 3, 3, 3)))
    with pytest.raises(rc.ShapeError, match="conv3d: padded input depth 5 of input 'vol'.*extent 7"):
        rc.nn.conv3d(x3, rc.input("k", (2, 4, 4, 1, 1)), dilation=2)
    with pytest.raises(rc.ShapeError, match="conv3d stride must be a positive int or 3 of them"):
        rc.nn.conv3d(x3, rc.input("k", (2, 4, 3, 3, 3)), stride=(1, 2))
    with pytest.raises(rc.ShapeError, match=r"conv padding must be .* 3 \(begin, end\) pairs"):
        rc.nn.conv(x3, rc.input("k", (2, 4, 3, 3, 3)), padding=[(1, 2), (1,), (0, 0)])
    with pytest.raises(rc.ShapeError, match="conv weight.*spatial axis.*input 'k'"):
        rc.nn.conv(x3, rc.input("k", (2, 4)))

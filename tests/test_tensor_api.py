"""Every Tensor method and module function, evaluated by the reference interpreter, against NumPy:
arithmetic, powers, comparisons, unary math, reductions, matmul, shapes and outputs. Views and
movement are in test_tensor_movement.py, `rc.nn` in test_nn_api.py.

Oracles are written directly in NumPy (float64), never through refcomp.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import refcomp as rc

from api_helpers import SPECIAL, close, exact, f32, run


# --- arithmetic ----------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "shapes", [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((5,), ())]
)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv"])
def test_binary_arithmetic_broadcasts_like_numpy(rng, shapes, op):
    a, b = f32(rng, *shapes[0]), f32(rng, *shapes[1], lo=0.5, hi=3.0)
    fn = {
        "add": lambda x, y: x + y,
        "sub": lambda x, y: x - y,
        "mul": lambda x, y: x * y,
        "truediv": lambda x, y: x / y,
    }[op]
    close(run(fn, a, b), fn(a.astype(np.float64), b.astype(np.float64)))


@pytest.mark.parametrize("scalar", [3, -2.5, 0.0, np.float32(1.5), np.float64(-0.25), np.int64(4)])
def test_scalars_on_either_side(rng, scalar):
    a = f32(rng, 2, 3, lo=0.5, hi=2.0)
    s = float(scalar)
    got = run(lambda x: [x + scalar, scalar + x, x - scalar, scalar - x, x * scalar, scalar * x, -x], a)
    for g, e in zip(got, [a + s, s + a, a - s, s - a, a * s, s * a, -a]):
        close(g, e)
    if s != 0:
        close(run(lambda x: x / scalar, a), a / s)
    close(run(lambda x: scalar / x, a), s / a.astype(np.float64))


def test_division_by_zero_and_reciprocal_of_signed_zero():
    a = np.array([1.0, -1.0, 0.0, 0.0, -0.0], np.float32)
    b = np.array([0.0, 0.0, 0.0, 1.0, 1.0], np.float32)
    got = run(lambda x, y: [x / y, x / 0.0, y.reciprocal()], a, b)
    with np.errstate(all="ignore"):
        close(got[0], a / b)
        close(got[1], a / np.float32(0.0))
        close(got[2], np.reciprocal(b))
    exact(np.signbit(run(lambda x: x.reciprocal(), np.array([0.0, -0.0], np.float32))), [False, True])


def test_numpy_arrays_are_not_tensor_operands():
    x = rc.input("x", (3,))
    with pytest.raises(rc.RefcompError, match="ndarray"):
        np.ones(3, np.float32) + x
    with pytest.raises(rc.RefcompError, match="ndarray"):
        x * np.ones(3, np.float32)
    with pytest.raises(rc.RefcompError):
        np.ones((3, 3), np.float32) @ x


@pytest.mark.parametrize("a, b", [
    ([5.5, -5.5, 5.5, -5.5, 3.0, -3.0, 0.0, 7.25], [2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 2.0, 0.5]),
    ([1.0, -1.0, np.inf, 2.0, np.nan], [0.0, 3.0, 2.0, np.nan, 1.0]),
])
def test_mod_is_numpy_remainder_and_fmod_is_c_fmod(a, b):
    a, b = np.array(a, np.float32), np.array(b, np.float32)
    with np.errstate(all="ignore"):
        close(run(lambda x, y: x % y, a, b), np.mod(a, b))
        close(run(lambda x, y: rc.fmod(x, y), a, b), np.fmod(a, b))
        close(run(lambda x: x % 2.0, a), np.mod(a, np.float32(2.0)))
        close(run(lambda x: 7.0 % x, b), np.mod(np.float32(7.0), b))


# --- powers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 5, -1, -2, -3, 16, 17, 20, 2.0, -4.0])
def test_integer_powers_of_any_sign(rng, exponent):
    a = np.concatenate(
        [f32(rng, 8, lo=-1.5, hi=1.5), np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -2.0, 1.0], np.float32)]
    )
    with np.errstate(all="ignore"):
        expected = np.power(a.astype(np.float64), float(exponent))
    close(run(lambda x: x ** exponent, a), expected.astype(np.float32), rtol=1e-5 * max(1, abs(exponent)))


@pytest.mark.parametrize("exponent", [0.5, -0.5, 1.5, 0.3, -2.7, 100.5])
def test_fractional_powers(rng, exponent):
    a = np.concatenate([f32(rng, 8, lo=0.1, hi=3.0), np.array([0.0, np.inf, -1.0, np.nan], np.float32)])
    with np.errstate(all="ignore"):
        expected = np.power(a.astype(np.float64), exponent).astype(np.float32)
    close(run(lambda x: x ** exponent, a), expected, rtol=1e-4)


def test_tensor_powers_and_rpow(rng):
    a, b = f32(rng, 3, 4, lo=0.2, hi=3.0), f32(rng, 3, 4, lo=-2.0, hi=2.0)
    close(run(lambda x, y: x ** y, a, b), a.astype(np.float64) ** b, rtol=1e-5)
    close(run(lambda y: 2.0 ** y, b), 2.0 ** b.astype(np.float64), rtol=1e-5)
    close(run(lambda y: 0.5 ** y, b), 0.5 ** b.astype(np.float64), rtol=1e-5)
    e = np.array([2.0, 0.0, -1.0, 0.5, np.nan, np.inf], np.float32)
    with np.errstate(all="ignore"):
        close(run(lambda y: 0.0 ** y, e), np.power(np.float32(0.0), e))
        close(run(lambda y: 3.0 ** y, e), np.power(np.float32(3.0), e), rtol=1e-5)


def test_power_zero_is_one_everywhere_and_keeps_symbolic_shape():
    x = rc.input("x", ("T",))
    a = np.array([0.0, np.nan, np.inf, -np.inf, -2.0], np.float32)
    exact(rc.evaluate(x ** 0, {"x": a}), np.power(a, 0))  # no dims= needed: still reads x


# --- comparisons ---------------------------------------------------------------------------------

COMPARISONS = {
    "lt": (lambda x, y: x < y, np.less), "gt": (lambda x, y: x > y, np.greater),
    "le": (lambda x, y: x <= y, np.less_equal), "ge": (lambda x, y: x >= y, np.greater_equal),
    "eq": (lambda x, y: x == y, np.equal), "ne": (lambda x, y: x != y, np.not_equal),
    "eq_method": (lambda x, y: x.eq(y), np.equal), "ne_method": (lambda x, y: x.ne(y), np.not_equal),
}


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparisons_give_one_and_zero_like_numpy_including_nan(name):
    ours, theirs = COMPARISONS[name]
    a = np.repeat(SPECIAL, len(SPECIAL))
    b = np.tile(SPECIAL, len(SPECIAL))
    exact(run(ours, a, b), theirs(a, b).astype(np.float32))
    exact(run(lambda x: ours(x, 1.0), SPECIAL), theirs(SPECIAL, np.float32(1.0)).astype(np.float32))
    exact(
        run(
            lambda x: ours(2.5, x) if name not in ("eq_method", "ne_method") else ours(rc.constant(2.5), x),
            SPECIAL,
        ),
        theirs(np.float32(2.5), SPECIAL).astype(np.float32),
    )


def test_isnan():
    exact(run(lambda x: x.isnan(), SPECIAL), np.isnan(SPECIAL).astype(np.float32))


def test_comparison_broadcasts(rng):
    a, b = f32(rng, 3, 1), f32(rng, 4)
    exact(run(lambda x, y: x < y, a, b), (a < b).astype(np.float32))


# --- unary math ----------------------------------------------------------------------------------

def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


UNARY = {
    "exp": (lambda t: t.exp(), np.exp), "log": (lambda t: t.log(), np.log),
    "exp2": (lambda t: t.exp2(), np.exp2), "log2": (lambda t: t.log2(), np.log2),
    "sin": (lambda t: t.sin(), np.sin), "cos": (lambda t: t.cos(), np.cos),
    "sqrt": (lambda t: t.sqrt(), np.sqrt), "rsqrt": (lambda t: t.rsqrt(), lambda x: 1.0 / np.sqrt(x)),
    "reciprocal": (lambda t: t.reciprocal(), np.reciprocal), "abs": (lambda t: t.abs(), np.abs),
    "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0.0)),
    "sigmoid": (lambda t: t.sigmoid(), lambda x: 1.0 / (1.0 + np.exp(-x))),
    "tanh": (lambda t: t.tanh(), np.tanh), "gelu": (lambda t: t.gelu(approximate="tanh"), _gelu_tanh),
    "silu": (lambda t: t.silu(), lambda x: x / (1.0 + np.exp(-x))),
}
POSITIVE_ONLY = {"log", "log2", "sqrt", "rsqrt"}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_math_on_ordinary_values(rng, name):
    ours, theirs = UNARY[name]
    a = f32(rng, 4, 5, lo=0.05, hi=4.0) if name in POSITIVE_ONLY else f32(rng, 4, 5, lo=-4.0, hi=4.0)
    with np.errstate(all="ignore"):
        expected = theirs(a.astype(np.float64))
    close(run(ours, a), expected, rtol=5e-5, atol=2e-6)


# Special values where NumPy's answer is well defined and our formula is expected to reproduce it.
SPECIAL_CASES = {
    "exp": [0.0, -np.inf, np.inf, np.nan, -200.0, 100.0],
    "log": [0.0, -0.0, -1.0, np.inf, np.nan, 1.0],
    "exp2": [-np.inf, np.inf, np.nan, 0.0, -200.0],
    "log2": [0.0, -1.0, np.inf, np.nan, 1.0, 8.0],
    "sin": [0.0, np.inf, -np.inf, np.nan],
    "sqrt": [0.0, -1.0, np.inf, np.nan, 4.0],
    "rsqrt": [0.0, np.inf, -1.0, np.nan, 4.0],
    "reciprocal": [0.0, -0.0, np.inf, -np.inf, np.nan],
    "abs": [-np.inf, np.inf, np.nan, -0.0, -3.0],
    "relu": [-np.inf, np.inf, np.nan, -1e30, 0.0],
    "sigmoid": [-np.inf, np.inf, np.nan, -200.0, 200.0, 0.0],
    "tanh": [-np.inf, np.inf, np.nan, 0.0, -50.0, 50.0],
    "gelu": [np.inf, np.nan, 0.0, -20.0],
    "silu": [np.inf, np.nan, 0.0, -200.0],
}


@pytest.mark.parametrize("name", sorted(SPECIAL_CASES))
def test_unary_math_on_special_values(name):
    ours, theirs = UNARY[name]
    a = np.array(SPECIAL_CASES[name], np.float32)
    with np.errstate(all="ignore"):
        expected = theirs(a.astype(np.float64)).astype(np.float32)
    close(run(ours, a), expected, rtol=1e-5, atol=1e-6)


def test_maximum_minimum_clip_propagate_nan_like_numpy(rng):
    a = np.repeat(SPECIAL, len(SPECIAL))
    b = np.tile(SPECIAL, len(SPECIAL))
    exact(run(lambda x, y: rc.maximum(x, y), a, b), np.maximum(a, b))
    exact(run(lambda x, y: rc.minimum(x, y), a, b), np.minimum(a, b))
    exact(run(lambda x, y: x.maximum(y), a, b), np.maximum(a, b))
    exact(run(lambda x: rc.maximum(0.5, x), SPECIAL), np.maximum(np.float32(0.5), SPECIAL))
    exact(run(lambda x: x.minimum(0.5), SPECIAL), np.minimum(SPECIAL, np.float32(0.5)))
    exact(run(lambda x: x.clip(-1.0, 2.0), SPECIAL), np.clip(SPECIAL, -1.0, 2.0))
    exact(run(lambda x: x.clip(min=0.0), SPECIAL), np.maximum(SPECIAL, 0.0))
    exact(run(lambda x: x.clip(max=0.0), SPECIAL), np.minimum(SPECIAL, 0.0))
    c, d = f32(rng, 3, 1), f32(rng, 1, 4)
    exact(run(lambda x, y: rc.maximum(x, y), c, d), np.maximum(c, d))


def test_where(rng):
    c, a, b = f32(rng, 3, 4), f32(rng, 3, 4), f32(rng, 4)
    exact(run(lambda x, y, z: rc.where(x > 0.0, y, z), c, a, b), np.where(c > 0, a, b))
    exact(run(lambda x, y: rc.where(x < y, 1.5, -2.0), c, a), np.where(c < a, 1.5, -2.0).astype(np.float32))
    exact(run(lambda x: rc.where(x > 0.0, x, 0.0), c), np.where(c > 0, c, 0).astype(np.float32))


# --- reductions ----------------------------------------------------------------------------------

AXES = [None, 0, 1, 2, -1, -3, (0, 2), (2, 0), (-1, 1), (0, 1, 2), ()]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("name", ["sum", "max", "min", "mean", "var"])
def test_reductions(rng, name, axis, keepdims):
    """Over one axis, several, or all (None, or () as PyTorch reads it), against NumPy: over axes max and
    min are amax and amin (max and min with a dim also return indices); var with NumPy's ddof=0."""
    a = f32(rng, 2, 3, 4)
    ours, extra = {"max": "amax", "min": "amin"}.get(name, name), {"ddof": 0} if name == "var" else {}
    got = run(lambda x: getattr(x, ours)(axis, keepdims=keepdims, **extra), a)
    expected = getattr(np, name)(
        a.astype(np.float64), axis=None if axis == () else axis, keepdims=keepdims, **extra
    )
    close(got, expected, rtol=1e-5, atol=1e-6)


def test_var_correction_and_reductions_with_nan_and_inf(rng):
    a = f32(rng, 3, 5)
    close(run(lambda x: x.var(1, correction=1), a), np.var(a.astype(np.float64), axis=1, ddof=1))
    b = np.array([[1.0, np.nan, 2.0], [-np.inf, 0.0, 1.0], [np.inf, np.inf, 1.0]], np.float32)
    exact(run(lambda x: x.amax(1), b), np.max(b, axis=1))
    exact(run(lambda x: x.amin(1), b), np.min(b, axis=1))
    exact(run(lambda x: x.sum(1), b), np.sum(b, axis=1))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_and_log_softmax(rng, axis):
    a = f32(rng, 2, 3, 4, lo=-30, hi=30)
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    softmax = e / e.sum(axis, keepdims=True)
    close(run(lambda t: t.softmax(axis), a), softmax, rtol=1e-4, atol=1e-7)
    close(run(lambda t: t.log_softmax(axis), a), np.log(softmax), rtol=1e-4, atol=1e-5)


def test_softmax_with_infinite_logits():
    a = np.array([[0.0, -np.inf, 1.0], [-np.inf, 5.0, -np.inf]], np.float32)
    e = np.exp(a - a.max(-1, keepdims=True))
    close(run(lambda t: t.softmax(-1), a), e / e.sum(-1, keepdims=True))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2])
def test_argmax_picks_the_first_maximum(rng, axis, keepdims):
    a = rng.integers(0, 3, (3, 4, 5)).astype(np.float32)  # many ties
    exact(run(lambda t: t.argmax(axis, keepdims=keepdims), a),
          np.argmax(a, axis=axis, keepdims=keepdims).astype(np.float32))


def test_argmax_with_infinities_and_nan():
    a = np.array(
        [[1.0, np.inf, np.inf], [-np.inf, -np.inf, -np.inf], [0.0, np.nan, 5.0], [np.nan, np.nan, 1.0]],
        np.float32,
    )
    exact(run(lambda t: t.argmax(-1), a), np.argmax(a, axis=-1).astype(np.float32))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_cumsum(rng, axis):
    a = f32(rng, 3, 4, 5)
    close(run(lambda t: t.cumsum(axis), a), np.cumsum(a.astype(np.float64), axis=axis), rtol=1e-5, atol=1e-5)


# --- matmul --------------------------------------------------------------------------------------

@pytest.mark.parametrize("sa, sb", [
    ((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((2, 4), (4, 3)), ((5, 2, 4), (4, 3)),
    ((2, 4), (5, 4, 3)), ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (6, 4, 2)), ((3, 4), (3, 4, 1)),
])
def test_matmul_like_numpy(rng, sa, sb):
    a, b = f32(rng, *sa), f32(rng, *sb)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
    close(run(lambda x, y: x @ y, a, b), expected, rtol=1e-5, atol=1e-5)
    close(run(lambda x, y: x.matmul(y), a, b), expected, rtol=1e-5, atol=1e-5)


def test_matmul_with_symbolic_batch(rng):
    x, w = rc.input("x", ("B", "T", 4)), rc.input("w", (4, 3))
    out = x @ w
    assert [str(n) for n in out.shape] == ["B", "T", "3"]
    for b, t in [(1, 2), (3, 5)]:
        a, wa = f32(rng, b, t, 4), f32(rng, 4, 3)
        close(rc.evaluate(out, {"x": a, "w": wa}), a.astype(np.float64) @ wa, rtol=1e-5, atol=1e-5)


# --- shapes, outputs, precision -------------------------------------------------------------------

def test_shape_reports_ints_and_symbols():
    x = rc.input("x", ("B", 3, "T"))
    b, three, t = x.shape
    assert three == 3 and type(three) is int
    assert str(b) == "B" and str(t) == "T" and not isinstance(b, int)
    assert x.ndim == 3 and x.dtype == "float32"
    assert str(rc.concat([x, x], axis=2).shape[2]) == "2*T"
    assert x[:, :, ::2].shape[:2] == (b, 3)
    assert x.sum(1).shape == (b, t)
    ids = rc.input("ids", ("B",), dtype="int32")
    assert ids.dtype == "int32"
    assert "input 'x'" in repr(x) and "(B, 3, T)" in repr(x)


def test_output_structures(rng):
    a = f32(rng, 2, 3)
    x = rc.input("x", (2, 3))
    single = rc.evaluate(x * 2.0, {"x": a})
    assert isinstance(single, np.ndarray)
    as_list = rc.evaluate([x, x.sum()], {"x": a})
    assert isinstance(as_list, list) and len(as_list) == 2
    as_tuple = rc.evaluate((x.T, x + 1.0), {"x": a})
    assert isinstance(as_tuple, list) and len(as_tuple) == 2
    as_dict = rc.evaluate({"double": x * 2.0, "total": x.sum()}, {"x": a})
    assert list(as_dict) == ["double", "total"]
    exact(single, a * 2)
    exact(as_list[0], a)
    close(as_list[1], a.astype(np.float64).sum())
    exact(as_tuple[0], a.T)
    exact(as_dict["double"], a * 2)
    assert rc.evaluate([], {}) == []
    c = rc.evaluate(rc.constant(2.5), {})
    assert c.shape == () and c == 2.5


def test_float64_precision(rng):
    a = rng.standard_normal((3, 4))
    x = rc.input("x", (3, 4))
    got = rc.evaluate(x / 3.0 + x.exp().sum(-1, keepdims=True), {"x": a}, precision="float64")
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, a / 3.0 + np.exp(a).sum(-1, keepdims=True), rtol=1e-13)
    low = rc.evaluate(x / 3.0, {"x": a})
    assert low.dtype == np.float32

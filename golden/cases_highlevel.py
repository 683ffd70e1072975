"""Golden cases for the high-level ops built from primitives: math, comparisons, reductions, matmul."""
from __future__ import annotations

import math

import numpy as np

import refcomp as rc

from .cases_common import case, f64, gelu_tanh, log_softmax, normal, sigmoid, signed_away, softmax, uniform

T = ("highlevel",)


def _unary(name, fn, np_fn, sample, shape=(4, 6)):
    return case(name,
                build=lambda: fn(rc.input("x", shape)),
                make_inputs=lambda rng, b: {"x": sample(rng, shape)},
                oracle=lambda f: np_fn(f64(f, "x")),
                tags=T)


def _binary(name, fn, np_fn, sample_a, sample_b, shape_a=(3, 4), shape_b=(3, 4), tags=T):
    return case(name,
                build=lambda: fn(rc.input("a", shape_a), rc.input("b", shape_b)),
                make_inputs=lambda rng, b: {"a": sample_a(rng, shape_a), "b": sample_b(rng, shape_b)},
                oracle=lambda f: np_fn(*f64(f, "a", "b")),
                tags=tags)


def _with_ties(rng, shape):
    a = np.round(normal(rng, shape) * 2.0) / 2.0  # coarse values: many exact ties
    return a.astype(np.float32)


def _comparisons(a, b):
    return {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a.eq(b), "ne": a.ne(b),
            "eq_op": a == b, "ne_op": a != b, "lt_scalar": a < 0.5, "ge_scalar": a >= 0.5}


def _comparisons_np(a, b):
    out = {"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b, "eq": a == b, "ne": a != b,
           "eq_op": a == b, "ne_op": a != b, "lt_scalar": a < 0.5, "ge_scalar": a >= 0.5}
    return {k: v.astype(np.float64) for k, v in out.items()}


def _reduce_3d(x):
    out = {}
    for axis in range(3):
        out[f"sum{axis}"] = x.sum(axis)
        out[f"max{axis}"] = x.amax(axis)
        out[f"min{axis}"] = x.amin(axis)
        out[f"mean{axis}"] = x.mean(axis)
        out[f"var{axis}"] = x.var(axis, correction=0)
    return out


def _reduce_3d_np(x):
    out = {}
    for axis in range(3):
        out[f"sum{axis}"] = x.sum(axis)
        out[f"max{axis}"] = x.max(axis)
        out[f"min{axis}"] = x.min(axis)
        out[f"mean{axis}"] = x.mean(axis)
        out[f"var{axis}"] = ((x - x.mean(axis, keepdims=True)) ** 2).mean(axis)
    return out


def _reduce_tuples(x):
    return {"sum02": x.sum((0, 2)), "sum_all": x.sum(), "sum_keep": x.sum((1, 2), keepdims=True),
            "max01_keep": x.amax((0, 1), keepdims=True), "min_neg": x.amin((-1, -3)), "max_all": x.max(),
            "mean12": x.mean((1, 2)), "mean_keep": x.mean(-1, keepdims=True), "mean_all": x.mean(),
            "var01": x.var((0, 1), correction=0), "var_keep": x.var(2, keepdims=True, correction=0),
            "var_unbiased": x.var(1, correction=1)}


def _reduce_tuples_np(x):
    def var(axis, keepdims=False, ddof=0):
        return np.var(x, axis=axis, keepdims=keepdims, ddof=ddof)
    return {"sum02": x.sum((0, 2)), "sum_all": x.sum(), "sum_keep": x.sum((1, 2), keepdims=True),
            "max01_keep": x.max((0, 1), keepdims=True), "min_neg": x.min((2, 0)), "max_all": x.max(),
            "mean12": x.mean((1, 2)), "mean_keep": x.mean(-1, keepdims=True), "mean_all": x.mean(),
            "var01": var((0, 1)), "var_keep": var(2, keepdims=True), "var_unbiased": var(1, ddof=1)}


def _cumsum_np(x):
    out = {}
    for axis in range(3):
        acc = np.zeros_like(x)
        running = np.zeros(np.delete(np.array(x.shape), axis))
        for i in range(x.shape[axis]):
            running = running + np.take(x, i, axis=axis)
            index = [slice(None)] * 3
            index[axis] = i
            acc[tuple(index)] = running
        out[f"axis{axis}"] = acc
    return out


def _matmul_build():
    a, b = rc.input("a", (3, 5)), rc.input("b", (5, 4))
    ba, bb = rc.input("ba", (2, 1, 3, 5)), rc.input("bb", (3, 5, 4))
    v, w = rc.input("v", (5,)), rc.input("w", (3,))
    return {
        "mm": a @ b,
        "method": a.matmul(b),
        "batched": ba @ bb,
        "mat_batch": a @ bb,
        "vec_mat": v @ b,
        "mat_vec": a @ v,
        "vec_vec": v @ v,
        "vec_batched": w @ ba,
        "batched_vec": bb @ rc.input("u", (4,)),
    }


def _matmul_inputs(rng, b):
    shapes = {"a": (3, 5), "b": (5, 4), "ba": (2, 1, 3, 5), "bb": (3, 5, 4), "v": (5,), "w": (3,), "u": (4,)}
    return {k: normal(rng, s) for k, s in shapes.items()}


def _matmul_np(f):
    a, b, ba, bb, v, w, u = f64(f, "a", "b", "ba", "bb", "v", "w", "u")
    loops = np.zeros((2, 3, 3, 4))  # the batched product by explicit loops over the broadcast batch
    for i in range(2):
        for j in range(3):
            for m in range(3):
                for n in range(4):
                    loops[i, j, m, n] = sum(ba[i, 0, m, k] * bb[j, k, n] for k in range(5))
    return {"mm": np.matmul(a, b), "method": np.matmul(a, b), "batched": loops, "mat_batch": np.matmul(a, bb),
            "vec_mat": np.matmul(v, b), "mat_vec": np.matmul(a, v), "vec_vec": np.dot(v, v),
            "vec_batched": np.matmul(w, ba), "batched_vec": np.matmul(bb, u)}


def _argmax_inputs(rng, b):
    return {"x": rng.permutation(60).reshape(3, 4, 5).astype(np.float32) * 0.37 - 9.0}  # distinct: no ties


def _where_build():
    c, a, b = rc.input("c", (3, 4)), rc.input("a", (3, 4)), rc.input("b", (4,))
    return {
        "y": rc.where(c > 0.0, a, b),
        "scalar": rc.where(a < b, a, 0.0),
        "mixed": rc.where(c > 0.5, 2.0, a),
    }


def _where_np(f):
    c, a, b = f64(f, "c", "a", "b")
    return {"y": np.where(c > 0, a, b), "scalar": np.where(a < b, a, 0.0), "mixed": np.where(c > 0.5, 2.0, a)}


def _specials(rng, shape):
    """Normal values with infinities, NaN and signed zeros planted at random positions."""
    x = normal(rng, shape).reshape(-1)
    picks = rng.choice(x.size, 8, replace=False)
    x[picks] = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, -np.inf], np.float32)
    return x.reshape(shape)


def _select_build():
    x, m = rc.input("x", (4, 6)), rc.input("m", (4, 6))
    keep = m > 0.0
    return {"log_pos": rc.where(x > 0.0, x.log(), -math.inf),  # log of a negative is NaN: never selected
            "inf_branch": rc.where(x.isfinite(), x, 0.0),
            "masked_softmax": (m + rc.where(keep, 0.0, -math.inf)).softmax(-1),
            "remainder": x % rc.where(keep, math.inf, -math.inf)}


def _select_np(f):
    x, m = f64(f, "x", "m")
    with np.errstate(all="ignore"):
        masked = np.where(m > 0, m, -np.inf)
        return {
            "log_pos": np.where(x > 0, np.log(x), -np.inf),
            "inf_branch": np.where(np.isfinite(x), x, 0.0),
            "masked_softmax": softmax(masked, -1),
            "remainder": np.remainder(x, np.where(m > 0, np.inf, -np.inf)),
        }


def _select_inputs(rng, b):
    m = normal(rng, (4, 6))
    m[:, 0] = np.abs(m[:, 0]) + 0.1  # every row keeps one entry
    return {"x": _specials(rng, (4, 6)), "m": m}


def _power_edges(x, y):
    return {
        "tensor": x**y,
        "half": x**0.5,
        "p03": x**0.3,
        "cube": x**3,
        "m3": x**-3,
        "zero": x**0,
        "inf": x**math.inf,
        "m_inf": x**-math.inf,
        "pos_base": 2.0**y,
    }


def _power_edges_np(x, y):
    with np.errstate(all="ignore"):
        return {
            "tensor": np.power(x, y),
            "half": np.sqrt(x),
            "p03": np.power(x, 0.3),
            "cube": x**3,
            "m3": x**-3.0,
            "zero": np.power(x, 0.0),
            "inf": np.power(x, np.inf),
            "m_inf": np.power(x, -np.inf),
            "pos_base": np.power(2.0, y),
        }


def _power_inputs(rng, b):
    x = _specials(rng, (5, 8))
    x[0, :] = [
        -8.0,
        -2.0,
        -0.5,
        -1.0,
        0.5,
        2.0,
        -3.0,
        -1.5,
    ]  # negative bases against the integral exponents below
    y = rng.choice(
        np.array([-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 0.5, -0.5, 1.5, np.inf, -np.inf, np.nan], np.float32),
        (5, 8),
    )
    return {"x": x, "y": y}


CASES = [
    _binary(
        "hl_sub",
        lambda a, b: {"y": a - b, "rs": 1.5 - a, "s": a - 0.25},
        lambda a, b: {"y": a - b, "rs": 1.5 - a, "s": a - 0.25},
        normal,
        normal,
    ),
    _binary(
        "hl_div",
        lambda a, b: {"y": a / b, "rs": 2.0 / b, "s": a / 4.0, "s3": a / 3.0},
        lambda a, b: {"y": a / b, "rs": 2.0 / b, "s": a / 4.0, "s3": a / 3.0},
        normal,
        lambda rng, s: signed_away(rng, 0.3, 3.0, s),
    ),
    _unary(
        "hl_pow_integer",
        lambda x: {"p3": x**3, "p2": x**2, "p0": x**0, "p1": x**1, "pm2": x**-2, "p5": x**5.0},
        lambda x: {"p3": x**3, "p2": x**2, "p0": np.ones_like(x), "p1": x, "pm2": x**-2.0, "p5": x**5},
        lambda rng, s: signed_away(rng, 0.4, 2.0, s),
    ),
    _unary(
        "hl_pow_fractional",
        lambda x: {
            "p17": x**1.7,
            "half": x**0.5,
            "mhalf": x**-0.5,
            "p033": x**0.33,
            "rpow": 2.0**x,
            "rpow_e": 0.5**x,
        },
        lambda x: {
            "p17": x**1.7,
            "half": np.sqrt(x),
            "mhalf": 1.0 / np.sqrt(x),
            "p033": x**0.33,
            "rpow": 2.0**x,
            "rpow_e": 0.5**x,
        },
        lambda rng, s: uniform(rng, 0.1, 4.0, s),
    ),
    _binary(
        "hl_pow_tensor",
        lambda a, b: {"y": a**b},
        lambda a, b: {"y": a**b},
        lambda rng, s: uniform(rng, 0.2, 3.0, s),
        lambda rng, s: uniform(rng, -2.0, 2.0, s),
    ),
    _unary("hl_neg", lambda x: {"y": -x, "yy": -(-x) + x}, lambda x: {"y": -x, "yy": 2.0 * x}, normal),
    _binary("hl_comparisons", _comparisons, _comparisons_np, _with_ties, _with_ties),
    _unary(
        "hl_exp_log",
        lambda x: {"exp": x.exp(), "log": x.log(), "log_exp": x.exp().log()},
        lambda x: {"exp": np.exp(x), "log": np.log(x), "log_exp": x},
        lambda rng, s: uniform(rng, 0.05, 5.0, s),
    ),
    _unary(
        "hl_exp_negative",
        lambda x: {"exp": x.exp()},
        lambda x: {"exp": np.exp(x)},
        lambda rng, s: uniform(rng, -6.0, 3.0, s),
    ),
    _unary(
        "hl_cos",
        lambda x: {"y": x.cos()},
        lambda x: {"y": np.cos(x)},
        lambda rng, s: uniform(rng, -6.5, 6.5, s),
    ),
    _unary(
        "hl_rsqrt",
        lambda x: {"y": x.rsqrt()},
        lambda x: {"y": 1.0 / np.sqrt(x)},
        lambda rng, s: uniform(rng, 0.05, 10.0, s),
    ),
    _unary(
        "hl_abs_relu",
        lambda x: {"abs": x.abs(), "relu": x.relu()},
        lambda x: {"abs": np.abs(x), "relu": np.where(x > 0, x, 0.0)},
        normal,
    ),
    _unary(
        "hl_activations",
        lambda x: {
            "sigmoid": x.sigmoid(),
            "tanh": x.tanh(),
            "gelu": x.gelu(approximate="tanh"),
            "silu": x.silu(),
        },
        lambda x: {"sigmoid": sigmoid(x), "tanh": np.tanh(x), "gelu": gelu_tanh(x), "silu": x * sigmoid(x)},
        lambda rng, s: normal(rng, s, scale=2.5),
        shape=(5, 8),
    ),
    _binary(
        "hl_maximum_minimum",
        lambda a, b: {
            "max": rc.maximum(a, b),
            "min": rc.minimum(a, b),
            "max_m": a.maximum(b),
            "min_m": a.minimum(b),
            "max_s": a.maximum(0.3),
            "min_s": rc.minimum(-0.2, b),
        },
        lambda a, b: {
            "max": np.maximum(a, b),
            "min": np.minimum(a, b),
            "max_m": np.maximum(a, b),
            "min_m": np.minimum(a, b),
            "max_s": np.maximum(a, 0.3),
            "min_s": np.minimum(-0.2, b),
        },
        normal,
        normal,
        shape_a=(3, 4),
        shape_b=(4,),
        tags=T + ("broadcast",),
    ),
    _unary(
        "hl_clip",
        lambda x: {"both": x.clip(-0.5, 0.75), "lo": x.clip(min=0.1), "hi": x.clip(max=-0.1)},
        lambda x: {"both": np.clip(x, -0.5, 0.75), "lo": np.maximum(x, 0.1), "hi": np.minimum(x, -0.1)},
        normal,
    ),
    case(
        "hl_where",
        build=_where_build,
        make_inputs=lambda rng, b: {
            "c": normal(rng, (3, 4)),
            "a": normal(rng, (3, 4)),
            "b": normal(rng, (4,)),
        },
        oracle=_where_np,
        tags=T + ("broadcast",),
    ),
    case("hl_where_select", build=_select_build, make_inputs=_select_inputs, oracle=_select_np, tags=T),
    case(
        "hl_pow_edges",
        build=lambda: _power_edges(rc.input("x", (5, 8)), rc.input("y", (5, 8))),
        make_inputs=_power_inputs,
        oracle=lambda f: _power_edges_np(*f64(f, "x", "y")),
        tags=T,
    ),
    _unary("hl_reduce_every_axis", _reduce_3d, _reduce_3d_np, normal, shape=(3, 4, 5)),
    _unary("hl_reduce_axis_tuples", _reduce_tuples, _reduce_tuples_np, normal, shape=(3, 4, 5)),
    _unary(
        "hl_softmax",
        lambda x: {"last": x.softmax(), "first": x.softmax(0), "mid": x.softmax(1)},
        lambda x: {"last": softmax(x, -1), "first": softmax(x, 0), "mid": softmax(x, 1)},
        lambda rng, s: normal(rng, s, scale=3.0),
        shape=(3, 4, 6),
    ),
    _unary(
        "hl_log_softmax",
        lambda x: {"last": x.log_softmax(), "first": x.log_softmax(0)},
        lambda x: {"last": log_softmax(x, -1), "first": log_softmax(x, 0)},
        lambda rng, s: normal(rng, s, scale=3.0),
        shape=(4, 7),
    ),
    case(
        "hl_argmax",
        build=lambda: (
            lambda x: {"last": x.argmax(-1), "first": x.argmax(0), "mid_keep": x.argmax(1, keepdims=True)}
        )(rc.input("x", (3, 4, 5))),
        make_inputs=_argmax_inputs,
        oracle=lambda f: {
            "last": np.argmax(f64(f, "x"), -1).astype(np.float64),
            "first": np.argmax(f64(f, "x"), 0).astype(np.float64),
            "mid_keep": np.argmax(f64(f, "x"), 1)[:, None, :].astype(np.float64),
        },
        tags=T,
    ),
    _unary(
        "hl_cumsum",
        lambda x: {"axis0": x.cumsum(0), "axis1": x.cumsum(1), "axis2": x.cumsum(-1)},
        _cumsum_np,
        normal,
        shape=(3, 4, 5),
    ),
    case(
        "hl_matmul",
        build=_matmul_build,
        make_inputs=_matmul_inputs,
        oracle=_matmul_np,
        tags=T + ("broadcast",),
    ),
    _binary(
        "hl_broadcast_binary",
        lambda a, b: {"add": a + b, "mul": a * b, "sub": b - a, "div": a / (b * b + 1.0), "lt": a < b},
        lambda a, b: {
            "add": a + b,
            "mul": a * b,
            "sub": b - a,
            "div": a / (b * b + 1.0),
            "lt": (a < b).astype(np.float64),
        },
        normal,
        normal,
        shape_a=(2, 1, 4),
        shape_b=(3, 1),
        tags=T + ("broadcast",),
    ),
    _unary(
        "hl_constant_math",
        lambda x: {"y": (x * math.pi).sin() * 0.5 + (x - 1.0) * (x + 1.0)},
        lambda x: {"y": np.sin(x * math.pi) * 0.5 + (x - 1.0) * (x + 1.0)},
        normal,
    ),
]

"""Golden cases that exercise each primitive op through the public API."""
from __future__ import annotations

import numpy as np

import refcomp as rc

from .cases_common import case, f64, ids, normal, signed_away, uniform

T = ("primitive",)


def _unary(name, method, np_fn, sample, shape=(4, 6)):
    return case(
        name,
        build=lambda: {"y": getattr(rc.input("x", shape), method)()},
        make_inputs=lambda rng, b: {"x": sample(rng, shape)},
        oracle=lambda f: {"y": np_fn(f64(f, "x"))},
        tags=T,
    )


def _binary(name, fn, np_fn, sample_a, sample_b, shape=(3, 5)):
    return case(
        name,
        build=lambda: {"y": fn(rc.input("a", shape), rc.input("b", shape))},
        make_inputs=lambda rng, b: {"a": sample_a(rng, shape), "b": sample_b(rng, shape)},
        oracle=lambda f: {"y": np_fn(*f64(f, "a", "b"))},
        tags=T,
    )


def _less_than_inputs(rng, b):
    a = normal(rng, (4, 5))
    other = normal(rng, (4, 5))
    other[0] = a[0]  # ties: a < a is false
    other[1, :2] = np.nextafter(a[1, :2], np.float32(np.inf))  # one ulp above: true
    return {"a": a, "b": other}


CASES = [
    _unary("prim_exp2", "exp2", np.exp2, lambda rng, s: uniform(rng, -4, 4, s)),
    _unary("prim_log2", "log2", np.log2, lambda rng, s: uniform(rng, 0.05, 20, s)),
    _unary("prim_sin", "sin", np.sin, lambda rng, s: uniform(rng, -6.5, 6.5, s)),
    _unary("prim_sqrt", "sqrt", np.sqrt, lambda rng, s: uniform(rng, 0.01, 9, s)),
    _unary("prim_reciprocal", "reciprocal", lambda x: 1.0 / x, lambda rng, s: signed_away(rng, 0.25, 4, s)),
    _binary("prim_add", lambda a, b: a + b, lambda a, b: a + b, normal, normal),
    _binary("prim_mul", lambda a, b: a * b, lambda a, b: a * b, normal, normal),
    _binary(
        "prim_fmod",
        rc.fmod,
        np.fmod,
        lambda rng, s: uniform(rng, -10, 10, s),
        lambda rng, s: signed_away(rng, 0.5, 3, s),
    ),
    case(
        "prim_less_than",
        build=lambda: {"y": rc.input("a", (4, 5)) < rc.input("b", (4, 5))},
        make_inputs=_less_than_inputs,
        oracle=lambda f: {"y": (f64(f, "a") < f64(f, "b")).astype(np.float64)},
        tags=T,
    ),
    case(
        "prim_sum_reduce",
        build=lambda: (lambda x: {"rows": x.sum(1), "cols": x.sum(0)})(rc.input("x", (5, 7))),
        make_inputs=lambda rng, b: {"x": normal(rng, (5, 7))},
        oracle=lambda f: {"rows": f64(f, "x").sum(1), "cols": f64(f, "x").sum(0)},
        tags=T,
    ),
    case(
        "prim_max_reduce",
        build=lambda: (lambda x: {"rows": x.amax(1), "cols": x.amax(0)})(rc.input("x", (5, 7))),
        make_inputs=lambda rng, b: {"x": normal(rng, (5, 7), shift=-3.0)},  # all-negative rows too
        oracle=lambda f: {"rows": f64(f, "x").max(1), "cols": f64(f, "x").max(0)},
        tags=T,
    ),
    case(
        "prim_contiguous",
        build=lambda: (lambda x: {"y": x.T.contiguous() * 2.0, "z": x[:, ::2].contiguous()})(
            rc.input("x", (3, 6))
        ),
        make_inputs=lambda rng, b: {"x": normal(rng, (3, 6))},
        oracle=lambda f: {"y": f64(f, "x").T * 2.0, "z": f64(f, "x")[:, ::2]},
        tags=T,
    ),
    case(
        "prim_gather",
        build=lambda: {"y": rc.nn.embedding(rc.input("ids", (2, 5), "int32"), rc.input("table", (11, 4)))},
        make_inputs=lambda rng, b: {"ids": ids(rng, 11, (2, 5)), "table": normal(rng, (11, 4))},
        oracle=lambda f: {"y": f64(f, "table")[f["ids"].astype(np.int64)]},
        tags=T,
    ),
    case(
        "prim_iota",
        build=lambda: {
            "n": rc.arange(6),
            "stepped": rc.arange(2, 20, 3),
            "down": rc.arange(5, -4, -2),
            "shifted": rc.arange(4) + rc.input("x", (4,)),
        },
        make_inputs=lambda rng, b: {"x": normal(rng, (4,))},
        oracle=lambda f: {
            "n": np.arange(6.0),
            "stepped": np.arange(2.0, 20.0, 3.0),
            "down": np.arange(5.0, -4.0, -2.0),
            "shifted": np.arange(4.0) + f64(f, "x"),
        },
        tags=T,
    ),
    case(
        "prim_constant",
        build=lambda: {
            "y": rc.input("x", (3, 4)) * 2.5 + 1.0,
            "c": rc.constant(3.0),
            "r": 7.0 - rc.input("x", (3, 4)),
        },
        make_inputs=lambda rng, b: {"x": normal(rng, (3, 4))},
        oracle=lambda f: {"y": f64(f, "x") * 2.5 + 1.0, "c": np.float64(3.0), "r": 7.0 - f64(f, "x")},
        tags=T,
    ),
]

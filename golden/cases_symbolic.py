"""Golden cases with symbolic dims ("B", "T", ...): one graph, checked at two or more bindings."""
from __future__ import annotations

import warnings

import numpy as np

import refcomp as rc

from .cases_common import attention, case, conv2d, f64, ids, layer_norm, normal, softmax

T = ("symbolic",)


def _sym(name, shape, bindings, fn, np_fn, tags=()):
    """One input x of a symbolic `shape`; outputs fn(x) against np_fn(x)."""
    return case(name,
                build=lambda: fn(rc.input("x", shape)),
                make_inputs=lambda rng, b: {"x": normal(rng, shape, b)},
                oracle=lambda f: np_fn(f64(f, "x")),
                bindings=bindings, tags=T + tuple(tags))


def _broadcast_build():
    x, bias, col = rc.input("x", ("B", 8)), rc.input("bias", (8,)), rc.input("col", ("B", 1))
    return {"y": x + bias, "z": x * col - bias, "outer": col * bias}


def _concat_build():
    a, b = rc.input("a", ("T", 4)), rc.input("b", ("S", 4))
    return {
        "rows": rc.concat([a, b, a], axis=0),
        "stacked": rc.stack([a, a * 2.0], axis=1),
        "cols": rc.concat([a, a[:, :2]], axis=1),
    }


def _concat_np(f):
    a, b = f64(f, "a", "b")
    return {
        "rows": np.concatenate([a, b, a]),
        "stacked": np.stack([a, a * 2.0], axis=1),
        "cols": np.concatenate([a, a[:, :2]], axis=1),
    }


def _embed_build():
    tokens, table = rc.input("ids", ("B", "T"), "int32"), rc.input("table", (13, 8))
    e = rc.nn.embedding(tokens, table)
    return {"e": e, "pooled": e.mean(1)}


def _embed_np(f):
    e = f64(f, "table")[f["ids"]]
    return {"e": e, "pooled": e.mean(1)}


def _sdpa_build():
    q, k, v = (rc.input(n, ("B", "T", 8)) for n in "qkv")
    return {"causal": rc.nn.scaled_dot_product_attention(q, k, v, causal=True),
            "full": rc.nn.scaled_dot_product_attention(q, k, v)}


def _conv_build():
    x = rc.input("x", ("N", 2, "H", "W"))
    y = rc.nn.conv2d(x, rc.input("w", (3, 2, 3, 3)), rc.input("bias", (3,)), padding=1)
    return {"y": y, "pooled": rc.nn.max_pool2d(y, 2)}


def _conv_np(f):
    y = conv2d(*f64(f, "x", "w", "bias"), padding=1)
    n, c, h, w = y.shape
    pooled = y[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    return {"y": y, "pooled": pooled}


def _matmul_build():
    x = rc.input("x", ("B", "T", 16))
    return {"proj": x @ rc.input("w", (16, 8)), "gram": x @ x.transpose(-2, -1), "xtx": x.transpose(1, 2) @ x}


def _matmul_np(f):
    x, w = f64(f, "x", "w")
    return {
        "proj": np.matmul(x, w),
        "gram": np.matmul(x, np.swapaxes(x, 1, 2)),
        "xtx": np.matmul(np.swapaxes(x, 1, 2), x),
    }


def _cumsum_np(x):
    out = np.zeros_like(x)
    for t in range(x.shape[1]):
        out[:, t] = x[:, :t + 1].sum(1)
    return out


BT = ({"B": 2, "T": 5}, {"B": 3, "T": 12})

def _empty_reductions_np(x):
    """NumPy over a possibly empty axis: sum 0, max -inf, min inf, mean and var NaN."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "Mean of empty slice": NaN is the point
        return {
            "sum": x.sum(1),
            "max": np.max(x, 1, initial=-np.inf),
            "min": np.min(x, 1, initial=np.inf),
            "mean": x.mean(1),
            "var": x.var(1),
            "var1": x.var(1, ddof=1),
            "mean_all": x.mean(),
            "softmax": softmax(x, -1) if x.size else x,
        }


CASES = [
    case(
        "sym_broadcast_add",
        build=_broadcast_build,
        make_inputs=lambda rng, b: {
            "x": normal(rng, ("B", 8), b),
            "bias": normal(rng, (8,)),
            "col": normal(rng, ("B", 1), b),
        },
        oracle=lambda f: (lambda x, bias, col: {"y": x + bias, "z": x * col - bias, "outer": col * bias})(
            *f64(f, "x", "bias", "col")
        ),
        bindings=({"B": 1}, {"B": 7}),
        tags=T + ("broadcast",),
    ),
    _sym(
        "sym_softmax",
        ("B", "T", 16),
        BT,
        lambda x: {"y": x.softmax(-1), "over_t": x.softmax(1), "log": x.log_softmax()},
        lambda x: {
            "y": softmax(x, -1),
            "over_t": softmax(x, 1),
            "log": x
            - x.max(-1, keepdims=True)
            - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
        },
    ),
    _sym(
        "sym_reductions",
        ("B", "T", 6),
        BT,
        lambda x: {
            "sum_t": x.sum(1),
            "mean_t": x.mean(1),
            "mean_all": x.mean(),
            "var_t": x.var(1, keepdims=True, correction=0),
            "max_bt": x.amax((0, 1)),
            "min_d": x.amin(-1),
            "argmax_t": x.argmax(1),
        },
        lambda x: {
            "sum_t": x.sum(1),
            "mean_t": x.mean(1),
            "mean_all": x.mean(),
            "var_t": np.var(x, axis=1, keepdims=True),
            "max_bt": x.max((0, 1)),
            "min_d": x.min(-1),
            "argmax_t": np.argmax(x, 1).astype(np.float64),
        },
    ),
    case(
        "sym_matmul",
        build=_matmul_build,
        make_inputs=lambda rng, b: {
            "x": normal(rng, ("B", "T", 16), b),
            "w": normal(rng, (16, 8), scale=0.5),
        },
        oracle=_matmul_np,
        bindings=BT,
        tags=T,
    ),
    _sym(
        "sym_slicing",
        ("T", 6),
        ({"T": 4}, {"T": 9}),
        lambda x: {
            "tail": x[1:],
            "rev": x[::-1],
            "even": x[::2],
            "head": x[:3, 1:5],
            "last": x[-1],
            "drop_last": x[:-1],
        },
        lambda x: {
            "tail": x[1:],
            "rev": x[::-1],
            "even": x[::2],
            "head": x[:3, 1:5],
            "last": x[-1],
            "drop_last": x[:-1],
        },
        tags=("view",),
    ),
    _sym(
        "sym_reshape_permute",
        ("B", "T", 4),
        BT,
        lambda x: {
            "flat": x.reshape("B", -1),
            "heads": x.reshape("B", "T", 2, 2).permute(0, 2, 1, 3),
            "merged": x.permute(1, 0, 2).reshape(-1, 4),
            "pad": x.pad([(0, 0), (1, 2), (0, 0)], value=0.5),
        },
        lambda x: {
            "flat": x.reshape(x.shape[0], -1),
            "heads": x.reshape(*x.shape[:2], 2, 2).transpose(0, 2, 1, 3),
            "merged": x.transpose(1, 0, 2).reshape(-1, 4),
            "pad": np.pad(x, [(0, 0), (1, 2), (0, 0)], constant_values=0.5),
        },
        tags=("view",),
    ),
    case(
        "sym_concat",
        build=_concat_build,
        make_inputs=lambda rng, b: {"a": normal(rng, ("T", 4), b), "b": normal(rng, ("S", 4), b)},
        oracle=_concat_np,
        bindings=({"T": 2, "S": 3}, {"T": 5, "S": 1}),
        tags=T + ("view",),
    ),
    case(
        "sym_arange",
        build=lambda: {"y": rc.arange("T") * rc.input("x", ("T",)), "ramp": rc.arange("T") + 0.5},
        make_inputs=lambda rng, b: {"x": normal(rng, ("T",), b)},
        oracle=lambda f: {"y": np.arange(len(f["x"])) * f64(f, "x"), "ramp": np.arange(len(f["x"])) + 0.5},
        bindings=({"T": 3}, {"T": 10}),
        tags=T,
    ),
    _sym("sym_cumsum", ("B", "T"), BT, lambda x: {"y": x.cumsum(1)}, lambda x: {"y": _cumsum_np(x)}),
    case(
        "sym_embedding",
        build=_embed_build,
        make_inputs=lambda rng, b: {"ids": ids(rng, 13, ("B", "T"), b), "table": normal(rng, (13, 8))},
        oracle=_embed_np,
        bindings=BT,
        tags=T + ("nn",),
    ),
    case(
        "sym_layer_norm_linear",
        build=lambda: {
            "y": rc.nn.linear(
                rc.nn.layer_norm(rc.input("x", ("B", "T", 16)), rc.input("g", (16,)), rc.input("b", (16,))),
                rc.input("w", (8, 16)),
                rc.input("bias", (8,)),
            )
        },
        make_inputs=lambda rng, b: {
            "x": normal(rng, ("B", "T", 16), b),
            "g": normal(rng, (16,)),
            "b": normal(rng, (16,)),
            "w": normal(rng, (8, 16), scale=0.3),
            "bias": normal(rng, (8,)),
        },
        oracle=lambda f: {"y": np.matmul(layer_norm(*f64(f, "x", "g", "b")), f64(f, "w").T) + f64(f, "bias")},
        bindings=BT,
        tags=T + ("nn",),
    ),
    case(
        "sym_sdpa",
        build=_sdpa_build,
        make_inputs=lambda rng, b: {n: normal(rng, ("B", "T", 8), b) for n in "qkv"},
        oracle=lambda f: {
            "causal": attention(*f64(f, "q", "k", "v"), causal=True),
            "full": attention(*f64(f, "q", "k", "v")),
        },
        bindings=BT,
        tags=T + ("nn",),
    ),
    case(
        "sym_conv_pool",
        build=_conv_build,
        make_inputs=lambda rng, b: {
            "x": normal(rng, ("N", 2, "H", "W"), b),
            "w": normal(rng, (3, 2, 3, 3), scale=0.5),
            "bias": normal(rng, (3,)),
        },
        oracle=_conv_np,
        bindings=({"N": 1, "H": 4, "W": 6}, {"N": 2, "H": 6, "W": 5}),
        tags=T + ("nn",),
    ),
    _sym(
        "sym_empty_reductions",
        ("B", "T"),
        ({"B": 3, "T": 0}, {"B": 2, "T": 1}, {"B": 1, "T": 5}),
        lambda x: {
            "sum": x.sum(1),
            "max": x.amax(1),
            "min": x.amin(1),
            "mean": x.mean(1),
            "var": x.var(1, correction=0),
            "var1": x.var(1, correction=1),
            "mean_all": x.mean(),
            "softmax": x.softmax(-1),
        },
        _empty_reductions_np,
    ),
    _sym(
        "sym_masked_view_chain",
        ("T", 4),
        ({"T": 8}, {"T": 5}),
        lambda x: {
            "pad_flat": x.pad([(1, 0), (0, 1)]).reshape(-1),
            "odd_step": x[1::3].reshape(-1),
            "flip_tail": x.flip(0)[1:].T,
            "chain": x[:, ::2].pad([(0, 1), (1, 0)], value=-1.0).permute(1, 0)[::-1].reshape(-1),
        },
        lambda x: {
            "pad_flat": np.pad(x, [(1, 0), (0, 1)]).reshape(-1),
            "odd_step": x[1::3].reshape(-1),
            "flip_tail": x[::-1][1:].T,
            "chain": np.pad(x[:, ::2], [(0, 1), (1, 0)], constant_values=-1.0).T[::-1].reshape(-1),
        },
        tags=("view",),
    ),
]

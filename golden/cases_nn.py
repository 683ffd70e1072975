"""Golden cases for rc.nn: linear, norms, convolution, pooling, embedding and attention."""
from __future__ import annotations

import numpy as np

import refcomp as rc

from .cases_common import (attention, avg_pool2d, case, conv2d, f64, ids, layer_norm, max_pool2d, normal,
                           rms_norm)

T = ("nn",)


def _inputs(shapes):
    """make_inputs for float inputs of fixed shapes, scaled so activations stay O(1)."""
    return lambda rng, b: {
        k: normal(rng, s, scale=0.5 if k.startswith("w") else 1.0) for k, s in shapes.items()
    }


def _conv(name, x_shape, w_shape, bias=True, **kw):
    shapes = {"x": x_shape, "w": w_shape} | ({"bias": (w_shape[0],)} if bias else {})

    def build():
        b = rc.input("bias", (w_shape[0],)) if bias else None
        return {"y": rc.nn.conv2d(rc.input("x", x_shape), rc.input("w", w_shape), b, **kw)}

    return case(
        name,
        build=build,
        make_inputs=_inputs(shapes),
        oracle=lambda f: {"y": conv2d(*f64(f, "x", "w"), f64(f, "bias") if bias else None, **kw)},
        tags=T,
    )


def _pool(name, fn, np_fn, x_shape, **kw):
    return case(name, build=lambda: {"y": fn(rc.input("x", x_shape), **kw)},
                make_inputs=lambda rng, b: {"x": normal(rng, x_shape, scale=2.0, shift=-1.0)},
                oracle=lambda f: {"y": np_fn(f64(f, "x"), **kw)}, tags=T)


def _mask_inputs(rng, b):
    blocked = rng.random((5, 6)) < 0.4
    blocked[:, 0] = False  # every query attends to at least one key
    return {"q": normal(rng, (2, 5, 8)), "k": normal(rng, (2, 6, 8)), "v": normal(rng, (2, 6, 4)),
            "mask": np.where(blocked, np.float32(-1e9), np.float32(0.0))}


CASES = [
    case(
        "nn_linear",
        build=lambda: {
            "y": rc.nn.linear(rc.input("x", (4, 6)), rc.input("w", (3, 6)), rc.input("bias", (3,))),
            "no_bias_3d": rc.nn.linear(rc.input("x3", (2, 4, 6)), rc.input("w", (3, 6))),
        },
        make_inputs=_inputs({"x": (4, 6), "x3": (2, 4, 6), "w": (3, 6), "bias": (3,)}),
        oracle=lambda f: {
            "y": np.matmul(f64(f, "x"), f64(f, "w").T) + f64(f, "bias"),
            "no_bias_3d": np.einsum("bti,oi->bto", f64(f, "x3"), f64(f, "w")),
        },
        tags=T,
    ),
    case(
        "nn_layer_norm",
        build=lambda: (
            lambda x: {
                "y": rc.nn.layer_norm(x, rc.input("w", (10,)), rc.input("b", (10,))),
                "plain": rc.nn.layer_norm(x, None, None, eps=1e-3),
            }
        )(rc.input("x", (3, 4, 10))),
        make_inputs=lambda rng, b: {
            "x": normal(rng, (3, 4, 10), scale=2.0, shift=0.5),
            "w": normal(rng, (10,)),
            "b": normal(rng, (10,)),
        },
        oracle=lambda f: {
            "y": layer_norm(*f64(f, "x", "w", "b")),
            "plain": layer_norm(f64(f, "x"), 1.0, 0.0, eps=1e-3),
        },
        tags=T,
    ),
    case(
        "nn_rms_norm",
        build=lambda: (
            lambda x: {"y": rc.nn.rms_norm(x, rc.input("w", (12,))), "eps": rc.nn.rms_norm(x, None, eps=0.1)}
        )(rc.input("x", (5, 12))),
        make_inputs=lambda rng, b: {"x": normal(rng, (5, 12), scale=1.5), "w": normal(rng, (12,))},
        oracle=lambda f: {"y": rms_norm(*f64(f, "x", "w")), "eps": rms_norm(f64(f, "x"), 1.0, eps=0.1)},
        tags=T,
    ),
    _conv("nn_conv2d_basic", (2, 3, 6, 6), (4, 3, 3, 3), padding=1),
    _conv("nn_conv2d_stride", (1, 2, 7, 8), (3, 2, 3, 2), stride=2, padding=(1, 0)),
    _conv("nn_conv2d_dilation", (1, 2, 9, 9), (2, 2, 3, 3), bias=False, dilation=2, padding=2),
    _conv("nn_conv2d_groups", (2, 4, 5, 5), (6, 2, 3, 3), groups=2, padding=1),
    _conv(
        "nn_conv2d_depthwise_rect",
        (1, 3, 6, 7),
        (3, 1, 2, 3),
        groups=3,
        stride=(2, 1),
        padding=(1, 1),
        dilation=(1, 2),
    ),
    _conv("nn_conv2d_1x1", (2, 5, 3, 4), (2, 5, 1, 1)),
    # more than SHORT_REDUCE channels per group: one contraction over (channel, kh, kw), an implicit GEMM
    _conv("nn_conv2d_channels", (2, 6, 7, 6), (5, 6, 3, 3), padding=1),
    _conv("nn_conv2d_groups_channels", (1, 10, 6, 5), (4, 5, 3, 2), groups=2, stride=2, padding=(1, 0)),
    _pool("nn_max_pool2d", rc.nn.max_pool2d, max_pool2d, (2, 3, 6, 6), kernel_size=2),
    _pool(
        "nn_max_pool2d_padding",
        rc.nn.max_pool2d,
        max_pool2d,
        (1, 2, 7, 7),
        kernel_size=3,
        stride=2,
        padding=1,
    ),
    _pool("nn_avg_pool2d", rc.nn.avg_pool2d, avg_pool2d, (2, 2, 6, 8), kernel_size=(2, 4)),
    _pool(
        "nn_avg_pool2d_padding",
        rc.nn.avg_pool2d,
        avg_pool2d,
        (1, 2, 5, 5),
        kernel_size=3,
        stride=2,
        padding=1,
    ),
    case(
        "nn_embedding",
        build=lambda: {
            "y": rc.nn.embedding(rc.input("ids", (3, 4), "int32"), rc.input("table", (9, 6))) * 2.0,
            "flat": rc.nn.embedding(rc.input("ids1", (7,), "int32"), rc.input("table", (9, 6))),
        },
        make_inputs=lambda rng, b: {
            "ids": ids(rng, 9, (3, 4)),
            "ids1": np.array([0, 8, 8, 3, 0, 5, 1], dtype=np.int32),
            "table": normal(rng, (9, 6)),
        },
        oracle=lambda f: {
            "y": 2.0 * f64(f, "table")[f["ids"]],
            "flat": np.stack([f64(f, "table")[i] for i in f["ids1"]]),
        },
        tags=T,
    ),
    case(
        "nn_sdpa",
        build=lambda: {
            "y": rc.nn.scaled_dot_product_attention(
                rc.input("q", (2, 5, 8)), rc.input("k", (2, 6, 8)), rc.input("v", (2, 6, 4))
            )
        },
        make_inputs=_inputs({"q": (2, 5, 8), "k": (2, 6, 8), "v": (2, 6, 4)}),
        oracle=lambda f: {"y": attention(*f64(f, "q", "k", "v"))},
        tags=T,
    ),
    case(
        "nn_sdpa_causal",
        build=lambda: (
            lambda q, k, v: {
                "y": rc.nn.scaled_dot_product_attention(q, k, v, causal=True),
                "rect": rc.nn.scaled_dot_product_attention(q[:, :, :4], k, v, causal=True),
            }
        )(rc.input("q", (2, 2, 6, 8)), rc.input("k", (2, 2, 6, 8)), rc.input("v", (2, 2, 6, 8))),
        make_inputs=lambda rng, b: {n: normal(rng, (2, 2, 6, 8), scale=1.5) for n in "qkv"},
        oracle=lambda f: {
            "y": attention(*f64(f, "q", "k", "v"), causal=True),
            "rect": attention(f64(f, "q")[:, :, :4], *f64(f, "k", "v"), causal=True),
        },
        tags=T,
    ),
    case(
        "nn_sdpa_mask",
        build=lambda: {
            "y": rc.nn.scaled_dot_product_attention(
                rc.input("q", (2, 5, 8)),
                rc.input("k", (2, 6, 8)),
                rc.input("v", (2, 6, 4)),
                mask=rc.input("mask", (5, 6)),
            )
        },
        make_inputs=_mask_inputs,
        oracle=lambda f: {"y": attention(*f64(f, "q", "k", "v"), mask=f64(f, "mask"))},
        tags=T,
    ),
]

"""ONNX RNN, GRU and LSTM, unrolled over a static sequence length into matmuls and elementwise gates.

refcomp has no loops: each time step is its own few nodes, so the sequence length must be known at
import time (a symbolic one is an error that says so). The gate equations are ONNX's (operator
docs, default activations Sigmoid/Tanh): gate order z, r, h for GRU and i, o, f, c for LSTM, biases
W then R, peepholes i, o, f, `clip` bounding every pre-activation, `linear_before_reset` for GRU,
directions forward, reverse and bidirectional, and layout 0 (sequence first) or 1 (batch first).
"""
from __future__ import annotations

from ..ops.joining import stack
from ..ops.tensor import Tensor, constant
from .onnx_ops_core import float_value, op

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
ATTRS = ("activations", "activation_alpha", "activation_beta", "clip", "direction", "hidden_size", "layout",
         "linear_before_reset", "input_forget")


def _gate_input(ctx, i: int):
    return ctx.tensor(i) if ctx.has(i) else None


def _check(ctx, seq) -> None:
    if not isinstance(seq, int):
        raise ctx.error(
            f"the sequence length is {seq}: refcomp unrolls {ctx.op_type} over time, so it must be known "
            f"at import (fix the dim with import_model(..., dims=...))"
        )
    default = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[ctx.op_type]
    given = [a.decode() if isinstance(a, bytes) else a for a in (ctx.attr("activations") or [])]
    if given and given not in (default, default * 2):
        raise ctx.attr_error("activations", given, f"only the defaults {default} are supported")
    if ctx.attr("activation_alpha") or ctx.attr("activation_beta"):
        raise ctx.error("activation_alpha / activation_beta are not supported (only the default activations)")
    if ctx.int_attr("input_forget", 0):
        raise ctx.attr_error("input_forget", 1, "coupled input and forget gates are not supported")
    if ctx.has(4):
        lengths = ctx.static(4, "sequence_lens (input 4)")
        if lengths.size and (lengths != seq).any():
            raise ctx.error(
                f"sequence_lens {lengths.tolist()} differ from the sequence length {seq}: refcomp "
                f"unrolls every sequence to its full length"
            )


def _step(
    kind: str, x_t: Tensor, h: Tensor, c, w: Tensor, r: Tensor, b, p, hidden: int, clip, before_reset: bool
):
    """One time step of one direction: (new h, new c). w (gates*hidden, input), r (gates*hidden, hidden)."""
    def part(m, k):
        return m[k * hidden:(k + 1) * hidden]

    def bounded(t):
        return t.clip(-clip, clip) if clip is not None else t

    def pre(k, h_in=None):  # x W_k^T + h R_k^T + Wb_k + Rb_k
        out = x_t @ part(w, k).T + (h if h_in is None else h_in) @ part(r, k).T
        return out if b is None else out + part(b, k) + part(b, k + GATES[kind])  # W's bias, then R's

    if kind == "RNN":
        return bounded(pre(0)).tanh(), None
    if kind == "GRU":
        z, reset = bounded(pre(0)).sigmoid(), bounded(pre(1)).sigmoid()
        if before_reset:
            recurrent = h @ part(r, 2).T + (part(b, 5) if b is not None else 0.0)
            candidate = x_t @ part(w, 2).T + reset * recurrent + (part(b, 2) if b is not None else 0.0)
        else:
            candidate = pre(2, reset * h)
        candidate = bounded(candidate).tanh()
        return (1.0 - z) * candidate + z * h, None
    i_pre, o_pre, f_pre, c_pre = (pre(k) for k in range(4))
    if p is not None:
        i_pre, f_pre = i_pre + part(p, 0) * c, f_pre + part(p, 2) * c
    i, f, candidate = bounded(i_pre).sigmoid(), bounded(f_pre).sigmoid(), bounded(c_pre).tanh()
    c = f * c + i * candidate
    o = bounded(o_pre + part(p, 1) * c if p is not None else o_pre).sigmoid()
    return o * c.tanh(), c


@op("RNN", "GRU", "LSTM", attrs=ATTRS)
def recurrent(ctx):
    kind = ctx.op_type
    x = ctx.tensor(0)
    layout = ctx.int_attr("layout", 0)
    if layout:
        x = x.permute(1, 0, 2)  # (batch, seq, input) -> (seq, batch, input)
    seq, batch = x.shape[0], x.shape[1]
    _check(ctx, seq)
    w, r = ctx.tensor(1), ctx.tensor(2)
    hidden = ctx.int_attr("hidden_size", None) or r.shape[-1]
    direction = ctx.attr("direction", "forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = {"forward": ["forward"], "reverse": ["reverse"], "bidirectional": ["forward", "reverse"]}.get(
        direction
    )
    if dirs is None:
        raise ctx.attr_error("direction", direction, "use forward, reverse or bidirectional")
    b, h0 = _gate_input(ctx, 3), _gate_input(ctx, 5)
    c0 = _gate_input(ctx, 6) if kind == "LSTM" else None
    p = _gate_input(ctx, 7) if kind == "LSTM" else None
    clip = ctx.float_attr("clip", None)
    before_reset = bool(ctx.int_attr("linear_before_reset", 0))
    zeros = constant(0.0).reshape((1, 1)).broadcast_to((batch, hidden))
    ys, last_h, last_c = [], [], []
    for d, name in enumerate(dirs):
        h = h0[d] if h0 is not None else zeros
        c = (c0[d] if c0 is not None else zeros) if kind == "LSTM" else None
        steps = range(seq) if name == "forward" else range(seq - 1, -1, -1)
        outputs = {}
        for t in steps:
            h, c = _step(
                kind,
                x[t],
                h,
                c,
                w[d],
                r[d],
                b[d] if b is not None else None,
                p[d] if p is not None else None,
                hidden,
                clip,
                before_reset,
            )
            outputs[t] = h
        ys.append(stack([outputs[t] for t in range(seq)], axis=0))  # (seq, batch, hidden)
        last_h.append(h)
        last_c.append(c)
    y = stack(ys, axis=1)  # (seq, dirs, batch, hidden)
    y_h = stack(last_h, axis=0)  # (dirs, batch, hidden)
    results = [y.permute(2, 0, 1, 3) if layout else y, y_h.permute(1, 0, 2) if layout else y_h]
    if kind == "LSTM":
        y_c = stack(last_c, axis=0)
        results.append(y_c.permute(1, 0, 2) if layout else y_c)
    return [float_value(t) for t in results]

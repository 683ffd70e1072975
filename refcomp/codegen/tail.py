"""A reduction kernel that finishes the short reduction of its own outputs' rows (search.tail).

A block per output (reduce_block.cu.j2) computes P; F reduces P's last axis, S values a row, and an
elementwise epilogue may follow (argmax's negation back to an index). Each block's storing thread
makes its output visible (a fence), then takes its row's ticket; the block drawing the row's last
ticket sets it to zero for the next launch and reduces the row's S outputs in order, by one thread,
then stores the epilogue's value (reduce_tail.cu.j2). F is exact (a maximum), so which block comes
last changes nothing. The memory model counts the last block's loads and store per row (scopes
"tail_loop" and "tail", codegen.access); the tickets are atomics, neither loads nor stores.
"""
from __future__ import annotations

from typing import Sequence

from ..ops.primitives import REDUCE, Node
from ..ops.dtypes import DTYPES
from ..symbolic.dims import prod
from . import render_c
from .emit import KernelBody, Unfusable, linear_of


def tail_fields(body: KernelBody, source: Node, tail: Sequence[Node], output: str) -> dict:
    """The template's fields for `tail` (F, then its epilogue's nodes, the last stored as `output`)
    over the rows of `source`, this kernel's out0."""
    final, stored = tail[0], tail[-1]
    per_row = source.shape[-1]
    if (final.op.kind != REDUCE or final.attrs["axis"] != len(source.shape) - 1
            or final.srcs[0].node is not source or not final.srcs[0].views.is_identity
            or not isinstance(per_row, int) or not DTYPES[final.dtype].is_float):
        raise Unfusable(f"{final.op.name}#{final.id} is no short reduction of this kernel's rows")
    if any(n.op.kind == REDUCE for n in tail[1:]) or len(stored.shape) != len(final.shape) or any(
            a != b for a, b in zip(stored.shape, final.shape)):
        raise Unfusable(
            f"{stored.op.name}#{stored.id} is no elementwise epilogue of {final.op.name}#{final.id}")
    rows = prod(final.shape)
    row, s = body.index_var("trow", rows), body.index_var("ts", per_row)
    saved = body.statements, body.scope, body.flat_axes
    body.flat_axes = None
    body.statements, body.scope = [], "tail_loop"
    body.access("out0", row * per_row + s)
    kind = DTYPES[final.dtype].kind
    loaded = render_c.load(source.dtype, f"out0[trow * {per_row}LL + ts]")
    combine = render_c.op_expr(final.op, "tail", loaded, kind=kind)
    body.scope = "tail"
    at = body.unravel(row, final.shape)
    result = "tail"
    if stored is not final:
        body.scalars[final.id] = ("tail", linear_of(at, final.shape))
        result = render_c.node_expr(stored, *[body.value_at(e, at) for e in stored.srcs])
    body.access(output, row, store=True)
    statements = body.statements
    body.statements, body.scope, body.flat_axes = saved
    label = body.names.label
    return dict(what=f"{label(final)} of {label(source)}'s rows" + (
                    f", then {label(stored)}" if stored is not final else ""),
                per_row=per_row, identity=render_c.reduce_identity(final.op, kind), combine=combine,
                statements=statements, result=result, output=output,
                store=render_c.store(stored.dtype, result))

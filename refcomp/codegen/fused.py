"""Kernels the search builds by fusion: the row kernel, and what makes a node a matmul.

Row kernel: one block per row computes a sequence of block-wide reductions over the row (softmax's
max then sum, layer norm's mean then variance), keeping each result in a register that later
phases read as a scalar, and then writes the row's elementwise outputs. A reduction is fused only
if every read of it is "this row's value" — `KernelBody._scalar` checks that and raises Unfusable.

Matmul: SumReduce(Mul(a, b)) over a contracted axis k, where a does not vary along the N axes and
b does not vary along the M axes (`matmul_axes`). Axes both operands vary along are batch axes. The
tiled templates that compute one are in `tiled.py` (plain) and `online.py` (online softmax).
"""
from __future__ import annotations

import weakref
from typing import Callable, Optional, Sequence

import sympy

from ..ops.primitives import REDUCE, Node
from ..symbolic.dims import Dim, dims_equal, expand, prod
from ..symbolic.index import index_of
from ..symbolic.view import contiguous_strides
from . import render_c
from .emit import KernelBody, ProgramNames, Unfusable
from .kernels import BLOCK, Kernel, Launch, finish_kernel
from .sums import loop_fields


def linear_index(idx: Sequence[sympy.Expr], shape: Sequence[Dim]) -> sympy.Expr:
    return expand(sum((i * s for i, s in zip(idx, contiguous_strides(shape))), sympy.Integer(0)))


def row_kernel(name: str, output: Node, row_reduces: Sequence[Node], names, inline: Callable[[Node], bool],
               block: int = BLOCK, render: bool = True) -> Kernel:
    phases = list(row_reduces) + ([output] if output.op.kind == REDUCE else [])
    axis = phases[0].attrs["axis"]
    shape = phases[0].srcs[0].shape
    if output.op.kind != REDUCE and not same_edge(output.shape, shape):
        raise Unfusable(f"row output {output.op.name}#{output.id} does not have the rows' shape")
    for r in phases:
        if r.attrs["axis"] != axis or not same_edge(r.srcs[0].shape, shape):
            raise Unfusable(
                f"{r.op.name}#{r.id} reduces a different row than {phases[0].op.name}#{phases[0].id}"
            )
    rows_shape, extent = shape[:axis] + shape[axis + 1:], shape[axis]
    body = KernelBody(names, inline=inline)
    o = body.axis_indices("row", rows_shape)
    body.flat_axes = None
    r = body.index_var("r", extent)
    idx = o[:axis] + [r] + o[axis:]
    rendered = []
    body.scope = "loop"  # every phase and the epilogue: threads stride over the row
    for j, red in enumerate(phases):
        body.statements = []
        value = body.value_at(red.srcs[0], idx)
        rendered.append(loop_fields(names, red, body.statements, value, ("mine", "other"), block))
        body.scalars[red.id] = (f"red{j}", linear_index(o, rows_shape))
    epilogue = None
    if output.op.kind != REDUCE:
        body.statements = []
        result = render_c.node_expr(output, *[body.value_at(src, idx) for src in output.srcs])
        epilogue = dict(
            statements=body.statements, result=result, out_index=body.printer.int(linear_index(idx, shape))
        )
        body.access("out0", linear_index(idx, shape), store=True)
    else:
        body.scope = "single"  # thread 0 stores the row's value
        body.access("out0", body.index_var("row"), store=True)
    body.statements = []
    nodes = tuple(phases) + (() if output.op.kind == REDUCE else (output,))
    return finish_kernel(
        name,
        "row",
        "row.cu.j2",
        body,
        output,
        nodes,
        Launch("block_per_output", prod(rows_shape), block),
        True,
        render=render,
        loop_extent=extent,
        block_reductions=len(phases),
        comment_extra=f", one block per row of {len(phases)} reduction(s)",
        block=block,
        phases=rendered,
        epilogue=epilogue,
        extent=lambda b: b.printer.int(extent),
    )


def same_edge(a, b) -> bool:
    return len(a) == len(b) and all(dims_equal(x, y) for x, y in zip(a, b))


_AXES: "weakref.WeakKeyDictionary[Node, object]" = weakref.WeakKeyDictionary()


def matmul_axes(reduce: Node) -> tuple[list[int], list[int], list[int]] | None:
    """(batch, m, n) axes of a SumReduce(Mul(a, b)) source, or None when it is not a matmul. Memoised
    per node (a node never changes): the fusion rules and every matmul candidate of the search ask."""
    if reduce.op.name != "SumReduce" or reduce.srcs[0].node.op.name != "Mul":
        return None
    if reduce not in _AXES:
        _AXES[reduce] = _matmul_axes(reduce)
    axes = _AXES[reduce]
    return None if axes is None else tuple(list(group) for group in axes)


def _matmul_axes(reduce: Node) -> Optional[tuple[tuple[int, ...], ...]]:
    src, k = reduce.srcs[0], reduce.attrs["axis"]
    product = src.node
    syms = [sympy.Symbol(f"_mm{a}", integer=True, nonnegative=True) for a in range(len(src.shape))]
    ranges = dict(zip(syms, src.shape))
    flat, valid = index_of(src.views, syms, ranges)
    if valid is not sympy.true:
        return None
    body = KernelBody(ProgramNames({}, {}), ranges=dict(ranges), bind_compound=False)
    pidx = body.unravel(flat, product.shape)
    deps = []
    for operand in product.srcs:
        f, v = index_of(operand.views, pidx, ranges)
        deps.append((sympy.sympify(f).free_symbols | getattr(v, "free_symbols", set())) & set(syms))
    a_dep, b_dep = deps
    if syms[k] not in a_dep or syms[k] not in b_dep:
        return None
    m = [x for x in range(len(syms)) if x != k and syms[x] in a_dep and syms[x] not in b_dep]
    n = [x for x in range(len(syms)) if x != k and syms[x] in b_dep and syms[x] not in a_dep]
    batch = [x for x in range(len(syms)) if x != k and x not in m and x not in n]
    if not m and not n:
        return None
    return tuple(batch), tuple(m), tuple(n)

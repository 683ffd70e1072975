"""Kernels for the indexed primitives, each one grid-stride loop: a Gather reads table rows at
integer ids, and a Scatter writes source rows into the table's own buffer at integer ids. Ids are
data, so the memory model places the rows they touch by a fixed rule (see each builder). Built on
kernels.py's finish_kernel, as the other kernel builders are."""
from __future__ import annotations

from typing import Optional

import sympy

from ..ops.primitives import GATHER, SCATTER, Node
from ..symbolic.dims import dims_equal, imod, prod
from ..symbolic.index import conjunction, index_of, less
from . import render_c
from .emit import KernelBody, Unfusable, index_symbol
from .kernels import Kernel, Launch, finish_kernel, linear_of


def gather_kernel(name: str, node: Node, names) -> Kernel:
    assert node.op.kind == GATHER, node
    table, ids = node.srcs
    body = KernelBody(names)
    idx = body.axis_indices("i", node.shape)
    flat = body.flat_axes[1]
    body.flat_axes = None
    id_name = body.int_at(ids, idx[:-1])
    row = body.index_var(id_name)
    # ids are data: the memory model takes output row q to read table row 2q mod rows (rows apart, as
    # random ids are, and inside the table, as the ids Program.run accepts are: a row past the end
    # could put the read at a negative position, which the model would take for no read at all)
    body.definitions[row] = imod(2 * linear_of(idx[:-1], node.shape[:-1]), table.shape[0])
    row_value = body.load_expr(table, [row, idx[-1]])
    body.access("out0", flat, store=True)
    size = prod(node.shape)
    return finish_kernel(
        name,
        "gather",
        "gather.cu.j2",
        body,
        node,
        (node,),
        Launch("grid_stride", size),
        False,
        id=id_name,
        row_value=row_value,
        ctype=render_c.compute_type(node.dtype),
        zero=render_c.zero(node.dtype),
        rows=lambda b: b.printer.int(table.shape[0]),
        size=lambda b: b.printer.int(size),
    )


def scatter_kernel(name: str, node: Node, names) -> Kernel:
    """A Scatter in place: out0 is the table's own buffer (the runner binds it so, exec.program), and
    each thread of a grid-stride loop over the K x D source rows writes one element at its row's id.
    Only the K rows move; the table is neither read nor copied."""
    assert node.op.kind == SCATTER, node
    table, ids, rows = node.srcs
    body = KernelBody(names)
    idx = body.axis_indices("i", rows.shape)
    body.flat_axes = None
    id_name = body.int_at(ids, idx[:1])
    row = body.index_var(id_name)
    # ids are data: the memory model takes source row k to land in table row 2k mod rows (rows apart,
    # as the distinct ids Program.run accepts are), as it models a gather's reads
    body.definitions[row] = imod(2 * idx[0], table.shape[0])
    value = body.value_at(rows, idx)
    body.access("out0", row * table.shape[1] + idx[1], store=True)
    size = prod(rows.shape)
    return finish_kernel(
        name,
        "scatter",
        "scatter.cu.j2",
        body,
        node,
        (node,),
        Launch("grid_stride", size),
        False,
        id=id_name,
        value=value,
        rows=lambda b: b.printer.int(table.shape[0]),
        width=lambda b: b.printer.int(table.shape[1]),
        column=lambda b: b.printer.int(idx[1]),
        size=lambda b: b.printer.int(size),
    )


def carried_columns(scatter: Node, output: Node) -> Optional[tuple[int, int]]:
    """(p, c0) where the Scatter's rows are columns c0 .. c0 + D of `output` read as a (K, N) matrix,
    its first p axes flattened into K rows and the rest into N columns: source row k, element e is
    output element k * N + c0 + e, in `output`'s dtype. A decode step's keys and values are such
    columns of the q/k/v projection (or, for LLaMA, the whole of the kernel that rotates and stacks
    them), so the kernel that computes them can write them into the pool as it stores them
    (`carry_rows`). None otherwise: the rows need the Scatter's own kernel."""
    table, _, rows = scatter.srcs
    if scatter.op.kind != SCATTER or rows.node is not output or scatter.dtype != output.dtype:
        return None
    width, shape = table.shape[1], output.shape
    split = next((p for p in range(1, len(shape)) if dims_equal(prod(shape[:p]), rows.shape[0])), None)
    if len(rows.shape) != 2 or split is None or not isinstance(width, int):
        return None
    n = prod(shape[split:])
    if not isinstance(n, int):
        return None
    k, e = index_symbol("k"), index_symbol("e")
    flat, valid = index_of(rows.views, (k, e), {k: rows.shape[0], e: width})
    c0 = flat.subs({k: 0, e: 0}) if isinstance(flat, sympy.Basic) else sympy.Integer(flat)
    if valid is not sympy.true or not c0.is_Integer or not 0 <= int(c0) <= n - width:
        return None
    return (split, int(c0)) if sympy.expand(flat - (k * n + c0 + e)) == 0 else None


def carry_rows(
    body: KernelBody, scatter: Node, buffer: str, output: Node, out_idx: list, result: str
) -> None:
    """The statement, appended to `body`'s (a matmul's epilogue or an elementwise kernel's, at output
    index `out_idx` whose value is `result`), that also writes the value into the Scatter's table
    where its rows hold it: output row k's columns c0 .. c0 + D at row id k of the table (`buffer`,
    its own buffer, as the Scatter kernel writes it). The id is read only for those columns, and
    guarded as the Scatter kernel's is (Program.bind has refused ids outside the table or repeated
    before any launch)."""
    table, ids, _ = scatter.srcs
    found = carried_columns(scatter, output)
    if found is None:
        raise Unfusable(
            f"{scatter.op.name}#{scatter.id}'s rows are not columns of {output.op.name}#{output.id}"
        )
    split, c0 = found
    width, rows = table.shape[1], table.shape[0]
    k = linear_of(out_idx[:split], output.shape[:split])
    col = linear_of(out_idx[split:], output.shape[split:])

    def write() -> None:
        id_name = body.int_at(ids, [k])
        row = body.index_var(id_name)
        body.definitions[row] = imod(2 * k, rows)  # rows apart, as scatter_kernel models them
        body.access(buffer, row * width + col - c0, store=True)
        at = f"{id_name} * {width}LL + {body.printer.int(col - c0)}"
        body.statements.append(f"if ({id_name} >= 0 && {id_name} < {body.printer.int(rows)}) "
                               f"{buffer}[{at}] = {render_c.store(scatter.dtype, result)};")

    body.when(conjunction(sympy.Ge(col, c0), less(col, c0 + width)), write)

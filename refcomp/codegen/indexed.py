"""Kernels for the indexed primitives, each one grid-stride loop: a Gather reads table rows at
integer ids, and a Scatter writes source rows into the table's own buffer at integer ids. Ids are
data, so the memory model places the rows they touch by a fixed rule (see each builder). Built on
kernels.py's finish_kernel, as the other kernel builders are."""
from __future__ import annotations

from ..ops.primitives import GATHER, SCATTER, Node
from ..symbolic.dims import imod, prod
from . import render_c
from .emit import KernelBody
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

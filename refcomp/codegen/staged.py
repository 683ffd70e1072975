"""Loads of a tiled matmul's operand A that vary along one tile axis only, made once.

A's tile loads run for every (row, k) of the tile at every K step, and a fused producer of A is
recomputed there (a layer norm read by the matmul after it). An input such a producer reads at an
index of k alone (the norm's weight and bias, w[k] and b[k]) is the same for every row of the
tile: row 0 of each slice stages it in shared memory once per K step (`Kcols0`...), behind one
more barrier, and every thread reads it there. An input read at an index of the row alone (a
carried layer norm's sum and squared deviations, S[row] and V[row]) is the same at every k: each
thread loads it into a register before the K loop (`arows0`...), and computes there any fused value
A's loads read at such an index (the norm's mean and reciprocal deviation: `hold`). The values, and
so the sums, are those of the plain loads; only who loads and computes them changes. The memory
model counts them where they are made: scopes "a_cols" and "a_rows" (codegen.access, shared_access).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import sympy

from ..ops.primitives import Node
from ..symbolic.index import conjunction
from . import render_c
from .emit import Access, KernelBody

MAX_STAGED = 8  # of each kind: past it a load stays in the tile loop
MAX_INDEX_TEXT = 400  # characters of a staged index with its variables' definitions written out


@dataclass
class StagedLoads:
    """The hook `KernelBody.stage` calls for each input A's tile loads read (`__call__`): it answers the
    C value to read instead, or None to load as before."""

    body: KernelBody
    bm: sympy.Symbol
    ka: sympy.Symbol
    batch: Optional[sympy.Symbol]  # blockIdx.z, the same for the whole block
    bounds: dict  # "bm" -> bm < M, "ka" -> ka < K (the template's guard of A's loads)
    tile: int
    slices: int
    columns: list = field(default_factory=list)  # template fields of each staged k-only load
    rows: list = field(default_factory=list)  # and of each row-only load
    _known: dict = field(default_factory=dict)  # (buffer, index, mask) -> the value read instead
    row_statements: list = field(default_factory=list)  # values of the row alone, computed before the loop
    held_values: int = 0  # fused values those statements compute, once a thread rather than once a k

    def __call__(self, node: Node, flat, valid) -> Optional[str]:
        body = self.body
        if body.scope != "a" or render_c.compute_type(node.dtype) != "float":
            return None
        mask = conjunction(valid, *body._guards[1:])  # within the template's `if (bm < M && ka < K)`
        index, mask = self._written_out(flat), self._written_out(mask)
        if index is None or mask is None:
            return None
        used = {s for e in (index, mask) for s in e.free_symbols if not s.is_positive}  # dims are positive
        batch = {self.batch} - {None}
        buffer = body.buffer(node)
        key = (buffer, index, mask)
        if key in self._known:
            return self._known[key]
        load = render_c.load(node.dtype, render_c.element(buffer, body.printer.int(index)))
        if self.ka in used and used <= {self.ka} | batch and len(self.columns) < MAX_STAGED:
            name, at = f"kcol{len(self.columns)}", f"Kcols{len(self.columns)}"
            slot = f"threadIdx.z * {self.tile} + threadIdx.x" if self.slices > 1 else "threadIdx.x"
            self.columns.append(dict(name=name, array=at, slot=slot, load=load, guard=self._guard(mask)))
            body.accesses.append(Access(buffer, index, conjunction(self.bounds["ka"], mask), "a_cols"))
        elif used <= {self.bm} | batch and len(self.rows) < MAX_STAGED:
            at = f"arows{len(self.rows)}"
            name = render_c.element(at, "RC_SLOT")
            self.rows.append(dict(array=at, load=load, guard=self._guard(mask)))
            body.accesses.append(Access(buffer, index, conjunction(self.bounds["bm"], mask), "a_rows"))
        else:
            return None
        body.loads.append((buffer, index, mask))
        self._known[key] = name
        return name

    def hold(self, node: Node, flat) -> Optional[str]:
        """A fused value of A's loads at an index of the row alone (a layer norm's mean and reciprocal
        deviation, from the row's statistics), computed with the row's loads before the K loop into a
        register array; None where it varies with k or sits under a mask."""
        body = self.body
        if (body.scope != "a" or body._guards[1:] or render_c.compute_type(node.dtype) != "float"
                or len(self.rows) >= MAX_STAGED):
            return None
        index = self._written_out(flat)
        if index is None or not {s for s in index.free_symbols if not s.is_positive} <= {self.bm, self.batch}:
            return None
        key = ("value", node.id, index)
        if key in self._known:
            return self._known[key]
        outer = body.statements, body.scope, body._guards, body.inlined_values
        body.statements, body.scope, body._guards = self.row_statements, "a_rows", [self.bounds["bm"]]
        value = render_c.rounded(node.dtype, render_c.node_expr(
            node, *[body.value_at(e, body.unravel(flat, node.shape)) for e in node.srcs]))
        at = f"arows{len(self.rows)}"
        self.row_statements.append(f"{render_c.element(at, 'RC_SLOT')} = {value};")
        self.held_values += 1 + body.inlined_values - outer[3]
        body.statements, body.scope, body._guards = outer[:3]
        self.rows.append(dict(array=at, load=None, guard=""))
        self._known[key] = render_c.element(at, "RC_SLOT")
        return self._known[key]

    def _guard(self, mask) -> str:
        return "" if mask is sympy.true else f" && ({self.body.printer.cond(mask)})"

    def _written_out(self, expr) -> Optional[sympy.Basic]:
        """`expr` with every bound index variable (uN, o_k) replaced by its definition, so it reads the
        template's own variables only; None where that grows past MAX_INDEX_TEXT."""
        definitions = self.body.definitions
        expr = expr if isinstance(expr, sympy.Basic) else sympy.Integer(expr)  # an index is never text
        while True:
            bound = {s: definitions[s] for s in expr.free_symbols if s in definitions}
            if not bound:
                return expr
            expr = expr.xreplace(bound)
            if len(str(expr)) > MAX_INDEX_TEXT:
                return None

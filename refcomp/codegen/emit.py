"""Building one kernel's body: parameters, index variables and value statements.

A `KernelBody` collects what a template needs: the buffer and dim parameters the kernel reads, the
per-axis index variables of its output, and a list of `float vN = ...;` statements computing values.
`value_at(edge, idx)` is the heart of code generation: it reads an edge (a node through a view
stack) at an index, by loading from the node's buffer, inlining a Constant or Iota, or — for nodes
fused into this kernel — recursing into the node's own sources. The plain lowering fuses nothing;
the search's fusion rules mark nodes as `inline` and the same code inlines them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import sympy

from .abi import KernelSignature, Param
from ..errors import RefcompError
from ..ops.dtypes import DTYPES
from ..ops.graph import symbols_of
from ..ops.primitives import ELEMENTWISE, GATHER, REDUCE, SHORT_REDUCE, Edge, Node
from ..symbolic.dims import Dim, expand, idiv, imod, prod
from ..symbolic.index import conjunction, index_of, unravel, unravel_within
from ..symbolic.view import contiguous_strides
from ..symbolic.simplify import tighten
from . import render_c
from .cprint import CPrinter


# value_at recurses once per fused producer on a chain (four Python frames a level), so a kernel
# fuses at most this many nodes: deep graphs split into several kernels instead of overflowing the
# interpreter's stack, and no kernel grows past what nvcc and g++ digest quickly.
MAX_FUSED_NODES = 128
# A fused producer is recomputed wherever it is read at a new index (an unrolled reduce reads its
# source at up to SHORT_REDUCE indices, and masked reads recompute inside their `if`), so nested
# short reductions multiply the work: a kernel recomputes at most this many values per element
# (counted as emitted, repeated reads reused). Past it the kernel is refused as Unfusable: a fuzzed
# graph once made a 214 KB kernel of 45 nodes, 394 values, that took a minute to simplify.
MAX_INLINED_VALUES = 256


class Unfusable(RefcompError):
    """A fusion decision that this kernel cannot honour; the search discards the candidate."""


@dataclass(frozen=True)
class Access:
    """One place the kernel's text indexes a global buffer, as the cost model (codegen.access) reads it:
    the flat element index, the condition under which a thread performs it, and the template loop
    (`scope`) that executes it. Index variables a statement binds (uN, o_k) stay symbols here; the
    body's `definitions` say what each one holds."""

    buffer: str  # "in0", ... or "out0"
    index: sympy.Expr
    when: sympy.Basic  # sympy.true, or the mask under which the thread touches memory
    scope: str
    store: bool = False


def _same_shape(a, b) -> bool:
    return len(a) == len(b) and all(x == y or sympy.expand(sympy.sympify(x) - y) == 0 for x, y in zip(a, b))


@dataclass(frozen=True)
class ProgramNames:
    """Names shared by every kernel of one program: C names for the symbolic dims (dim0, dim1, ... in
    order of the symbols' names) and a number for each node, its position in the program's
    topological order. Kernel comments show these numbers rather than the process-wide node ids, so
    the same graph compiles to byte-identical source in any process (and the emulator's cache hits)."""

    dims: dict  # sympy.Symbol -> "dim0", ...
    numbers: dict  # node id -> position in the program's graph

    @staticmethod
    def of(nodes: Sequence[Node]) -> "ProgramNames":
        """`nodes` in topological order: the whole graph of the program."""
        dims = {s: f"dim{k}" for k, s in enumerate(sorted(symbols_of(list(nodes)), key=lambda s: s.name))}
        return ProgramNames(dims, {n.id: k for k, n in enumerate(nodes)})

    def label(self, node: Node) -> str:
        return f"{node.op.name}#{self.numbers[node.id]}"

    def order(self, nodes) -> list[Node]:
        return sorted(set(nodes), key=lambda n: self.numbers[n.id])


def linear_of(idx, shape) -> sympy.Expr:
    """The row-major linear position of index `idx` in a tensor of `shape`."""
    return expand(sum((i * s for i, s in zip(idx, contiguous_strides(shape))), sympy.Integer(0)))


@functools.lru_cache(maxsize=4096)
def index_symbol(name: str) -> sympy.Symbol:
    """A loop/axis index variable. User dims are *positive* symbols, so an index symbol (merely
    nonnegative) is a different SymPy object even when the names agree; sharing one symbol per name
    across kernels lets the index caches hit (memoised: SymPy's own cache answers only after it has
    read the assumptions, every time)."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


@dataclass
class KernelBody:
    names: ProgramNames
    buffer_names: dict[int, str] = field(default_factory=dict)  # node id -> "in0", ...
    buffer_ctypes: dict[int, str] = field(default_factory=dict)
    inline: Callable[[Node], bool] = lambda node: False  # fused producers are recomputed here
    _index_lines: list = field(default_factory=list)
    statements: list[str] = field(default_factory=list)
    symbols: dict[sympy.Symbol, str] = field(default_factory=dict)
    reads: list[Node] = field(default_factory=list)
    loads: list = field(
        default_factory=list
    )  # (buffer, flat index, mask) of each load, for the kernel's comment
    flat_axes: Optional[tuple] = None  # (axis symbols, flat symbol, shape) of the kernel's output
    ranges: dict = field(default_factory=dict)  # index symbol -> exclusive upper bound
    scalars: dict = field(default_factory=dict)  # node id -> (C variable, flat position it holds)
    scalars_read: set = field(default_factory=set)  # the ids of the scalars some statement read
    _count: int = 0
    _memo: dict = field(default_factory=dict)  # (statement list, node, views, index) -> variable
    _alive: list = field(default_factory=list)
    _bound: dict = field(default_factory=dict)  # (statement list, index tower) -> its uN variable
    fused: list = field(default_factory=list)  # nodes recomputed inline, for the comment and reports
    inlined_values: int = 0  # fused values recomputed so far (MAX_INLINED_VALUES)
    bind_compound: bool = True  # False where the index expressions are analysed rather than printed
    accesses: list = field(default_factory=list)  # every global load and store, for the cost model
    definitions: dict = field(default_factory=dict)  # index variable (uN, o_k) -> the expression it holds
    scope: str = "body"  # the template loop the statements being built run in (see Access)
    _guards: list = field(default_factory=list)  # masks of the `if` blocks being built
    # codegen.staged.StagedLoads while a matmul builds operand A: called with (node, flat, valid) for a
    # leaf load and `.hold(node, flat)` for a fused value, it answers a value made elsewhere, or None
    stage: Optional[Callable] = None

    def __post_init__(self):
        self.dim_names = self.names.dims
        self.printer = CPrinter({**self.dim_names})
        self.comment_printer = CPrinter(self.printer.names)

    # --- names --------------------------------------------------------------------------------
    def index_var(self, c_name: str, extent: Optional[Dim] = None) -> sympy.Symbol:
        """A new index variable printed as `c_name`; with `extent`, known to lie in [0, extent)."""
        sym = index_symbol(c_name)
        self.printer.names[sym] = c_name
        if extent is not None:
            self.ranges[sym] = sympy.sympify(extent)
        return sym

    def buffer(self, node: Node) -> str:
        if node.id not in self.buffer_names:
            self.buffer_names[node.id] = f"in{len(self.buffer_names)}"
            self.buffer_ctypes[node.id] = f"const {render_c.storage_type(node.dtype)}*"
            self.reads.append(node)
        return self.buffer_names[node.id]

    def fresh(self, prefix: str = "v") -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    # --- index variables of an output shape ------------------------------------------------------
    def axis_indices(self, flat_name: str, shape: Sequence[Dim], prefix: str = "o") -> list[sympy.Symbol]:
        """Declare `const long long o0 = ...;` per axis of `shape`, unravelled from the flat index."""
        flat = self.index_var(flat_name, prod(shape))
        axes = []
        for k, expr in enumerate(unravel(flat, shape)):
            if expr == 0:
                axes.append(sympy.Integer(0))
                continue
            axes.append(self.declare_index(f"{prefix}{k}", shape[k], expr))
        self.flat_axes = (tuple(axes), flat, tuple(shape))
        return axes

    def declare_index(self, c_name: str, extent: Dim, expr: sympy.Expr) -> sympy.Symbol:
        """An index line `const long long c_name = expr;`, declared before any statement."""
        sym = self.index_var(c_name, extent)
        self._index_lines.append((sym, render_c.index_decl(c_name, self.comment_printer.int(expr)), expr))
        self.definitions[sym] = expr
        return sym

    def access(self, buffer: str, flat, valid=sympy.true, store: bool = False) -> None:
        """Record a global access of the statements being built (under the enclosing `if` masks)."""
        when = conjunction(valid, *self._guards) if self._guards else valid
        self.accesses.append(Access(buffer, sympy.sympify(flat), when, self.scope, store))

    def when(self, valid, build: Callable[[], None]) -> None:
        """Run `build` (which appends statements and records accesses) inside one `if (valid) { }`
        statement: its accesses count only where `valid` holds (no `if` where it always does)."""
        if valid is sympy.true:
            return build()
        outer, self.statements = self.statements, []
        self._guards.append(valid)
        build()
        self._guards.pop()
        inner, self.statements = self.statements, outer
        self.statements.append(f"if ({self.printer.cond(valid)}) {{ " + " ".join(inner) + " }")

    def load_comments(self) -> list[str]:
        """`in0[o0 * 64 + r] where ...` per load: printed only for a rendered kernel's comment."""
        return [
            f"{buffer}[{self.comment_printer.int(flat)}]"
            + ("" if valid is sympy.true else f" where {self.comment_printer.cond(valid)}")
            for buffer, flat, valid in self.loads
        ]

    def used_index_lines(self) -> list[str]:
        """Declarations of the axis indices the body actually uses (call after the body is built)."""
        lines = []
        for sym, line, expr in self._index_lines:
            if sym in self.printer.used:
                self.printer.int(expr)  # its dims become parameters
                lines.append(line)
        return lines

    # --- values ----------------------------------------------------------------------------------
    def load_expr(self, edge: Edge, idx: Sequence[sympy.Expr]) -> str:
        """A C expression for `edge` at `idx`; fused producers emit their statements first."""
        flat, valid = self._locate(edge, idx)
        node = edge.node
        zero = render_c.zero(node.dtype)
        if valid is sympy.false:
            return zero
        if node.id in self.scalars:
            return self._scalar(node, flat, valid)
        if node.op.name == "Constant":
            value = render_c.constant(self.printer, node.dtype, node.attrs["value"])
        elif node.op.name == "Iota":
            position = self.unravel(flat, node.shape)[node.attrs["axis"]]
            value = render_c.index_as(node.dtype, self.printer.int(position))
        elif self.inline(node) and (node.op.kind in ELEMENTWISE or node.op.kind in (REDUCE, GATHER)):
            return self._inlined(node, flat, valid)
        elif self.stage is not None and (staged := self.stage(node, flat, valid)) is not None:
            value = staged  # loaded once per tile row or column (codegen.staged)
        else:
            value = render_c.load(node.dtype, render_c.element(self.buffer(node), self.printer.int(flat)))
            self.access(self.buffer(node), flat, valid)
            self.loads.append((self.buffer(node), flat, valid))
        if value == zero:
            return value
        if valid is not sympy.true:
            value = render_c.masked(self.printer.cond(valid), value, node.dtype)
        return value

    def _inlined(self, node: Node, flat, valid) -> str:
        """Recompute a fused producer here; under a mask its loads run only where the mask holds."""
        if node not in self.fused:
            self.fused.append(node)
            if len(self.fused) > MAX_FUSED_NODES:
                raise Unfusable(f"a kernel may fuse at most {MAX_FUSED_NODES} nodes")
        self.inlined_values += 1
        if self.inlined_values > MAX_INLINED_VALUES:
            raise Unfusable(f"a kernel may recompute at most {MAX_INLINED_VALUES} values per element")
        if self.stage is not None and valid is sympy.true and node.op.kind in ELEMENTWISE:
            held = self.stage.hold(node, flat)  # a value of the row alone, computed once (codegen.staged)
            if held is not None:
                return held
        outer, outer_ranges = self.statements, self.ranges
        if valid is not sympy.true:  # inside `if (valid)`: the mask's bounds help simplify the indices
            self.statements, self.ranges = [], tighten(self.ranges, valid)
            self._guards.append(valid)
        node_idx = self.unravel(flat, node.shape)
        if node.op.kind == REDUCE:
            value = self.unrolled(node, node_idx)
        elif node.op.kind == GATHER:
            value = self.looked_up(node, node_idx)
        else:
            value = render_c.node_expr(node, *[self.value_at(src, node_idx) for src in node.srcs])
        value = render_c.rounded(
            node.dtype, value
        )  # a 16-bit node's value is rounded wherever it is computed
        if valid is sympy.true:
            return value
        self._guards.pop()
        inner, self.statements, self.ranges = self.statements, outer, outer_ranges
        name = self.fresh()
        self.statements.extend(render_c.guarded(name, self.printer.cond(valid), inner, value, node.dtype))
        return name

    def unrolled(self, node: Node, idx: Sequence[sympy.Expr]) -> str:
        """A short reduce (maximum's pair, say) at `idx` as a chain of combines, in the reference's order."""
        axis, extent = node.attrs["axis"], node.srcs[0].shape[node.attrs["axis"]]
        if not isinstance(extent, int) or extent > SHORT_REDUCE:
            raise Unfusable(f"{node.op.name}#{node.id} reduces {extent} values: too many to unroll")
        kind = DTYPES[node.dtype].kind
        value = render_c.reduce_identity(node.op, kind)
        for r in range(extent):
            at = list(idx[:axis]) + [sympy.Integer(r)] + list(idx[axis:])
            value = render_c.op_expr(node.op, value, self.value_at(node.srcs[0], at), kind=kind)
        return value

    def looked_up(self, node: Node, idx: Sequence[sympy.Expr]) -> str:
        """A Gather fused into its reader, at `idx`: the table's element in the row its id names, loaded
        only when the id lies inside the table (else 0, as the gather kernel's guard; the runner
        refuses such ids before any launch). The table is a buffer or a leaf, never recomputed here:
        its load must stay under the guard."""
        table, ids = node.srcs
        if self.inline(table.node) and not table.node.op.literal:
            raise Unfusable(f"{node.op.name}#{node.id} reads a table this kernel would recompute")
        id_name = self.int_at(ids, idx[:-1])
        row = self.index_var(id_name)
        # ids are data: the memory model takes row q of the lookup to read table row 2q mod rows, as it
        # does for the gather kernel (codegen.indexed)
        self.definitions[row] = imod(2 * linear_of(idx[:-1], node.shape[:-1]), table.shape[0])
        value = self.load_expr(table, [row, idx[-1]])
        rows = self.printer.int(table.shape[0])
        return f"(({id_name} >= 0 && {id_name} < {rows}) ? {value} : {render_c.zero(node.dtype)})"

    def _scalar(self, node: Node, flat, valid) -> str:
        """A node this kernel already holds as one value per row (a fused reduction's result)."""
        name, expected = self.scalars[node.id]
        if self.flat_axes is not None and flat == self.flat_axes[1]:  # the identity shortcut: `i` itself
            flat = sum(
                (a * s for a, s in zip(self.flat_axes[0], contiguous_strides(node.shape))), sympy.Integer(0)
            )
        bound = {u: e for u, e in self.definitions.items() if u in self._bound.values()}
        flat = sympy.sympify(flat).xreplace(bound).xreplace(
            {expr: sym for sym, _, expr in self._index_lines}
        )  # a bound tower uN -> its definition; unravelled i -> o_k
        if valid is not sympy.true or expand(flat - expected) != 0:
            raise Unfusable(
                f"{node.op.name}#{node.id} is read at {flat}, not at this row's position {expected}"
            )
        self.scalars_read.add(node.id)
        return render_c.rounded(node.dtype, name)

    def unravel(self, flat, shape) -> list[sympy.Expr]:
        """Per-axis indices of a flat position. A component that stays a div/mod tower is bound to a
        `const long long uN` of known range [0, extent), so nested views cannot blow expressions up."""
        out = []
        for e, n in zip(unravel_within(flat, shape, self.ranges), shape):
            if self.bind_compound and e.has(idiv, imod):
                key = (id(self.statements), e)
                if key not in self._bound:  # one variable per tower and scope, so equal reads stay equal
                    name = self.fresh("u")
                    self.statements.append(render_c.index_decl(name, self.printer.int(e)))
                    self._bound[key] = self.index_var(name, n)
                    self.definitions[self._bound[key]] = e
                    self._alive.append(self.statements)
                e = self._bound[key]
            out.append(e)
        return out

    def value_at(self, edge: Edge, idx: Sequence[sympy.Expr]) -> str:
        """Like load_expr, but bound to a `const float vN`; a repeated read reuses its variable."""
        key = (id(self.statements), edge.node.id, edge.views, tuple(idx))
        if key in self._memo:
            return self._memo[key]
        value = self.load_expr(edge, idx)
        if edge.node.op.name == "Constant" or value.isidentifier():
            return value  # literals and already-named values need no variable
        name = self.fresh()
        self.statements.append(render_c.value_decl(name, value, edge.node.dtype))
        self._memo[key] = name
        self._alive.append(self.statements)  # keeps id(statements) unique while the memo refers to it
        return name

    def _locate(self, edge: Edge, idx: Sequence[sympy.Expr]):
        """Flat position and validity; an identity read of the output's own shape is just `i`."""
        if (self.flat_axes is not None and tuple(idx) == self.flat_axes[0] and edge.views.is_identity
                and _same_shape(edge.shape, self.flat_axes[2])):
            return self.flat_axes[1], sympy.true
        return index_of(edge.views, tuple(idx), self.ranges)

    def int_at(self, edge: Edge, idx: Sequence[sympy.Expr]) -> str:
        """An id read through a view (out-of-mask positions read id 0): an int32 input, a float32 buffer
        of exact integers (positions a graph computes), or an Iota written into the kernel."""
        if edge.node.op.literal:
            name = self.fresh("id")
            self.statements.append(render_c.index_decl(name, render_c.to_index(self.load_expr(edge, idx))))
            return name
        flat, valid = index_of(edge.views, tuple(idx), self.ranges)
        value = render_c.index_element(self.buffer(edge.node), self.printer.int(flat))
        self.access(self.buffer(edge.node), flat, valid)
        if valid is not sympy.true:
            value = render_c.masked_index(self.printer.cond(valid), value)
        name = self.fresh("id")
        self.statements.append(render_c.index_decl(name, value))
        return name

    # --- the signature -------------------------------------------------------------------------
    def params(self, outputs: Sequence[str], output_dtype: str) -> tuple[Param, ...]:
        buffers = [Param(name, self.buffer_ctypes[node_id]) for node_id, name in self.buffer_names.items()]
        outs = [Param(name, f"{render_c.storage_type(output_dtype)}*") for name in outputs]
        dims = [
            Param(self.dim_names[s], "long long")
            for s in sorted(self.printer.used & set(self.dim_names), key=lambda s: self.dim_names[s])
        ]
        return tuple(buffers + outs + dims)

    def signature(
        self, name: str, outputs: Sequence[str], uses_barrier: bool, output_dtype: str = "float32"
    ) -> KernelSignature:
        return KernelSignature(name, self.params(outputs, output_dtype), uses_barrier)

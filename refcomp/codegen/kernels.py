"""Kernels: one per compute node in the plain lowering, each rendered from its Jinja2 template.

A `Kernel` knows the graph node it writes, the nodes it reads (its buffer parameters, in order),
its CUDA source and signature, and its launch geometry as a function of the bound dims.
"""
from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

import jinja2
import sympy

from .abi import KernelSignature
from .cprint import comment_text
from ..ops.primitives import ELEMENTWISE, LEAF, REDUCE, Node
from ..symbolic.dims import Dim, prod
from . import render_c
from .emit import Access, KernelBody, Unfusable, linear_of
from .sums import loop_fields
from .tail import tail_fields
from .launch import (  # noqa: F401  (kernels' launch constants, here for their importers)
    BLOCK, MAX_GRID_STRIDE_BLOCKS, N_TILES, SCRATCH, TILE, WARP_OUTPUTS, Launch, with_scratch,
)

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
BLOCK_REDUCE_MIN_EXTENT = 256  # reduce a known axis this long with a whole block per output


_COMPILED: list = []  # the jinja2.BytecodeCache given to keep_compiled_templates, if any


def keep_compiled_templates(cache: jinja2.BytecodeCache) -> None:
    """Have Jinja keep the templates it compiles in `cache`, for later processes, which then skip
    compiling them. refcomp.exec gives one in its cache directory (code generation knows no
    directory)."""
    _COMPILED[:] = [cache]
    template.cache_clear()


@functools.lru_cache(maxsize=None)
def template(name: str) -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=False, autoescape=False,
                             bytecode_cache=_COMPILED[0] if _COMPILED else None)
    return env.get_template(name)


@dataclass
class Kernel:
    name: str
    kind: str
    output: Node
    nodes: tuple[Node, ...]  # every graph node this kernel computes (fused ones included)
    reads: tuple[Node, ...]  # buffer parameters in order
    signature: KernelSignature
    source: str
    launch: Launch
    ops: tuple[str, ...] = ()  # the user-level ops it computes ("layer_norm", "matmul"), in graph order
    cost: Optional[object] = None  # the cost model's search.cost.KernelCost, set by the program
    plan: Optional["AccessPlan"] = None  # its global accesses, for the memory model (codegen.access)
    carried: tuple[Node, ...] = ()  # Scatters it performs too (search.carry): out1, ... their tables' buffers
    row_stats: tuple[Node, ...] = ()  # its rows' statistics: S and V, or a maximum (after the carried outs)
    tail: tuple[Node, ...] = ()  # a short reduction of its output's rows and its epilogue (codegen.tail)

    @property
    def written(self) -> tuple[Node, ...]:
        """The nodes whose buffers it writes: its output, the Scatters it carries, its rows' statistics,
        its tail's value (out0, out1, ... in this order)."""
        return (self.output,) + self.carried + self.row_stats + self.tail[-1:]

    def __repr__(self) -> str:
        cost = (
            ""
            if self.cost is None
            else f", {self.cost.bytes:,} B, {self.cost.flops:,} flop, {self.cost.time_s * 1e6:.2f} us"
        )
        return f"<Kernel {self.name}: {self.kind}, {' '.join(self.ops)}, {self.launch}{cost}>"

    def args(
        self,
        buffers: Mapping[int, object],
        bindings: Mapping[str, int],
        dim_symbols: Mapping[str, sympy.Symbol],
    ) -> list:
        """Launch arguments: buffers for pointer params, ints for dims."""
        by_ident = {f"in{k}": buffers[n.id] for k, n in enumerate(self.reads)}
        by_ident.update({f"out{k}": buffers[n.id] for k, n in enumerate(self.written)})
        for ws in SCRATCH:  # allocated per launch by the runner (exec.program)
            if (ws, self.name) in buffers:
                by_ident[ws] = buffers[(ws, self.name)]
        out = []
        for p in self.signature.params:
            out.append(by_ident[p.ident] if p.ctype.endswith("*") else bindings[dim_symbols[p.ident].name])
        return out


@dataclass(frozen=True)
class AccessPlan:
    """What the memory model needs from a kernel besides its launch: each global access (Access), the
    index variables' definitions, and the length of the template's inner loop (the reduced axis of
    a reduction or row kernel, K of a matmul)."""

    accesses: tuple[Access, ...]
    definitions: dict
    extent: Optional[Dim] = None
    along_k: frozenset = frozenset()  # matmul operands ("a", "b") whose tile loads walk K with threadIdx.x
    block_reductions: int = 1  # block-wide reductions (shared-memory trees) a block-per-output kernel runs
    template: str = ""  # the template file, whose fixed shared-memory traffic the model counts
    prologue_extent: Optional[Dim] = (
        None  # matmul: the axis its per-row prologue reductions walk (None: none)
    )
    prologue_phases: int = 0  # and how many there are
    streamed_depth: int = 0  # softmax_matmul with streamed scores: the length of q . k
    streamed_width: int = 0  # and the depth padded to whole tiles (Q's and K's rows in shared memory)
    prologue_pairs: int = 0  # matmul: prologue phases that reduce two values in one pass (codegen.statistics)
    splittable: bool = False  # softmax_matmul: K may be split across blocks (codegen.online)
    staged_columns: int = 0  # matmul: inputs of A staged in shared memory once per K step (codegen.staged)
    held_values: int = 0  # matmul: fused values of A a thread computes once for its row (codegen.staged)


@dataclass(frozen=True)
class Late:
    """A template field computed after the index lines (it asks which variables ended up used)."""

    fn: Callable


def user_ops(nodes: Sequence[Node]) -> tuple[str, ...]:
    """The user-level ops that built these nodes, in the order given, each once; a node no user call
    built (an output's copy, say) counts as its primitive."""
    return tuple(
        dict.fromkeys(n.origin.op if n.origin else n.op.name.lower() for n in nodes if n.op.kind != LEAF)
    )


def _origins(nodes: Sequence[Node]) -> str:
    """`layer_norm (model.py:12), matmul (model.py:13)`: the user calls these nodes came from."""
    calls = dict.fromkeys(n.origin for n in nodes if n.origin is not None)
    return ", ".join(o.op + (f" ({o.where})" if o.where else "") for o in calls)


def _comment(name: str, body: KernelBody, nodes: tuple[Node, ...], output: Node, extra: str = "") -> str:
    label = body.names.label
    shape = ", ".join(body.comment_printer.int(n) for n in output.shape)
    ordered = body.names.order(list(body.fused) + list(nodes))
    computes = ", ".join(label(n) for n in ordered)
    lines = [f"// {name}: computes {computes} -> out0, shape ({shape}){extra}"]
    if _origins(ordered):
        lines.append(f"//   user ops: {_origins(ordered)}")
    lines += [f"//   reads {r}" for r in dict.fromkeys(body.load_comments())]
    lines = [
        comment_text(line) for line in lines
    ]  # every comment line is made safe: they show user file and input names
    return "\n".join(lines + [read_line(k, n, body.names) for k, n in enumerate(body.reads)])


READ_LINE = re.compile(r"//   in([0-9]+) = ")


def read_line(k: int, node: Node, names) -> str:
    """`//   in0 = x`: buffer in<k> names an input as it is fed (the explorer names it so too),
    any other node by its label; made safe, as every comment line is (names are the user's)."""
    return comment_text(
        f"//   in{k} = " + (node.attrs["name"] if node.op.name == "Input" else names.label(node))
    )


def finish_kernel(
    name: str,
    kind: str,
    tmpl: str,
    body: KernelBody,
    node: Node,
    nodes: tuple[Node, ...],
    launch: Launch,
    uses_barrier: bool,
    comment_extra: str = "",
    render: bool = True,
    loop_extent: Optional[Dim] = None,
    along_k: frozenset = frozenset(),
    block_reductions: int = 1,
    streamed: tuple = (0, 0),
    prologue_extent: Optional[Dim] = None,
    prologue_phases: int = 0,
    prologue_pairs: int = 0,
    splittable: bool = False,
    staged_columns: int = 0,
    held_values: int = 0,
    carried: tuple = (),
    statistics: tuple = (),
    tail: tuple = (),
    **fields,
) -> Optional[Kernel]:
    """The kernel, once its body is built; with `render=False` (a legality check, or pricing its
    accesses) nothing is printed: the kernel has no source, only its launch and access plan."""
    plan = AccessPlan(
        tuple(body.accesses),
        dict(body.definitions),
        loop_extent,
        along_k,
        block_reductions,
        tmpl,
        prologue_extent,
        prologue_phases,
        *streamed,
        prologue_pairs=prologue_pairs,
        splittable=splittable,
        staged_columns=staged_columns,
        held_values=held_values,
    )
    outputs = ["out0"] + [f"out{k + 1}" for k in range(len(carried) + len(statistics) + len(tail[-1:]))]
    if not render:
        return Kernel(
            name,
            kind,
            node,
            tuple(nodes),
            tuple(body.reads),
            with_scratch(body.signature(name, outputs, uses_barrier, node.dtype), launch),
            "",
            launch,
            plan=plan,
            carried=tuple(carried),
            row_stats=tuple(statistics),
            tail=tuple(tail),
        )
    fields = {
        k: v(body) if callable(v) and not isinstance(v, Late) else v for k, v in fields.items()
    }  # after the body
    index_lines = body.used_index_lines()
    fields = {k: v.fn(body) if isinstance(v, Late) else v for k, v in fields.items()}  # after the index lines
    signature = with_scratch(body.signature(name, outputs, uses_barrier, node.dtype), launch)
    source = template(tmpl).render(
        name=name,
        params=render_c.parameter_list(signature),
        index_lines=index_lines,
        stored=lambda value: render_c.store(node.dtype, value),  # a float as out0 holds it
        statements=body.statements,
        comment=_comment(name, body, nodes, node, comment_extra),
        **fields,
    )
    nodes = tuple(body.names.order(list(body.fused) + list(nodes)))
    return Kernel(name, kind, node, nodes, tuple(body.reads), signature, _drop_unused_indices(source), launch,
                  user_ops(nodes), plan=plan, carried=tuple(carried), row_stats=tuple(statistics),
                  tail=tuple(tail))


_INDEX_DECLARATION = re.compile(r"^\s*const long long (u\d+) = .*;\n", re.MULTILINE)
_INDEX_NAME = re.compile(r"\bu\d+\b")


def _drop_unused_indices(source: str) -> str:
    """Remove unravelled-index variables (uN) that no statement ended up reading (nvcc warns)."""
    while True:
        uses = Counter(_INDEX_NAME.findall(source))  # one scan, not one per declaration
        unused = [m for m in _INDEX_DECLARATION.finditer(source) if uses[m.group(1)] == 1]
        if not unused:
            return source
        for m in reversed(unused):
            source = source[:m.start()] + source[m.end():]


def elementwise_kernel(name: str, node: Node, names, inline: Callable[[Node], bool] = lambda n: False,
                       block: int = BLOCK, render: bool = True, carried: Sequence[Node] = (),
                       carry: Optional[Callable] = None) -> Kernel:
    """`carried`: Scatters whose rows are this output's, each written into its table by
    `carry(body, scatter, buffer, node, idx, result)` (codegen.indexed.carry_rows) as it is stored."""
    body = KernelBody(names, inline=inline)
    idx = body.axis_indices("i", node.shape)
    assert node.op.kind in ELEMENTWISE, node
    result = render_c.node_expr(node, *[body.value_at(src, idx) for src in node.srcs])
    body.access("out0", body.flat_axes[1], store=True)
    for k, scatter in enumerate(carried):
        carry(body, scatter, f"out{k + 1}", node, idx, result)
    size = prod(node.shape)
    return finish_kernel(
        name,
        "elementwise",
        "elementwise.cu.j2",
        body,
        node,
        (node,) + tuple(carried),
        Launch("grid_stride", size, block),
        False,
        render=render,
        carried=tuple(carried),
        result=result,
        size=lambda b: b.printer.int(size),
    )


# A reduction's strategies: "thread", a thread per output looping over the reduced axis; "block", a
# block per output whose threads stride over it; "columns", a block per 32 neighbouring outputs, each
# warp's lanes across them and the warps striding over the axis (a sum over an outer axis, such as
# split-K's partial sums or paged attention's sum over pages, read coalesced with a block's threads).
REDUCE_TEMPLATES = {s: f"reduce_{s}.cu.j2" for s in ("thread", "block", "columns")}
REDUCE_LAUNCHES = {"thread": "grid_stride", "block": "block_per_output", "columns": "columns"}
REDUCE_STRIDE = {  # how many of a block's threads share one output's values
    "thread": lambda block: 1, "block": lambda block: block, "columns": lambda block: block // WARP_OUTPUTS
}


def lines_read_by(lines: Sequence[str], texts: Sequence[str]) -> list[str]:
    """The index declarations (`const long long o1 = ...;`) whose variable some text reads: the matmul
    declares them in each barrier-free region that needs them (nvcc warns about unused ones)."""
    text = "\n".join(texts)
    return [line for line in lines if re.search(rf"\b{line.split()[3]}\b", text)]


def default_reduce_strategy(extent: Dim) -> str:
    """A whole block per output for a known, long axis; else one thread per output."""
    return "block" if isinstance(extent, int) and extent >= BLOCK_REDUCE_MIN_EXTENT else "thread"


def reduce_kernel(name: str, node: Node, names, inline: Callable[[Node], bool] = lambda n: False,
                  strategy: Optional[str] = None, block: int = BLOCK, epilogue: Optional[Node] = None,
                  render: bool = True, tail: Sequence[Node] = ()) -> Kernel:
    """A reduction; with `epilogue`, an elementwise node of the reduction's shape applied to its result;
    with `tail`, a short reduction of its outputs' rows and that one's epilogue, finished by each row's
    last block (codegen.tail)."""
    assert node.op.kind == REDUCE, node
    src, axis = node.srcs[0], node.attrs["axis"]
    extent = src.shape[axis]
    strategy = strategy or ("block" if tail else default_reduce_strategy(extent))
    if tail and (strategy != "block" or epilogue is not None):
        raise Unfusable(
            f"{node.op.name}#{node.id}: only a block per output, with no epilogue, finishes a tail")
    body = KernelBody(names, inline=inline)
    idx = body.axis_indices("i", node.shape)
    output_axes, body.flat_axes = body.flat_axes, None  # the source has one more axis: no shortcut there
    r = body.index_var("r", extent)
    body.scope = "loop"
    value = body.value_at(src, idx[:axis] + [r] + idx[axis:])
    loop_statements, body.statements = body.statements, []
    body.scope = (
        "body" if strategy == "thread" else "single"
    )  # every output's thread, or the block's thread (or first warp) that stores
    result, written = "total", node
    if epilogue is not None:
        at = _same_elements_at(epilogue.shape, node.shape, idx)
        if at is None:
            raise Unfusable(f"epilogue {epilogue.op.name}#{epilogue.id} does not have the reduction's shape")
        body.flat_axes = output_axes if at is idx else None
        body.scalars[node.id] = ("total", linear_of(idx, node.shape))
        result = render_c.node_expr(epilogue, *[body.value_at(s, at) for s in epilogue.srcs])
        written = epilogue
    epilogue_statements, body.statements = body.statements, loop_statements
    body.access("out0", output_axes[1], store=True)
    size = prod(node.shape)
    finished = tail_fields(body, node, tail, "out1") if tail else None
    reduction = loop_fields(
        names, node, loop_statements, value, ("mine", "other"), REDUCE_STRIDE[strategy](block)
    )
    common = dict(
        reduction=reduction,
        result=result,
        epilogue=epilogue_statements,
        extent=lambda b: b.printer.int(extent),
        comment_extra=f", reducing axis {axis}",
    )
    nodes = (node,) + (() if epilogue is None else (epilogue,)) + tuple(tail)
    if strategy != "thread":
        return finish_kernel(
            name,
            "reduce",
            REDUCE_TEMPLATES[strategy],
            body,
            written,
            nodes,
            Launch(REDUCE_LAUNCHES[strategy], size, block, tail=finished["per_row"] if tail else 0),
            True,
            render=render,
            loop_extent=extent,
            block=block,
            tail=tuple(tail),
            finished=finished,
            size=lambda b: b.printer.int(size),
            store_index_lines=Late(lambda b: lines_read_by(
                b.used_index_lines(),
                epilogue_statements + [result] + (finished["statements"] if tail else []))),
            tree_combine=reduction["tree"],
            **common,
        )
    return finish_kernel(
        name,
        "reduce",
        "reduce_thread.cu.j2",
        body,
        written,
        nodes,
        Launch("grid_stride", size, block),
        False,
        render=render,
        loop_extent=extent,
        size=lambda b: b.printer.int(size),
        **common,
    )


def _same_elements_at(shape, reduced_shape, idx):
    """The index into `shape` of the reduction's output element at `idx`: `idx` itself when the shapes
    are equal, else when they differ only by axes of extent 1 (a reshape to (B, 768) of a (B, 1, 768)
    sum: the same elements in the same order), the non-unit axes' indices with 0 on its unit axes.
    None when the elements differ."""
    if len(shape) == len(reduced_shape) and all(a == b for a, b in zip(shape, reduced_shape)):
        return idx
    kept = [(d, i) for d, i in zip(reduced_shape, idx) if d != 1]
    if [d for d in shape if d != 1] != [d for d, _ in kept]:
        return None
    lanes = iter(i for _, i in kept)
    return [sympy.Integer(0) if d == 1 else next(lanes) for d in shape]


def prelude(kernels: Sequence[Kernel]) -> str:
    """The program's helpers, with the 16-bit conversions only where a kernel stores, loads or rounds such
    a type, and the compensated sum only where a kernel has a long sum (codegen.sums)."""
    dtypes = {n.dtype for k in kernels for n in k.nodes + k.reads + (k.output,)}
    compensated = any("rc_sum_add(" in k.source for k in kernels)
    wide = bool(dtypes & {"int64", "float64"}) or any(_INTEGER_HELPER.search(k.source) for k in kernels)
    return template("prelude.cu.j2").render(kernel_count=len(kernels), dtypes=dtypes, compensated=compensated,
                                            wide=wide)


_INTEGER_HELPER = re.compile(r"\brc_(iadd|imul|imod|idiv|to_int|to_int32)\(|RC_INT64_MIN")

"""The plain lowering: one kernel per compute node, every view folded into index expressions.

Leaves cost nothing: an Input is a buffer, a Constant or an Iota is inlined where it is read. An
output that is a view of a node (or a leaf) gets a final Contiguous node, so every program output is
a freshly written, densely packed buffer.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

from ..ops.dtypes import DTYPES
from ..ops.graph import toposort
from ..ops.primitives import ELEMENTWISE, GATHER, LEAF, REDUCE, SCATTER, Edge, Node, make_node
from .emit import ProgramNames, Unfusable
from .fused import row_kernel
from .tiled import matmul_kernel, sliced_problem
from .indexed import carry_rows, gather_kernel, scatter_kernel
from .online import n_tiles_of, softmax_matmul_kernel
from .kernels import (
    BLOCK,
    N_TILES,
    READ_LINE,
    REDUCE_LAUNCHES,
    REDUCE_TEMPLATES,
    TILE,
    Kernel,
    default_reduce_strategy,
    elementwise_kernel,
    read_line,
    reduce_kernel,
    user_ops,
    with_scratch,
)


def materialise_outputs(tensors) -> list[Node]:
    """The node holding each output densely: the node itself, or a Contiguous copy of the view."""
    nodes = []
    for t in tensors:
        if t.node.op.kind != LEAF and t.views.is_identity:
            nodes.append(t.node)
        else:
            nodes.append(make_node("Contiguous", (Edge(t.node, t.views),)))
    return nodes


def kernel_for(name: str, node: Node, names: ProgramNames, inline: Callable[[Node], bool] = lambda n: False,
               strategy: Optional[str] = None) -> Kernel:
    if node.op.kind in ELEMENTWISE:
        return elementwise_kernel(name, node, names, inline)
    if node.op.kind == REDUCE:
        return reduce_kernel(name, node, names, inline, strategy)
    if node.op.kind == GATHER:
        return gather_kernel(name, node, names)
    if node.op.kind == SCATTER:
        return scatter_kernel(name, node, names)
    raise AssertionError(f"no kernel for {node}")


MAX_NAME_OPS = 3  # a kernel's name lists at most this many user ops (its comment lists them all)


def kernel_name(index: int, nodes: Sequence[Node]) -> str:
    """`k2_softmax`, `k4_layer_norm_matmul`: the position, then what the kernel computes. An imported
    model's ops are named by its modules (`h.0.attn`): anything no C identifier holds becomes `_`."""
    return f"k{index}_" + "_".join(_NOT_IDENTIFIER.sub("_", op) for op in user_ops(nodes)[:MAX_NAME_OPS])


_NOT_IDENTIFIER = re.compile(r"[^0-9A-Za-z_]")


def lower_plain(output_nodes: Sequence[Node]) -> list[Kernel]:
    nodes = toposort(list(output_nodes))
    names = ProgramNames.of(nodes)
    compute = [n for n in nodes if n.op.kind != LEAF]
    return [kernel_for(kernel_name(k, [n]), n, names) for k, n in enumerate(compute)]


@dataclass(frozen=True)
class Group:
    """One kernel of a fused schedule: the node it writes and the fused nodes it recomputes."""

    root: Node
    members: tuple[Node, ...]  # fused nodes computed inside this kernel, producers first
    reads: tuple[Node, ...]  # nodes whose buffers it reads
    kind: str  # "elementwise", "reduce", "row", "matmul", "gather" or "scatter"
    recomputed: int = 0  # the search's bound on values recomputed per output element (fusion._recomputations)
    carried: tuple[Node, ...] = ()  # Scatters of the root's columns this kernel also writes (search.carry)
    row_stats: tuple[Node, ...] = ()  # its root's rows' S and V, or maximum (search.row_stats)
    tail: tuple[Node, ...] = ()  # a short reduction of its root's rows, then its epilogue (search.tail)


# Parameters that change only a kernel's template and launch, never its body's index analysis, per
# kind of kernel: a kernel analysed once serves every value of them (`retarget`), so the search
# prices a matmul's tiles and tile loads without analysing it four times, and a reduction's thread
# and block strategies without analysing it twice.
TEMPLATE_ONLY = {"matmul": ("tile", "b_along_k", "slices", "splits", "n_tiles"), "reduce": ("strategy",)}


def retarget(kernel: Kernel, params: dict) -> Optional[Kernel]:
    """An unprinted kernel (render=False) with its template-only parameters set as in `params`, or None
    when the template cannot take them (K in slices: a plain matmul of at most 1,024 threads a block;
    several N tiles a block: an online softmax's; K split across blocks: a plain matmul's, or an online
    softmax's whose combine reads no memory)."""
    if kernel.kind == "matmul":
        along_k = frozenset({"b"}) if params.get("b_along_k") else frozenset()
        tile, slices = params.get("tile", TILE), params.get("slices", 1)
        splits, n_tiles = params.get("splits", 1), params.get("n_tiles", N_TILES)
        if slices > 1 and sliced_problem(kernel.plan.template, kernel.plan.prologue_phases, tile, slices):
            return None
        online = kernel.plan.template == "softmax_matmul.cu.j2"
        if splits > 1 and online and not kernel.plan.splittable:
            return None
        width = (
            -(-kernel.plan.streamed_depth // tile) * tile
        )  # streamed Q and K rows: whole tiles (online._stream)
        cols = n_tiles_of(kernel.launch.extra[0], tile, n_tiles) if online else 1
        launch = replace(kernel.launch, block=tile, slices=slices, splits=splits, cols=cols)
        plan = replace(kernel.plan, along_k=along_k, streamed_width=width)
        return replace(kernel, launch=launch, plan=plan, signature=with_scratch(kernel.signature, launch))
    if kernel.kind == "reduce":
        default = "block" if kernel.tail else default_reduce_strategy(kernel.plan.extent)  # as reduce_kernel
        return _restrategised(kernel, params.get("strategy") or default)
    return kernel


def _restrategised(kernel: Kernel, strategy: str) -> Kernel:
    """A reduction as `reduce_kernel` builds it for another strategy: the same accesses, but what
    follows the loop (the epilogue, the store) runs on each output's thread ("body") or on the
    block's storing thread or warp ("single"), from the other template, launch and barrier use."""
    mode = REDUCE_LAUNCHES[strategy]
    if mode == kernel.launch.mode:
        return kernel
    if kernel.tail:  # the last block's tail follows a block per output (reduce_tail.cu.j2)
        return None
    after = "body" if strategy == "thread" else "single"
    accesses = tuple(a if a.scope == "loop" else replace(a, scope=after) for a in kernel.plan.accesses)
    return replace(kernel, launch=replace(kernel.launch, mode=mode),
                   signature=replace(kernel.signature, uses_barrier=strategy != "thread"),
                   plan=replace(kernel.plan, accesses=accesses, template=REDUCE_TEMPLATES[strategy]))


def kernel_for_group(
    name: str,
    group: Group,
    names: ProgramNames,
    fused: Callable[[Node], bool],
    params: dict,
    render: bool = True,
) -> Optional[Kernel]:
    """The kernel of a group; raises codegen.emit.Unfusable if the fusion cannot be honoured.
    With `render=False` only the analysis that may refuse runs (see codegen.legality)."""
    root = group.root
    if group.kind in ("row", "matmul"):
        other = next((n for n in group.members if not DTYPES[n.dtype].is_float), None)
        if other is not None:
            raise Unfusable(
                f"{other.op.name}#{other.id} computes {other.dtype}: {group.kind} kernels compute float32"
            )
    if group.kind == "row":
        rows = [n for n in group.members if n.op.kind == REDUCE and n.id in params.get("row_ids", ())]
        return row_kernel(name, root, rows, names, fused, block=params.get("block", BLOCK), render=render)
    if group.kind == "matmul":
        streamed = frozenset(params.get("streamed_ids", ()))
        reduce = next(
            n
            for n in (root,) + group.members
            if n.id in params.get("matmul_ids", ()) and n.id not in streamed
        )
        online = frozenset(params.get("online_ids", ())) & {n.id for n in group.members}
        prologue = [n for n in group.members if n.id in params.get("prologue_ids", ())]
        if online and prologue:
            raise Unfusable("the online-softmax matmul computes no prologue reductions")
        if online and (group.carried or group.row_stats):
            raise Unfusable("the online-softmax matmul writes no Scatter's rows and no row statistics")
        if online:
            return softmax_matmul_kernel(
                name,
                root,
                reduce,
                names,
                fused,
                online,
                streamed,
                tile=params.get("tile", TILE),
                render=render,
                b_along_k=bool(params.get("b_along_k")),
                slices=params.get("slices", 1),
                splits=params.get("splits", 1),
                n_tiles=params.get("n_tiles", N_TILES),
            )
        return matmul_kernel(name, root, reduce, names, fused, tile=params.get("tile", TILE), render=render,
                             b_along_k=bool(params.get("b_along_k")), prologue=prologue,
                             welford=frozenset(params.get("welford_ids", ())) & {n.id for n in prologue},
                             slices=params.get("slices", 1), splits=params.get("splits", 1),
                             carried=group.carried, row_stats=group.row_stats)
    if group.kind == "reduce":
        if root.op.kind == REDUCE:
            return reduce_kernel(name, root, names, fused, params.get("strategy"), params.get("block", BLOCK),
                                 render=render, tail=group.tail)
        if group.tail:
            raise Unfusable("a reduction with an epilogue finishes no short reduction of its rows")
        reduce = next(n for n in group.members if n.id in params.get("epilogue_ids", ()))
        return reduce_kernel(
            name,
            reduce,
            names,
            fused,
            params.get("strategy"),
            params.get("block", BLOCK),
            epilogue=root,
            render=render,
        )
    if group.kind == "gather":
        return gather_kernel(name, root, names)
    if group.kind == "scatter":
        return scatter_kernel(name, root, names)
    return elementwise_kernel(name, root, names, fused, params.get("block", BLOCK), render=render,
                              carried=group.carried, carry=carry_rows)


def relabelled(kernel: Kernel, like: Group, group: Group, name: str, names: ProgramNames) -> Optional[Kernel]:
    """The kernel of `group` made from `kernel`, the kernel of `like`: a group of the same structure
    under the same parameters (the same layer of a repeated model), whose code differs only in the
    kernel's name and the node labels and input names its comments show. None when the two groups'
    nodes do not come in the same program order (the comments list them in it): then `group` is
    generated afresh."""
    nodes_of = lambda g: g.members + (g.root,) + g.carried + g.row_stats + g.tail + g.reads  # noqa: E731
    pairs = list(zip(nodes_of(like), nodes_of(group)))
    copies = [b for _, b in sorted(pairs, key=lambda pair: names.numbers[pair[0].id])]
    if any(names.numbers[a.id] >= names.numbers[b.id] for a, b in zip(copies, copies[1:])):
        return None
    node = {a.id: b for a, b in pairs}
    labels = {names.label(a): names.label(b) for a, b in pairs if a.id != b.id}
    labels[kernel.name] = name
    pattern = re.compile(
        r"(?<![\w#])(" + "|".join(map(re.escape, sorted(labels, key=len, reverse=True))) + r")(?![\w#])"
    )
    source = _with_read_lines(
        pattern.sub(lambda m: labels[m.group(1)], kernel.source), [node[n.id] for n in kernel.reads], names
    )
    return replace(
        kernel,
        name=name,
        output=node[kernel.output.id],
        nodes=tuple(node.get(n.id, n) for n in kernel.nodes),
        reads=tuple(node[n.id] for n in kernel.reads),
        carried=tuple(node[n.id] for n in kernel.carried),
        row_stats=tuple(node[n.id] for n in kernel.row_stats),
        tail=tuple(node[n.id] for n in kernel.tail),
        signature=replace(kernel.signature, name=name),
        source=source,
    )


def lower_groups(plans: Sequence[tuple], inline: frozenset, names: ProgramNames) -> list[Kernel]:
    """The kernel of each planned group, in order: `plans` holds (group, its parameters, a key equal
    for groups whose kernels have the same code but for labels), as the search's lowering_plan gives
    them, and `inline` the ids of the nodes recomputed where they are read. A kernel whose key an
    earlier one has (the same layer of a repeated model) is that kernel relabelled, not generated
    again: N blocks cost one block's code generation."""
    fused = lambda node: node.id in inline  # noqa: E731
    kernels, first = [], {}
    for k, (group, params, key) in enumerate(plans):
        name = kernel_name(k, group.members + (group.root,) + group.carried)
        kernel = relabelled(first[key][0], first[key][1], group, name, names) if key in first else None
        if kernel is None:
            kernel = kernel_for_group(name, group, names, fused, params)
            first.setdefault(key, (kernel, group))
        kernels.append(kernel)
    return kernels


def _with_read_lines(source: str, reads: Sequence[Node], names: ProgramNames) -> str:
    """`source` with its heading comment's `//   in<k> = ...` lines written anew for `reads`: an
    input's name is the user's text, which the label substitution must not be trusted to rewrite."""
    lines = source.split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("//"):
            break  # the heading comment ends where the code begins
        found = READ_LINE.match(line)
        if found:
            lines[i] = read_line(int(found.group(1)), reads[int(found.group(1))], names)
    return "\n".join(lines)

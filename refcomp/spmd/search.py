"""The sharding search: the inputs the user left unannotated (weights) get the shardings that make
the program cheapest on the mesh.

A candidate assignment is priced by propagating it (spmd.propagate) and adding, at the hint
binding, each collective's ring time (spmd.collectives) to each device's memory time: the bytes its
local compute nodes write and read once over HBM bandwidth, or its flops (one per value a node
reads) over the device's rate, whichever is longer (the search's roofline, node by node). A weight's
options are: replicated, or one dim split over one mesh axis. Coordinate descent: each weight in
turn takes its best option given the others, until a sweep changes nothing. On a Megatron MLP this
finds the column-split first weight and the row-split second: one all-reduce.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence

import sympy

from ..errors import ShapeError
from ..ops.dtypes import DTYPES
from ..ops.graph import toposort
from ..ops.primitives import LEAF, Edge, Node
from ..search.cost import DEFAULT_DIM, H200
from ..symbolic.dims import evaluate_dim
from .collectives import collective_time
from .mesh import Mesh
from .propagate import propagate

MAX_SWEEPS = 4


def _options(node: Node, mesh: Mesh, data_axes: frozenset = frozenset()) -> list[tuple]:
    """Replicated, or one dim split over one mesh axis that no annotated input is split on: those
    are data-parallel axes, and a weight split over one would be gathered again every step."""
    if len(node.shape) < 2:  # a bias or a norm's scale: tiny, so it only follows its readers (flexible)
        return []
    options = [(None,) * len(node.shape)]
    for d, n in enumerate(node.shape):
        # a dim that is k times another of the weight may be k fused weights side by side (q|k|v): split
        # each block ("tp:k", see mesh.split_entry) as well as the whole
        blocks = {1} | {
            n // o
            for o in node.shape
            if isinstance(n, int) and isinstance(o, int) and o and n % o == 0 and 2 <= n // o <= 4
        }
        for axis, size in mesh.axes:
            if axis in data_axes or size == 1:
                continue
            for k in sorted(blocks):
                if (isinstance(n, int) and n % (size * k) == 0 and n >= size * k) or (
                    isinstance(n, sympy.Symbol) and k == 1
                ):
                    entry = axis if k == 1 else f"{axis}:{k}"
                    options.append(tuple(entry if j == d else None for j in range(len(node.shape))))
    return options


def price(edges: Sequence[Edge], mesh: Mesh, specs: dict, hint: Mapping[str, int], flexible=frozenset(),
          shared: Optional[dict] = None):
    """(seconds per step on the mesh under the model: collectives plus one device's work, and every
    input's sharding, the flexible ones as their first readers laid them out). `shared`: see propagate."""
    try:
        local = propagate(edges, mesh, specs, flexible, shared)
    except ShapeError:
        return float("inf"), specs
    local_hint = dict(hint)
    for name, (g, axis) in local.local_symbols.items():
        local_hint[name] = max(1, local_hint.get(g, DEFAULT_DIM) // mesh.sizes[axis])
    sizes: dict = {}

    def nbytes(node: Node) -> int:
        key = (node.shape, node.dtype)
        if key not in sizes:
            count = 1
            for n in node.shape:
                count *= evaluate_dim(
                    n, {**{s.name: DEFAULT_DIM for s in getattr(n, "free_symbols", ())}, **local_hint}
                )
            sizes[key] = count * DTYPES[node.dtype].itemsize
        return sizes[key]

    roots = [e.node for e in local.outputs] + [c.src for c in local.collectives]
    busy = 0.0
    for n in toposort(roots):  # each node a roofline of its own: bytes in and out, one flop per value made
        if n.op.kind == LEAF:
            continue
        moved = nbytes(n) + sum(nbytes(s.node) for s in n.srcs)
        flops = max(nbytes(s.node) for s in n.srcs) // 4 if n.srcs else 0
        busy += max(moved / H200.bandwidth, flops / H200.flops)
    comm = sum(collective_time(c.kind, nbytes(c.src), mesh.sizes[c.axis]) for c in local.collectives)
    return comm + busy, local.input_specs


def search_shardings(edges: Sequence[Edge], mesh: Mesh, specs: dict, free: Sequence[Node],
                     dims_hint: Optional[Mapping[str, int]] = None) -> dict:
    """`specs` completed with a sharding for every node in `free` (coordinate descent, see above)."""
    hint = dict(dims_hint or {})
    names = [n.attrs["name"] for n in free]
    chosen: dict = dict(specs)  # a free weight absent from `chosen` is flexible: its first reader lays it out
    shared: dict = {}  # what the propagations of this graph have in common (see propagate)
    best, layout = price_of(edges, mesh, chosen, hint, frozenset(names), shared)
    order = _first_use(edges, free)
    data_axes = frozenset(a for spec in specs.values() for a in spec if a is not None)
    memo: dict = {}

    def price(edges, mesh, trial, hint, flexible):  # each assignment is propagated once
        key = frozenset(trial.items())
        if key not in memo:
            memo[key] = price_of(edges, mesh, trial, hint, flexible, shared)
        return memo[key]

    for _ in range(MAX_SWEEPS):
        changed = False
        for i, node in enumerate(order):
            for option in [None] + _options(node, mesh, data_axes):
                # a move sets one weight, or it and the weights of its shape read right after it (q, k, v
                # projections must split together for attention to stay split)
                run = [node]
                while True:
                    trial = {k: v for k, v in chosen.items() if k not in {n.attrs["name"] for n in run}}
                    if option is not None:
                        trial.update({n.attrs["name"]: option for n in run})
                    if trial != chosen and not _as_propagated(run, option, chosen, layout):
                        cost, trial_layout = price(
                            edges, mesh, trial, hint, frozenset(n for n in names if n not in trial)
                        )
                        if cost < best * (1 - 1e-9):
                            best, chosen, layout, changed = cost, trial, trial_layout, True
                    nxt = i + len(run)
                    if nxt >= len(order) or tuple(order[nxt].shape) != tuple(node.shape):
                        break
                    run.append(order[nxt])
        if not changed:
            break
    return {**layout, **chosen}


def _as_propagated(run: list[Node], option: Optional[tuple], chosen: dict, layout: dict) -> bool:
    """Whether pinning `run` to `option` changes nothing: they are flexible and were left replicated,
    and `option` replicates them. A flexible weight is laid out by its first reader only when that
    reader cannot read it whole (`Propagation._adopt`, tried after `local_edge`), so one left
    replicated was read whole, as a replicated pin is read: the same propagation, the same price.
    (A pin to a split is not alike: the weight's split then shapes its reader's target.)"""
    return (option is not None and all(a is None for a in option)
            and all(n.attrs["name"] not in chosen and layout.get(n.attrs["name"]) == option for n in run))


def _first_use(edges: Sequence[Edge], free: Sequence[Node]) -> list[Node]:
    """The free weights in the order the graph first reads them."""
    position = {n.id: k for k, n in enumerate(toposort([e.node for e in edges]))}
    first = {}
    for n in toposort([e.node for e in edges]):
        for s in n.srcs:
            first.setdefault(s.node.id, position[n.id])
    return sorted(free, key=lambda n: (first.get(n.id, len(position)), n.attrs["name"]))


price_of = price

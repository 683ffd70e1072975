"""Sharding propagation: the global graph, the shardings of its inputs and a mesh -> one *local* graph
that every device runs, and the collectives between its parts.

Each global node becomes one local node over local shapes (a sharded dim is divided by its mesh axis:
an int exactly, a symbol `B` by a new symbol `B_dp` that the runner binds to B / dp). The rules:

- An input takes its annotated (or searched) sharding; Constants and Iotas stay replicated.
- An elementwise node takes the sharding of its most sharded operand. Every operand must then read
  the same local block: one sharded alike, or replicated along a dim it only broadcasts. Otherwise
  every sharded operand is gathered (AllGather) and the node is computed replicated.
- A reduction over a sharded dim leaves a *partial* result on each device: AllReduce (sum or max)
  completes it before anything else reads it. A matmul is Mul then SumReduce, so a contraction over
  a sharded dim costs one AllReduce of its output, and over unsharded dims, nothing.
- A view keeps a sharding when it is a permutation, broadcast or unsqueeze of its source (one view,
  no offset or mask: every dim reads one source dim whole). Any other view of a sharded tensor
  (slices, pads, reshapes) reads a gathered copy: correct, and priced by the search.
- Outputs are assembled from their shards by the runner; an output left as partial sums is
  completed by a ReduceScatter along an unsplit dim (half an all-reduce's traffic).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import sympy

from ..errors import ShapeError
from ..ops.graph import toposort
from ..ops.primitives import ELEMENTWISE, GATHER, LEAF, REDUCE, Edge, Node, make_node
from ..ops.tensor import Tensor
from ..symbolic.dims import Dim, dim, dims_equal
from ..symbolic.index import index_of
from ..symbolic.view import View, ViewStack, contiguous_strides
from .mesh import Mesh, Spec, split_entry
from .views import axis_map, fits, mentions, ratio, starts, subs, unblocked

REDUCE_KIND = {"SumReduce": "AllReduceSum", "MaxReduce": "AllReduceMax"}


@dataclass(frozen=True)
class CollectiveStep:
    """A collective of the local program: `kind` over mesh axis `axis` of the local node `src`, whose
    result every device feeds to the next part as the input named `name` (`dim`: the gathered dim)."""

    kind: str
    axis: str
    src: Node
    name: str
    dim: int = 0
    of: Optional[Node] = None  # the global node it completes or gathers, for reports


@dataclass
class LocalGraph:
    mesh: Mesh
    outputs: list[Edge]  # local edges, one per global output
    output_specs: list[Spec]
    input_specs: dict[str, Spec]  # every global input by name, as sharded
    collectives: list[CollectiveStep] = field(default_factory=list)
    local_symbols: dict[str, tuple[str, str]] = field(default_factory=dict)  # "B_dp" -> ("B", "dp")
    node_specs: list = field(default_factory=list)  # (global node, its sharding, the AllReduce completing it) in order
    block_inputs: dict = field(default_factory=dict)  # per-device block ids the runner feeds (see _sliced_edge)


@dataclass
class _Value:
    node: Node  # the local node
    spec: Spec  # per dim of the global node's shape
    partial: Optional[str] = None  # "AllReduceSum" / "AllReduceMax" pending over `partial_axis`
    partial_axis: Optional[str] = None


class Propagation:
    def __init__(self, mesh: Mesh, input_specs: dict[str, Spec], flexible: frozenset = frozenset()):
        self.mesh, self.input_specs = mesh, input_specs
        self.flexible = set(flexible)  # weights that take the layout their first reader needs (see _adopt)
        self.read: set[int] = set()
        self.reduced: dict[int, str] = {}  # node id -> the collective that completed its partial value
        self.block_inputs: dict[str, tuple] = {}  # "__block_tp_512" -> ("tp", 512): per-device ids the runner feeds
        self.values: dict[int, _Value] = {}
        self.collectives: list[CollectiveStep] = []
        self.local_symbols: dict[str, tuple[str, str]] = {}

    # --- local dims ---------------------------------------------------------------------------
    def local_dim(self, n: Dim, entry: Optional[str], what: str) -> Dim:
        if entry is None:
            return n
        axis, blocks = split_entry(entry)
        size = self.mesh.sizes[axis]
        if isinstance(n, int):
            if n % (size * blocks):
                raise ShapeError(f"{what}: a dim of {n} does not split evenly over mesh axis {axis!r} of size {size}"
                                 + (f" in {blocks} blocks" if blocks > 1 else ""))
            return n // size
        if blocks > 1:
            raise ShapeError(f"{what}: only a dim of known size can be split in blocks, not {n}")
        if isinstance(n, sympy.Symbol):
            name = f"{n.name}_{axis}"
            self.local_symbols[name] = (n.name, axis)
            return sympy.Symbol(name, integer=True, positive=True)
        raise ShapeError(f"{what}: the dim {n} is an expression; only ints and plain symbols can be sharded")

    def divides(self, n: Dim, entry: str) -> bool:
        """Whether a dim of size n can be split as `entry` says (a symbol: checked when it is bound)."""
        axis, blocks = split_entry(entry)
        return (isinstance(n, sympy.Symbol) and blocks == 1) or (isinstance(n, int) and n % (self.mesh.sizes[axis] * blocks) == 0)

    def local_shape(self, shape: Sequence[Dim], spec: Spec, what: str) -> tuple[Dim, ...]:
        return tuple(self.local_dim(n, a, what) for n, a in zip(shape, spec))

    # --- collectives ----------------------------------------------------------------------------
    def _collective(self, kind: str, axis: str, src: Node, shape, of: Node, dim: int = 0) -> Node:
        name = f"__c{len(self.collectives)}"
        result = make_node("Input", dtype=src.dtype, name=name, shape=tuple(shape))
        self.collectives.append(CollectiveStep(kind, axis, src, name, dim, of))
        return result

    def completed(self, node: Node) -> _Value:
        """The node's local value with any partial reduction finished (AllReduce)."""
        v = self.values[node.id]
        if v.partial is None:
            return v
        self.reduced[node.id] = f"{v.partial} over {v.partial_axis}"
        done = self._collective(v.partial, v.partial_axis, v.node, v.node.shape, node)
        self.values[node.id] = v = _Value(done, v.spec)
        return v

    def replicated(self, node: Node) -> Node:
        """The whole node on every device: each sharded dim gathered over its axis."""
        v = self.completed(node)
        local, spec = v.node, list(v.spec)
        for d, entry in enumerate(spec):
            if entry is None:
                continue
            axis, blocks = split_entry(entry)
            shape = list(local.shape)
            shape[d] = node.shape[d]  # the other dims stay as they are (local, or already gathered)
            local = self._collective("AllGather", axis, local, shape, node, d)
            if blocks > 1:  # gathered as (device, block, part): put it back as (block, device, part)
                m, n = self.mesh.sizes[axis], node.shape[d]
                t = Tensor(Edge(local, ViewStack.of_buffer(local.shape)))
                split = tuple(shape[:d]) + (m, blocks, n // (m * blocks)) + tuple(shape[d + 1:])
                order = list(range(len(split)))
                order[d], order[d + 1] = d + 1, d
                local = t.reshape(split).permute(*order).reshape(tuple(shape)).contiguous().node
            spec[d] = None
        return local

    # --- edges ----------------------------------------------------------------------------------
    @staticmethod
    def axis_map(edge: Edge) -> Optional[list[Optional[int]]]:
        """For each dim of the edge, the source dim it reads whole (None: a broadcast), when the edge is
        a permutation/broadcast/unsqueeze of its source (read off the flat index the views compute:
        no offset, no mask, one distinct source stride per dim); else None."""
        found = axis_map(edge.views, tuple(edge.node.shape))
        return None if found is None else list(found)

    def natural_spec(self, edge: Edge) -> Optional[Spec]:
        mapping = self.axis_map(edge)
        if mapping is None:
            remap = self._remap(edge)
            return self._symbolic_spec(edge) if remap is None else remap[0]
        spec = self.values[edge.node.id].spec
        return tuple(None if j is None else spec[j] for j in mapping)

    def _remap(self, edge: Edge) -> Optional[tuple[Spec, ViewStack]]:
        """The edge's sharding and its views over local buffers, view by view (each view reads the
        row-major flattening of the one below): see _view_remap. None where a view needs a
        device-dependent read."""
        spec = self.values[edge.node.id].spec
        shape, local = tuple(edge.node.shape), []
        for view in edge.views.views:
            remapped = self._view_remap(view, shape, spec)
            if remapped is None:
                return None
            spec, local_view = remapped
            local.append(local_view)
            shape = tuple(view.shape)
        return (spec, ViewStack(tuple(local))) if any(a is not None for a in spec) else None

    def _view_remap(self, view, src_shape, src_spec) -> Optional[tuple[Spec, object]]:
        """One view (no offset) over a contiguous buffer: each output dim steps through one source dim
        (a split or a plain read: r units at a time) or a run of whole source dims (a merge, as a
        reshape). A sharded source dim must be read whole by the output dim that covers its top; that
        dim is then sharded alike, at its local size; every stride becomes the local stride of its
        source dim, so the view reads each device's block exactly as the global view reads the whole."""
        src_shape, src_spec = unblocked(src_shape, src_spec)
        strides = contiguous_strides(src_shape)
        local_src = self.local_shape(src_shape, src_spec, "a view")
        local_strides = contiguous_strides(local_src)
        offset = starts(view.offset, src_shape, strides)  # an offset is where a slice starts, per source dim
        if offset is None or any(k and src_spec[j] is not None for j, k in enumerate(offset)):
            return None
        spec, shape, new_strides, mask = [], list(view.shape), [], list(view.ranges())
        covered = set()
        for e, (n, c) in enumerate(zip(view.shape, view.strides)):
            if c == 0 or dims_equal(n, 1):
                spec.append(None)
                new_strides.append(0 if c == 0 else c)
                if c != 0 and not any(a is not None for a in src_spec):
                    new_strides[-1] = c
                elif c != 0:
                    return None  # a size-1 dim with a stride: ambiguous under sharding
                continue
            found = next(((j, r) for j in reversed(range(len(src_shape))) if (r := ratio(c, strides[j])) is not None
                          and (j == 0 or ratio(c, strides[j - 1]) is None)), None)
            if found is None:
                return None
            j, r = found
            group, extent = [j], r * n  # the source dims this output dim walks, innermost last
            while not fits(extent, src_shape[group[0]]) and group[0] > 0 and r == 1:
                extent = ratio(extent, src_shape[group[0]])
                if extent is None:
                    return None
                group.insert(0, group[0] - 1)
            if not fits(extent, src_shape[group[0]]):
                return None
            axes = [src_spec[g] for g in group]
            if any(a is not None for a in axes[1:]):
                return None  # a sharded dim inside a merge: its block is not contiguous
            axis, top = axes[0], group[0]
            if axis is not None and dims_equal(extent, src_shape[top]):  # the piece covering the top carries it
                if top in covered or not (dims_equal(mask[e][0], 0) and dims_equal(mask[e][1], n)):
                    return None
                try:
                    shape[e] = self.local_dim(n, axis, "a view")
                except ShapeError:
                    return None
                covered.add(top)
                mask[e] = (0, shape[e])
            elif axis is not None:  # an inner piece of a sharded dim: the same within every device's block
                block = local_src[top]
                if not (isinstance(extent, int) and isinstance(block, int) and block % extent == 0):
                    return None
                axis = None
            spec.append(axis)
            new_strides.append(dim(local_strides[j] * r))
        if any(a is not None and j not in covered for j, a in enumerate(src_spec)):
            return None  # a sharded dim the view drops or reads in part
        local_offset = dim(sum((k * local_strides[j] for j, k in enumerate(offset)), 0))
        return tuple(spec), View(tuple(shape), tuple(new_strides), local_offset).with_mask(mask)

    def _symbolic_spec(self, edge: Edge) -> Optional[Spec]:
        """Any view (a slice, pad, stack of other dims) keeps a sharding of *symbolic* dims when each
        sharded source dim is read whole by one dim of the edge and nothing else of the view depends
        on it: the local view is then the global one with `B` read as `B_dp` (see local_edge)."""
        spec, src_shape, shape = self.values[edge.node.id].spec, edge.node.shape, edge.shape
        sharded = [j for j, a in enumerate(spec) if a is not None]
        if not sharded or not all(isinstance(src_shape[j], sympy.Symbol) for j in sharded):
            return None
        if any(mentions(src_shape[:j] + src_shape[j + 1:], src_shape[j]) for j in sharded):
            return None  # the symbol sizes an unsplit dim too: replacing it would shrink that one as well
        idx = [sympy.Symbol(f"i{e}", integer=True, nonnegative=True) for e in range(len(shape))]
        flat, valid = index_of(edge.views, idx, {i: n for i, n in zip(idx, shape)})
        flat, strides = sympy.expand(flat), contiguous_strides(src_shape)
        out: list = [None] * len(shape)
        for j in sharded:
            e = next((e for e, i in enumerate(idx) if shape[e] == src_shape[j] and sympy.expand(flat.coeff(i) - strides[j]) == 0
                      and out[e] is None), None)
            if e is None:
                return None
            rest = sympy.expand(flat - strides[j] * idx[e])
            if idx[e] in rest.free_symbols or idx[e] in sympy.sympify(valid).free_symbols:
                return None
            out[e] = spec[j]
        for e, n in enumerate(shape):  # the sharded symbols appear nowhere else in the edge's shape
            if out[e] is None and any(src_shape[j].name in {x.name for x in sympy.sympify(n).free_symbols} for j in sharded):
                return None
        return tuple(out)

    def local_edge(self, edge: Edge, target: Spec) -> Optional[Edge]:
        """The edge over local shapes, its dims sharded as `target`; None where that needs a device-
        dependent slice (the caller gathers instead)."""
        v = self.completed(edge.node)
        if all(a is None for a in v.spec):
            if all(a is None for a in target):
                return Edge(v.node, edge.views)  # a replicated source reads through the global views as they are
            return self._broadcast_edge(edge, v.node, target)
        mapping = self.axis_map(edge)
        if mapping is None:
            remap = self._remap(edge)
            if remap is not None and remap[0] == tuple(target):
                return Edge(v.node, remap[1])
            if self._symbolic_spec(edge) != tuple(target):
                return None
            names = {sympy.Symbol(n.name, integer=True, positive=True): self.local_dim(n, a, edge.node.label)
                     for n, a in zip(edge.node.shape, v.spec) if a is not None}
            return Edge(v.node, subs(edge.views, names))
        for d, j in enumerate(mapping):
            have = None if j is None else v.spec[j]
            if have != target[d] and not (j is None and have is None):
                return None
        t = Tensor(Edge(v.node, ViewStack.of_buffer(v.node.shape)))
        order = [j for j in mapping if j is not None]
        dropped = [j for j in range(len(v.node.shape)) if j not in order]
        t = t.reshape(tuple(n for j, n in enumerate(v.node.shape) if j not in dropped)) if dropped else t
        kept = [j for j in range(len(v.node.shape)) if j not in dropped]
        t = t.permute(*[kept.index(j) for j in order]) if order != sorted(order) else t
        local = self.local_shape(edge.shape, target, edge.node.label)
        t = t.reshape(tuple(local[d] if j is not None else 1 for d, j in enumerate(mapping)))
        return t.broadcast_to(local).edge

    def _broadcast_edge(self, edge: Edge, local: Node, target: Spec) -> Optional[Edge]:
        """A replicated source read along dims the target shards: fine where the edge only broadcasts
        along them (its index and mask ignore them): the same views, those dims at their local size."""
        idx = [sympy.Symbol(f"i{e}", integer=True, nonnegative=True) for e in range(len(edge.shape))]
        flat, valid = index_of(edge.views, idx, {i: n for i, n in zip(idx, edge.shape)})
        depends = sympy.sympify(flat).free_symbols | sympy.sympify(valid).free_symbols
        sharded = [e for e, a in enumerate(target) if a is not None]
        if any(idx[e] in depends for e in sharded):
            return None
        local_shape = self.local_shape(edge.shape, target, edge.node.label)
        if all(isinstance(edge.shape[e], sympy.Symbol) and not mentions(
                tuple(n for k, n in enumerate(edge.shape) if k != e) + tuple(edge.node.shape), edge.shape[e]) for e in sharded):
            return Edge(local, subs(edge.views, {edge.shape[e]: local_shape[e] for e in sharded}))
        if len(edge.views.views) != 1:
            return None
        view = edge.views.views[0]
        shape, mask = list(view.shape), list(view.ranges())
        for e in sharded:
            if not (dims_equal(mask[e][0], 0) and dims_equal(mask[e][1], shape[e])):
                return None
            shape[e], mask[e] = local_shape[e], (0, local_shape[e])
        return Edge(local, ViewStack((View(tuple(shape), view.strides, view.offset).with_mask(mask),)))

    def _sliced_edge(self, edge: Edge, target: Spec, whole: Optional[Node] = None) -> Optional[Edge]:
        """A replicated float value read as a block of each target-split dim: rows picked by ids that
        depend on the device (the runner feeds every device its `__block_<axis>_<n>` ids, its block's
        positions), so the same local program reads each device's block without communicating."""
        if whole is None:  # else: the source gathered whole already (rc.shard of a value laid out otherwise)
            v = self.completed(edge.node)
            if any(a is not None for a in v.spec):
                return None
            whole = v.node
        if edge.node.dtype == "int32":
            return None
        t = Tensor(Edge(whole, edge.views))
        for e, entry in enumerate(target):
            axis, blocks = split_entry(entry)
            if axis is None:
                continue
            n = edge.shape[e]
            if blocks > 1 or not (isinstance(n, int) or isinstance(n, sympy.Symbol)) or not self.divides(n, entry):
                return None
            name = f"__block_{axis}_{n}"
            self.block_inputs[name] = (axis, n)
            ids = make_node("Input", dtype="int32", name=name, shape=(self.local_dim(n, entry, edge.node.label),))
            t = t.index_select(e, Tensor(Edge(ids, ViewStack.of_buffer(ids.shape))))
        return t.edge

    # --- nodes ----------------------------------------------------------------------------------
    def visit(self, node: Node) -> None:
        op = node.op
        if op.name == "Input":
            name = node.attrs["name"]
            spec = self.input_specs.get(name) or (None,) * len(node.shape)
            shape = self.local_shape(node.shape, spec, f"input {name!r}")
            self.values[node.id] = _Value(make_node("Input", dtype=node.dtype, name=name, shape=shape), spec)
        elif op.kind == LEAF:  # Constant, Iota: the same everywhere
            self.values[node.id] = _Value(node, (None,) * len(node.shape))
        elif op.kind == REDUCE:
            self._reduce(node)
        elif op.kind in ELEMENTWISE:
            self._elementwise(node)
        elif op.kind == GATHER:
            self._gather(node)
        else:
            raise ShapeError(f"SPMD: {node.label} ({op.kind}) has no sharding rule")

    def _reduce(self, node: Node) -> None:
        edge, axis = node.srcs[0], node.attrs["axis"]
        spec = self.natural_spec(edge)
        local = self.local_edge(edge, spec) if spec is not None else None
        if local is None:
            spec = (None,) * len(edge.shape)
            local = Edge(self.replicated(edge.node), edge.views)
        out = make_node(node.op.name, (local,), **node.attrs)
        reduced = split_entry(spec[axis])[0]
        self.values[node.id] = _Value(out, spec[:axis] + spec[axis + 1:], REDUCE_KIND[node.op.name] if reduced else None, reduced)

    def _elementwise(self, node: Node) -> None:
        target = [None] * len(node.shape)  # the operands' shardings merged where they do not clash
        for spec in (s for s in (self.natural_spec(e) for e in node.srcs) if s is not None):
            for d, axis in enumerate(spec):
                used = {split_entry(a)[0] for a in target if a is not None}
                if axis is not None and target[d] is None and split_entry(axis)[0] not in used and self.divides(node.shape[d], axis):
                    target[d] = axis
        target = tuple(target)
        if node.op.name == "Contiguous" and node.attrs.get("sharding") is not None:  # rc.shard: the user says
            target = self.mesh.check_spec(node.attrs["sharding"], len(node.shape), f"rc.shard of {node.label}")
        edges = [self.local_edge(e, target) or self._adopt(e, target) or self._sliced_edge(e, target) for e in node.srcs]
        if node.op.name == "Contiguous" and node.attrs.get("sharding") is not None and edges[0] is None:
            whole = self.replicated(node.srcs[0].node)  # laid out otherwise: gathered whole, then each device's block
            edges = [self._sliced_edge(node.srcs[0], target, whole)]
        self.read.update(e.node.id for e in node.srcs)
        if any(e is None for e in edges):  # operands disagree: compute it whole on every device
            target = (None,) * len(node.shape)
            edges = [Edge(self.replicated(e.node), e.views) for e in node.srcs]
        self.values[node.id] = _Value(make_node(node.op.name, tuple(edges), **node.attrs), target)

    def _scatter_partial_output(self, edge: Edge) -> None:
        """An output left as partial sums needs no device to hold the whole sum: a ReduceScatter (half an
        all-reduce's traffic) leaves each device its block of one dim, and the runner assembles them."""
        v = self.values[edge.node.id]
        mapping = self.axis_map(edge)
        if v.partial != "AllReduceSum" or mapping is None:
            return
        size = self.mesh.sizes[v.partial_axis]
        free = [j for j in mapping if j is not None and v.spec[j] is None and isinstance(edge.node.shape[j], int)
                and edge.node.shape[j] % size == 0]
        if not free:
            return
        j = free[-1]  # the innermost: each device's block stays contiguous rows of it
        shape = list(v.node.shape)
        shape[j] = shape[j] // size
        self.reduced[edge.node.id] = f"ReduceScatter over {v.partial_axis}"
        done = self._collective("ReduceScatter", v.partial_axis, v.node, shape, edge.node, j)
        self.values[edge.node.id] = _Value(done, v.spec[:j] + (v.partial_axis,) + v.spec[j + 1:])

    def _adopt(self, edge: Edge, target: Spec) -> Optional[Edge]:
        """A weight nobody has read yet, left to the search (flexible), is laid out as this reader needs
        it: weights are laid out once, at load time, so any layout is free."""
        node = edge.node
        if node.op.name != "Input" or node.attrs["name"] not in self.flexible or node.id in self.read:
            return None
        mapping = self.axis_map(edge)
        if mapping is None:
            return None
        spec = [None] * len(node.shape)
        for e, j in enumerate(mapping):
            if j is not None:
                spec[j] = target[e]
        try:
            local_shape = self.local_shape(node.shape, spec, f"input {node.attrs['name']!r}")
        except ShapeError:
            return None
        self.flexible.discard(node.attrs["name"])
        self.input_specs[node.attrs["name"]] = tuple(spec)
        self.values[node.id] = _Value(make_node("Input", dtype=node.dtype, name=node.attrs["name"], shape=local_shape), tuple(spec))
        return self.local_edge(edge, target)

    def _gather(self, node: Node) -> None:
        table, ids = node.srcs
        spec = self.natural_spec(ids)
        ids_local = self.local_edge(ids, spec) if spec is not None else None
        if ids_local is None:
            spec, ids_local = (None,) * len(ids.shape), Edge(self.replicated(ids.node), ids.views)
        table_local = Edge(self.replicated(table.node), table.views)
        out = make_node("Gather", (table_local, ids_local))
        self.values[node.id] = _Value(out, tuple(spec) + (None,) * (len(node.shape) - len(ids.shape)))

    def output(self, edge: Edge) -> tuple[Edge, Spec]:
        self._scatter_partial_output(edge)
        spec = self.natural_spec(edge)
        plain = spec is not None and all(split_entry(a)[1] == 1 for a in spec)  # outputs are assembled from plain splits
        local = self.local_edge(edge, spec) if plain else None
        if local is None:
            spec, local = (None,) * len(edge.shape), Edge(self.replicated(edge.node), edge.views)
        return local, spec


def propagate(edges: Sequence[Edge], mesh: Mesh, input_specs: dict[str, Spec], flexible=frozenset()) -> LocalGraph:
    """The local graph of `edges` (the global outputs) on `mesh`, inputs sharded as `input_specs`;
    inputs named in `flexible` take the layout their first reader needs."""
    p = Propagation(mesh, dict(input_specs), frozenset(flexible))
    for node in toposort([e.node for e in edges]):
        p.visit(node)
    outputs, specs = zip(*(p.output(e) for e in edges)) if edges else ((), ())
    inputs = {n.attrs["name"]: p.values[n.id].spec for n in toposort([e.node for e in edges]) if n.op.name == "Input"}
    order = toposort([e.node for e in edges])
    described = [(n, p.values[n.id].spec, p.reduced.get(n.id)) for n in order if n.op.kind != LEAF or n.op.name == "Input"]
    return LocalGraph(mesh, list(outputs), list(specs), inputs, p.collectives, p.local_symbols, described, p.block_inputs)

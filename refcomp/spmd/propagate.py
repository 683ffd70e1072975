"""Sharding propagation: the global graph, the shardings of its inputs and a mesh -> one *local* graph
that every device runs, and the collectives between its parts.

Each global node becomes one local node over local shapes (a sharded dim is divided by its mesh axis:
an int exactly, a symbol `B` by a new symbol `B_dp` that the runner binds to B / dp; a name no dim
of the graph has, see edges.local_symbol_names). The rules:

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

from ..errors import ShapeError
from ..ops.graph import symbols_of, toposort
from ..ops.primitives import ELEMENTWISE, GATHER, LEAF, REDUCE, SCATTER, Edge, Node, make_node
from ..ops.tensor import Tensor
from ..symbolic.view import ViewStack
from .edges import LocalEdges, local_symbol_names, permuted_views
from .mesh import Mesh, Spec, split_entry

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
    dim2: int = 0  # AllToAll: the dim each device concatenates what it receives along (`dim`: the one split)


@dataclass
class LocalGraph:
    mesh: Mesh
    outputs: list[Edge]  # local edges, one per global output
    output_specs: list[Spec]
    input_specs: dict[str, Spec]  # every global input by name, as sharded
    collectives: list[CollectiveStep] = field(default_factory=list)
    local_symbols: dict[str, tuple[str, str]] = field(default_factory=dict)  # "B_dp" -> ("B", "dp")
    node_specs: list = field(
        default_factory=list
    )  # (global node, its sharding, the AllReduce completing it) in order
    block_inputs: dict = field(
        default_factory=dict
    )  # per-device block ids the runner feeds (see _sliced_edge)


@dataclass
class _Value:
    node: Node  # the local node
    spec: Spec  # per dim of the global node's shape
    partial: Optional[str] = None  # "AllReduceSum" / "AllReduceMax" pending over `partial_axis`
    partial_axis: Optional[str] = None


class Propagation(LocalEdges):
    def __init__(
        self,
        mesh: Mesh,
        input_specs: dict[str, Spec],
        local_names: dict,
        flexible: frozenset = frozenset(),
        shared: Optional[dict] = None,
    ):
        self.mesh, self.input_specs = mesh, input_specs
        self.local_names = local_names  # (dim, axis) -> its local symbol's name
        self.shared = {} if shared is None else shared
        self.flexible = set(flexible)  # weights that take the layout their first reader needs (see _adopt)
        self.read: set[int] = set()
        self.reduced: dict[int, str] = {}  # node id -> the collective that completed its partial value
        self.remaps: dict = {}  # LocalEdges._remap's memo
        self.exchanges: dict = {}  # (global node id, old dim, new dim) -> its AllToAll's result
        self.block_inputs: dict[
            str, tuple
        ] = {}  # "__block_tp_512" -> ("tp", 512): per-device ids the runner feeds
        self.values: dict[int, _Value] = {}
        self.collectives: list[CollectiveStep] = []
        self.local_symbols: dict[str, tuple[str, str]] = {}

    def _collective(
        self, kind: str, axis: str, src: Node, shape, of: Node, dim: int = 0, dim2: int = 0
    ) -> Node:
        name = f"__c{len(self.collectives)}"
        result = make_node("Input", dtype=src.dtype, name=name, shape=tuple(shape))
        self.collectives.append(CollectiveStep(kind, axis, src, name, dim, of, dim2))
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
        elif op.kind == SCATTER:  # computed whole on every device: its table, ids and rows gathered
            srcs = tuple(Edge(self.replicated(e.node), e.views) for e in node.srcs)
            self.values[node.id] = _Value(make_node("Scatter", srcs), (None,) * len(node.shape))
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
        self.values[node.id] = _Value(
            out, spec[:axis] + spec[axis + 1 :], REDUCE_KIND[node.op.name] if reduced else None, reduced
        )

    def _elementwise(self, node: Node) -> None:
        target = [None] * len(node.shape)  # the operands' shardings merged where they do not clash
        for spec in (s for s in (self.natural_spec(e) for e in node.srcs) if s is not None):
            for d, axis in enumerate(spec):
                used = {split_entry(a)[0] for a in target if a is not None}
                if (
                    axis is not None
                    and target[d] is None
                    and split_entry(axis)[0] not in used
                    and self.divides(node.shape[d], axis)
                ):
                    target[d] = axis
        target = tuple(target)
        if node.op.name == "Contiguous" and node.attrs.get("sharding") is not None:  # rc.shard: the user says
            target = self.mesh.check_spec(
                node.attrs["sharding"], len(node.shape), f"rc.shard of {node.label}"
            )
        edges = [self._scattered(e, target) or self.local_edge(e, target) or self._adopt(e, target)
                 or self._sliced_edge(e, target) or self._exchanged(e, target) for e in node.srcs]
        if node.op.name == "Contiguous" and node.attrs.get("sharding") is not None and edges[0] is None:
            whole = self.replicated(
                node.srcs[0].node
            )  # laid out otherwise: gathered whole, then each device's block
            edges = [self._sliced_edge(node.srcs[0], target, whole)]
        self.read.update(e.node.id for e in node.srcs)
        if any(e is None for e in edges):  # operands disagree: compute it whole on every device
            target = (None,) * len(node.shape)
            edges = [Edge(self.replicated(e.node), e.views) for e in node.srcs]
        self.values[node.id] = _Value(make_node(node.op.name, tuple(edges), **node.attrs), target)

    def _scattered(self, edge: Edge, target: Spec) -> Optional[Edge]:
        """Partial sums over mesh axis X read by a node that splits one of their dims over X: a
        ReduceScatter along that dim leaves each device the block it reads, for half the traffic of
        the all-reduce that would complete the sum everywhere (a reader that needs it whole later
        gathers the blocks: an all-reduce's traffic in all)."""
        v, mapping = self.values[edge.node.id], self.axis_map(edge)
        if v.partial != "AllReduceSum" or mapping is None:
            return None
        wanted = [j for d, j in enumerate(mapping) if j is not None and target[d] == v.partial_axis]
        if (
            not wanted
            or v.spec[wanted[0]] is not None
            or not self.divides(edge.node.shape[wanted[0]], v.partial_axis)
        ):
            return None
        self._reduce_scatter(edge.node, wanted[0])
        return self.local_edge(edge, target)

    def _reduce_scatter(self, node: Node, k: int) -> None:
        """Complete the node's partial sums by a ReduceScatter along its dim k: each device keeps its
        block of k (half an all-reduce's traffic), the value now split there."""
        v = self.values[node.id]
        shape = list(v.node.shape)
        shape[k] = self.local_dim(node.shape[k], v.partial_axis, node.label)
        self.reduced[node.id] = f"ReduceScatter over {v.partial_axis}"
        done = self._collective("ReduceScatter", v.partial_axis, v.node, shape, node, k)
        self.values[node.id] = _Value(done, v.spec[:k] + (v.partial_axis,) + v.spec[k + 1:])

    def _exchanged(self, edge: Edge, target: Spec) -> Optional[Edge]:
        """A value split over mesh axis X along one dim, read by a node that splits another of its dims
        over X: an AllToAll moves the split (each device sends part i of the new dim to device i and
        concatenates what it receives along the old one), (n-1)/n of one block per device, where
        gathering the value would send n-1 blocks."""
        v, mapping = self.completed(edge.node), self.axis_map(edge)
        if mapping is None:
            return None
        want: list = [None] * len(v.spec)
        for d, j in enumerate(mapping):
            if j is not None:
                want[j] = target[d]
        moved = [j for j in range(len(want)) if want[j] != v.spec[j]]
        if len(moved) != 2:
            return None
        old, new = sorted(moved, key=lambda j: want[j] is not None)  # old: split now, unsplit wanted
        axis = v.spec[old]
        if (axis is None or want[old] is not None or want[new] != axis or v.spec[new] is not None
                or split_entry(axis)[1] != 1 or not self.divides(edge.node.shape[new], axis)):
            return None
        key = (edge.node.id, old, new)
        if key not in self.exchanges:  # one AllToAll per value and move, however many read it so
            shape = list(v.node.shape)
            shape[old], shape[new] = (
                edge.node.shape[old],
                self.local_dim(edge.node.shape[new], axis, edge.node.label),
            )
            self.exchanges[key] = self._collective("AllToAll", axis, v.node, shape, edge.node, new, old)
        exchanged = self.exchanges[key]
        local = self.local_shape(edge.shape, target, edge.node.label)
        return Edge(exchanged, permuted_views(tuple(exchanged.shape), mapping, local))

    def _scatter_partial_output(self, edge: Edge) -> None:
        """An output left as partial sums needs no device to hold the whole sum: a ReduceScatter (half an
        all-reduce's traffic) leaves each device its block of one dim, and the runner assembles them."""
        v = self.values[edge.node.id]
        mapping = self.axis_map(edge)
        if v.partial != "AllReduceSum" or mapping is None:
            return
        size = self.mesh.sizes[v.partial_axis]
        free = [
            j
            for j in mapping
            if j is not None
            and v.spec[j] is None
            and isinstance(edge.node.shape[j], int)
            and edge.node.shape[j] % size == 0
        ]
        if free:
            self._reduce_scatter(
                edge.node, free[-1]
            )  # the innermost: each device's block stays contiguous rows of it

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
        self.values[node.id] = _Value(
            make_node("Input", dtype=node.dtype, name=node.attrs["name"], shape=local_shape), tuple(spec)
        )
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
        plain = spec is not None and all(
            split_entry(a)[1] == 1 for a in spec
        )  # outputs are assembled from plain splits
        local = self.local_edge(edge, spec) if plain else None
        if local is None:
            spec, local = (None,) * len(edge.shape), Edge(self.replicated(edge.node), edge.views)
        return local, spec


def propagate(edges: Sequence[Edge], mesh: Mesh, input_specs: dict[str, Spec], flexible=frozenset(),
              shared: Optional[dict] = None) -> LocalGraph:
    """The local graph of `edges` (the global outputs) on `mesh`, inputs sharded as `input_specs`;
    inputs named in `flexible` take the layout their first reader needs. `shared` memoises, across the
    propagations of one graph, what depends on that graph alone (the sharding search passes one)."""
    shared = {} if shared is None else shared
    if "local names" not in shared:
        dims = {s.name for s in symbols_of(toposort([e.node for e in edges]), edges)}
        shared["local names"] = local_symbol_names(dims, [a for a, _ in mesh.axes])
    p = Propagation(mesh, dict(input_specs), shared["local names"], frozenset(flexible), shared)
    for node in toposort([e.node for e in edges]):
        p.visit(node)
    outputs, specs = zip(*(p.output(e) for e in edges)) if edges else ((), ())
    inputs = {
        n.attrs["name"]: p.values[n.id].spec
        for n in toposort([e.node for e in edges])
        if n.op.name == "Input"
    }
    order = toposort([e.node for e in edges])
    described = [
        (n, p.values[n.id].spec, p.reduced.get(n.id))
        for n in order
        if n.op.kind != LEAF or n.op.name == "Input"
    ]
    return LocalGraph(
        mesh, list(outputs), list(specs), inputs, p.collectives, p.local_symbols, described, p.block_inputs
    )

"""Reading the global graph's edges on one device: local dims and shapes, and each edge of the global
graph as an edge over local buffers, sharded as its reader needs (spmd.propagate's rules ask).

An edge keeps a sharding when its views read each sharded source dim whole (`axis_map`, or view by
view through splits, merges, slices and blocked dims: `_remap`), when it only broadcasts along the
dims its reader splits (`_broadcast_edge`), or when a replicated value is read in blocks by ids the
runner feeds each device (`_sliced_edge`). Where none applies, local_edge says None and the caller
gathers.
"""
from __future__ import annotations

from typing import Optional, Sequence

import sympy

from ..errors import ShapeError
from ..ops.primitives import Edge, Node, make_node
from ..ops.tensor import Tensor
from ..symbolic.dims import Dim, dim, dims_equal, symbol
from ..symbolic.index import index_of
from ..symbolic.view import View, ViewStack, contiguous_strides
from .mesh import Spec, split_entry
from .views import axis_map, fits, mentions, ratio, starts, subs, unblocked


def local_symbol_names(dims, axes) -> dict[tuple[str, str], str]:
    """The local symbol of each of the graph's dims split over each mesh axis: `B` over dp is `B_dp`,
    unless the graph has a dim of that name (or another pair took it first), then `B_dp_2`, `B_dp_3`...
    Runs bind dims by name, so a local name equal to a user's dim would silently give one the other's
    value. A function of the dims and axes alone (sorted), so every propagation of a graph, every
    candidate of its search and every MPI rank names alike."""
    taken, names = set(dims), {}
    for g in sorted(dims):
        for axis in axes:
            name, k = f"{g}_{axis}", 1
            while name in taken:
                k += 1
                name = f"{g}_{axis}_{k}"
            taken.add(name)
            names[g, axis] = name
    return names


class LocalEdges:
    """What Propagation knows of local dims and edges; it supplies `mesh`, `values` (global node id ->
    its local value and sharding), `local_symbols`, `local_names` (local_symbol_names), `block_inputs`,
    `remaps` (a dict), `shared` (a dict
    that outlives one propagation: what depends on the global graph alone, shared by the candidates of
    one sharding search) and `completed` (a value with its partial sums finished)."""

    # --- local dims ---------------------------------------------------------------------------
    def local_dim(self, n: Dim, entry: Optional[str], what: str) -> Dim:
        if entry is None:
            return n
        axis, blocks = split_entry(entry)
        size = self.mesh.sizes[axis]
        if isinstance(n, int):
            if n % (size * blocks):
                raise ShapeError(
                    f"{what}: a dim of {n} does not split evenly over mesh axis {axis!r} of size {size}"
                    + (f" in {blocks} blocks" if blocks > 1 else "")
                )
            return n // size
        if blocks > 1:
            raise ShapeError(f"{what}: only a dim of known size can be split in blocks, not {n}")
        if isinstance(n, sympy.Symbol):
            name = self.local_names[n.name, axis]
            self.local_symbols[name] = (n.name, axis)
            return symbol(name)
        raise ShapeError(f"{what}: the dim {n} is an expression; only ints and plain symbols can be sharded")

    def divides(self, n: Dim, entry: str) -> bool:
        """Whether a dim of size n can be split as `entry` says (a symbol: checked when it is bound)."""
        axis, blocks = split_entry(entry)
        return (isinstance(n, sympy.Symbol) and blocks == 1) or (
            isinstance(n, int) and n % (self.mesh.sizes[axis] * blocks) == 0
        )

    def local_shape(self, shape: Sequence[Dim], spec: Spec, what: str) -> tuple[Dim, ...]:
        return tuple(self.local_dim(n, a, what) for n, a in zip(shape, spec))

    # --- collectives ----------------------------------------------------------------------------
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
        device-dependent read. Memoised: a reader asks for its sharding, then for the edge itself."""
        spec = self.values[edge.node.id].spec
        key = (id(edge), spec)  # the global graph holds every edge while it is propagated
        if key not in self.remaps:
            self.remaps[key] = self._remap_views(edge, spec)
        return self.remaps[key]

    def _remap_views(self, edge: Edge, spec: Spec) -> Optional[tuple[Spec, ViewStack]]:
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
            found = next(
                (
                    (j, r)
                    for j in reversed(range(len(src_shape)))
                    if (r := ratio(c, strides[j])) is not None
                    and (j == 0 or ratio(c, strides[j - 1]) is None)
                ),
                None,
            )
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
            if axis is not None and dims_equal(
                extent, src_shape[top]
            ):  # the piece covering the top carries it
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
            e = next(
                (
                    e
                    for e, i in enumerate(idx)
                    if shape[e] == src_shape[j]
                    and sympy.expand(flat.coeff(i) - strides[j]) == 0
                    and out[e] is None
                ),
                None,
            )
            if e is None:
                return None
            rest = sympy.expand(flat - strides[j] * idx[e])
            if idx[e] in rest.free_symbols or idx[e] in sympy.sympify(valid).free_symbols:
                return None
            out[e] = spec[j]
        for e, n in enumerate(shape):  # the sharded symbols appear nowhere else in the edge's shape
            if out[e] is None and any(
                src_shape[j].name in {x.name for x in sympy.sympify(n).free_symbols} for j in sharded
            ):
                return None
        return tuple(out)

    def local_edge(self, edge: Edge, target: Spec) -> Optional[Edge]:
        """The edge over local shapes, its dims sharded as `target`; None where that needs a device-
        dependent slice (the caller gathers instead)."""
        v = self.completed(edge.node)
        if all(a is None for a in v.spec):
            if all(a is None for a in target):
                return Edge(
                    v.node, edge.views
                )  # a replicated source reads through the global views as they are
            return self._broadcast_edge(edge, v.node, target)
        mapping = self.axis_map(edge)
        if mapping is None:
            remap = self._remap(edge)
            if remap is not None and remap[0] == tuple(target):
                return Edge(v.node, remap[1])
            if self._symbolic_spec(edge) != tuple(target):
                return None
            names = {symbol(n.name): self.local_dim(n, a, edge.node.label)
                     for n, a in zip(edge.node.shape, v.spec) if a is not None}
            return Edge(v.node, subs(edge.views, names))
        for d, j in enumerate(mapping):
            have = None if j is None else v.spec[j]
            if have != target[d] and not (j is None and have is None):
                return None
        local = self.local_shape(edge.shape, target, edge.node.label)
        key = ("permuted", tuple(v.node.shape), tuple(mapping), local)
        if key not in self.shared:  # the same local read recurs in every candidate the search prices
            self.shared[key] = permuted_views(tuple(v.node.shape), mapping, local)
        return Edge(v.node, self.shared[key])

    def _broadcast_edge(self, edge: Edge, local: Node, target: Spec) -> Optional[Edge]:
        """A replicated source read along dims the target shards: fine where the edge only broadcasts
        along them (its index and mask ignore them): the same views, those dims at their local size."""
        local_shape = self.local_shape(edge.shape, target, edge.node.label)
        key = (
            "broadcast",
            edge,
            local_shape,
        )  # the edge object itself: the memo keeps the global graph alive
        if key not in self.shared:  # the same read recurs in every candidate the search prices
            self.shared[key] = _broadcast_views(edge, target, local_shape)
        views = self.shared[key]
        return None if views is None else Edge(local, views)

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
            if (
                blocks > 1
                or not (isinstance(n, int) or isinstance(n, sympy.Symbol))
                or not self.divides(n, entry)
            ):
                return None
            name = f"__block_{axis}_{n}"
            self.block_inputs[name] = (axis, n)
            ids = make_node(
                "Input", dtype="int32", name=name, shape=(self.local_dim(n, entry, edge.node.label),)
            )
            t = t.index_select(e, Tensor(Edge(ids, ViewStack.of_buffer(ids.shape))))
        return t.edge


def permuted_views(shape: tuple, mapping: Sequence[Optional[int]], local: tuple) -> ViewStack:
    """The views that read a local buffer of `shape` as `local`: dim d of the result reads source dim
    mapping[d] whole, or broadcasts (None); source dims of size 1 that no dim reads are dropped."""
    t = Tensor(
        Edge(make_node("Input", dtype="float32", name="__local", shape=shape), ViewStack.of_buffer(shape))
    )
    order = [j for j in mapping if j is not None]
    dropped = [j for j in range(len(shape)) if j not in order]
    t = t.reshape(tuple(n for j, n in enumerate(shape) if j not in dropped)) if dropped else t
    kept = [j for j in range(len(shape)) if j not in dropped]
    t = t.permute(*[kept.index(j) for j in order]) if order != sorted(order) else t
    t = t.reshape(tuple(local[d] if j is not None else 1 for d, j in enumerate(mapping)))
    return t.broadcast_to(local).edge.views


def _broadcast_views(edge: Edge, target: Spec, local_shape: tuple) -> Optional[ViewStack]:
    """LocalEdges._broadcast_edge's views: the edge's own, its target-split dims at their local size;
    None where its index or mask depends on one of those dims."""
    sharded = [e for e, a in enumerate(target) if a is not None]
    idx = [sympy.Symbol(f"i{e}", integer=True, nonnegative=True) for e in range(len(edge.shape))]
    flat, valid = index_of(edge.views, idx, {i: n for i, n in zip(idx, edge.shape)})
    depends = sympy.sympify(flat).free_symbols | sympy.sympify(valid).free_symbols
    if any(idx[e] in depends for e in sharded):
        return None
    if all(
        isinstance(edge.shape[e], sympy.Symbol)
        and not mentions(
            tuple(n for k, n in enumerate(edge.shape) if k != e) + tuple(edge.node.shape), edge.shape[e]
        )
        for e in sharded
    ):
        return subs(edge.views, {edge.shape[e]: local_shape[e] for e in sharded})
    if len(edge.views.views) != 1:
        return None
    view = edge.views.views[0]
    shape, mask = list(view.shape), list(view.ranges())
    for e in sharded:
        if not (dims_equal(mask[e][0], 0) and dims_equal(mask[e][1], shape[e])):
            return None
        shape[e], mask[e] = local_shape[e], (0, local_shape[e])
    return ViewStack((View(tuple(shape), view.strides, view.offset).with_mask(mask),))

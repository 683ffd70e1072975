"""Walking the graph: topological order, rebuilding it with nodes replaced, and the list/dict/single
shapes of user outputs.

A rewrite replaces a node by an *edge* (some node read through a view stack) of the same shape.
Consumers read the replaced node through their own view stacks; reading the replacement instead
means stacking the consumer's views on top of the replacement's, which `compose` does without
changing what any index reads. `rebuild` goes bottom-up, so everything downstream of a change is a
fresh node and everything unreachable from the outputs disappears (dead-code removal).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional, Sequence

import sympy

from ..errors import RefcompError
from ..symbolic.dims import dims_equal, free_symbols, prod
from ..symbolic.view import ViewStack
from .core import TensorCore
from .primitives import Edge, Node, make_node


def toposort(roots: list[Node]) -> list[Node]:
    """Every node the roots depend on, producers before consumers (iterative: graphs can be deep).
    A Scatter that overwrites its table in place comes after the Gathers that read the old table
    (`readers_first`): the order is also the order kernels run in."""
    order = _depth_first(roots, {})
    if any(n.op.kind == "scatter" for n in order):
        before = readers_first(roots, order)
        if before:
            order = _depth_first(roots, before)
    return order


class _Cycle(Exception):
    """The extra order asked of _depth_first cannot hold."""


def _depth_first(roots: Sequence[Node], before: Mapping[int, Sequence[Node]]) -> list[Node]:
    """Post-order of a depth-first walk, each node's sources (then the nodes `before` lists for it) first."""
    order: list[Node] = []
    seen: set[int] = set()
    done: set[int] = set()
    stack: list[tuple[Node, bool]] = [(n, False) for n in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            done.add(node.id)
            continue
        if node.id in seen:
            if node.id not in done:  # reached again while its own sources are being walked
                raise _Cycle(node.label)
            continue
        seen.add(node.id)
        stack.append((node, True))
        deps = [e.node for e in node.srcs] + list(before.get(node.id, ()))
        for dep in reversed(deps):
            if dep.id in seen and dep.id not in done:
                raise _Cycle(dep.label)
            if dep.id not in seen:
                stack.append((dep, False))
    return order


def readers_first(roots: Sequence[Node], nodes: Sequence[Node]) -> dict[int, tuple[Node, ...]]:
    """Scatter id -> the Gathers that read its table (the whole buffer, by node or by input name) and
    must run before the Scatter writes that buffer in place: every other reader of the table is such a
    Gather, and none depends on the Scatter. A Scatter whose table has any other reader (an output,
    another Scatter, an elementwise node a kernel may recompute later, itself) gets no entry, and
    own_scatter_tables gives it a copy. Empty if the order asked for cannot hold."""
    readers: dict[int, list] = {}
    by_name: dict[str, list[int]] = {}
    for n in nodes:
        for k, e in enumerate(n.srcs):
            readers.setdefault(e.node.id, []).append((n, k))
        if n.op.name == "Input":
            by_name.setdefault(n.attrs["name"], []).append(n.id)
    before: dict[int, tuple[Node, ...]] = {}
    for s in nodes:
        if s.op.kind != "scatter" or not _whole(s.srcs[0]):
            continue
        table = s.srcs[0].node
        ids = by_name[table.attrs["name"]] if table.op.name == "Input" else [table.id]
        others = [(r, k) for i in ids for r, k in readers.get(i, []) if not (r is s and k == 0)]
        if others and all(r is not s and r.op.kind == "gather" for r, _ in others) and \
                not any(_depends_on(r, s) for r, _ in others):
            before[s.id] = tuple({r.id: r for r, _ in others}.values())
    if before:
        try:
            _depth_first(roots, before)
        except _Cycle:
            return {}
    return before


def _whole(edge: Edge) -> bool:
    """The edge reads its node's whole buffer in order (a reshape at most)."""
    return edge.views.is_identity and dims_equal(prod(edge.shape), prod(edge.node.shape))


def _depends_on(node: Node, ancestor: Node) -> bool:
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n is ancestor:
            return True
        if n.id not in seen:
            seen.add(n.id)
            stack.extend(e.node for e in n.srcs)
    return False


def compose(inner: ViewStack, outer: ViewStack) -> ViewStack:
    """`outer` reads a buffer whose contents are `inner`'s logical view: read through both."""
    if inner.is_identity:  # the replacement's buffer is laid out exactly as the replaced node's
        return outer
    base, rest = outer.views[0], outer.views[1:]
    if base.is_contiguous:  # the base view is a plain reshape of the buffer: apply it to `inner`
        same = len(base.shape) == len(inner.shape) and all(a == b for a, b in zip(base.shape, inner.shape))
        stack = inner if same else inner.reshape(base.shape)
        return ViewStack(stack.views + rest)
    return ViewStack(inner.views + outer.views)


def identity_edge(node: Node) -> Edge:
    return Edge(node, ViewStack.of_buffer(node.shape))


def rebuild(
    outputs: Sequence[Edge], replace: Callable[..., Optional[Edge]], original: bool = False
) -> tuple[list[Edge], int]:
    """New output edges after offering every node (bottom-up, with rebuilt sources) to `replace`
    (with `original=True`, as `replace(rebuilt node, the node it was)`).

    Returns the outputs and how many nodes `replace` rewrote.
    """
    mapping: dict[int, Edge] = {}
    rewritten = 0
    for node in toposort([e.node for e in outputs]):
        srcs = tuple(
            Edge(mapping[s.node.id].node, compose(mapping[s.node.id].views, s.views)) for s in node.srcs
        )
        changed = any(a.node is not b.node or a.views != b.views for a, b in zip(srcs, node.srcs))
        current = (
            Node(node.op, srcs, node.attrs, node.shape, node.dtype, origin=node.origin) if changed else node
        )
        replacement = replace(current, node) if original else replace(current)
        if replacement is not None:
            rewritten += 1
            if replacement.node.origin is None:  # a node a rule built computes what the replaced one did
                replacement.node.origin = node.origin
            mapping[node.id] = replacement
        else:
            mapping[node.id] = identity_edge(current)
    out = [Edge(mapping[e.node.id].node, compose(mapping[e.node.id].views, e.views)) for e in outputs]
    return out, rewritten


def own_scatter_tables(outputs: Sequence[Edge]) -> list[Edge]:
    """The graph with every Scatter's table a buffer that Scatter may overwrite: the kernel writes its
    rows into the table's buffer (exec.program), so that buffer must hold the table, whole and dense,
    and be read by nothing else, or only by Gathers that run before it (`readers_first`: a decode step
    reads its cache's old pages and writes the new rows into the same pool). Such an Input (the runner
    uploads each feed afresh) or computed node is kept, unless an output reads it; any other table
    (a view, a leaf, a value read elsewhere) is first copied by a Contiguous node. Runs after every
    rewrite (CSE could merge two copies), so nothing undoes it."""
    roots = [e.node for e in outputs]
    nodes = toposort(roots)
    before = readers_first(roots, nodes)
    readers: dict[int, int] = {}
    by_name: dict[str, int] = {}
    for edge in [s for n in nodes for s in n.srcs] + list(outputs):
        readers[edge.node.id] = readers.get(edge.node.id, 0) + 1
        if edge.node.op.name == "Input":
            by_name[edge.node.attrs["name"]] = by_name.get(edge.node.attrs["name"], 0) + 1
    output_ids = {e.node.id for e in outputs}
    output_names = {e.node.attrs["name"] for e in outputs if e.node.op.name == "Input"}

    def owned(scatter: Node) -> bool:
        node = scatter.srcs[0].node
        if not _whole(scatter.srcs[0]) or node.op.literal or node.id in output_ids:
            return False
        if node.op.name == "Input":
            if node.attrs["name"] in output_names:
                return False
            alone = by_name[node.attrs["name"]] == 1
        elif node.op.kind == "leaf":
            return False
        else:
            alone = readers[node.id] == 1
        return alone or scatter.id in before

    copied = {n.id for n in nodes if n.op.kind == "scatter" and not owned(n)}
    if not copied:
        return list(outputs)

    def replace(current: Node, original: Node) -> Optional[Edge]:
        if original.id not in copied:
            return None
        copy = make_node("Contiguous", (current.srcs[0],))
        copy.origin = current.origin
        return identity_edge(
            Node(
                current.op,
                (identity_edge(copy),) + current.srcs[1:],
                current.attrs,
                current.shape,
                current.dtype,
                origin=current.origin,
            )
        )
    return rebuild(outputs, replace, original=True)[0]


def structural_key(node: Node, memo: dict[int, object]) -> object:
    """Equal for nodes that compute the same values: same op, attributes and (recursively) sources.

    Computed sources-first with an explicit stack (graphs may be thousands of nodes deep), stopping
    at nodes already in `memo`."""
    stack = [node]
    while stack:
        n = stack[-1]
        pending = [s.node for s in n.srcs if s.node.id not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        if n.id not in memo:
            attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))
            srcs = tuple((memo[s.node.id], s.views) for s in n.srcs)
            memo[n.id] = hash((n.op.name, n.dtype, attrs, srcs))
    return memo[node.id]


def flatten_outputs(outputs) -> tuple[list, Callable[[list], Any]]:
    """Tensors in a fixed order, and a function that puts results back in the user's structure."""
    if isinstance(outputs, TensorCore):
        return [outputs], lambda values: values[0]
    if isinstance(outputs, dict):
        keys = list(outputs)
        tensors = [outputs[k] for k in keys]
        rebuild = lambda values: dict(zip(keys, values))
    elif isinstance(outputs, (list, tuple)):
        tensors = list(outputs)
        rebuild = lambda values: list(values)
    else:
        raise RefcompError(
            f"outputs must be a Tensor, a list of them or a dict of them, got {type(outputs).__name__}"
        )
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorCore):
            raise RefcompError(
                f"output {keys[i] if isinstance(outputs, dict) else i!r} is a {type(t).__name__}, "
                f"not a Tensor"
            )
    return tensors, rebuild


def input_nodes(nodes: list[Node]) -> list[Node]:
    """One Input node per name; two inputs may share a name only if they agree on shape and dtype."""
    inputs: dict[str, Node] = {}
    for node in nodes:
        if node.op.name != "Input":
            continue
        name = node.attrs["name"]
        other = inputs.setdefault(name, node)
        if other is not node and (other.attrs["shape"] != node.attrs["shape"] or other.dtype != node.dtype):
            raise RefcompError(
                f"two different inputs are both named {name!r}: one of shape {_shape(other)} {other.dtype}, "
                f"the other of shape {_shape(node)} {node.dtype}; give them different names"
            )
    return list(inputs.values())


def _shape(node: Node) -> str:
    return "(" + ", ".join(map(str, node.shape)) + ("," if len(node.shape) == 1 else "") + ")"


def symbols_of(nodes: list[Node], edges: Sequence[Edge] = ()) -> set[sympy.Symbol]:
    """Every symbolic dim a graph mentions: in shapes, in views (strides, offsets, masks) and in
    Constant values such as 1/T; `edges` are extra views read from outside (the outputs). These
    are what a binding must give values to."""
    symbols: set[sympy.Symbol] = set()
    for stack in {e.views for node in nodes for e in node.srcs} | {e.views for e in edges}:
        symbols |= _stack_symbols(stack)
    for shape in {node.shape for node in nodes}:
        symbols |= _dims_symbols(shape)
    for node in nodes:
        value = node.attrs.get("value")
        if isinstance(value, sympy.Basic):
            symbols |= value.free_symbols
    return symbols


@functools.lru_cache(maxsize=16384)
def _stack_symbols(stack: ViewStack) -> frozenset:
    """The symbols of a view stack, memoised: a graph's edges share a few stacks, and the search asks
    of every graph it builds."""
    return frozenset().union(
        *(
            _dims_symbols(
                view.shape + view.strides + (view.offset,) + tuple(x for r in (view.mask or ()) for x in r)
            )
            for view in stack.views
        )
    )


@functools.lru_cache(maxsize=16384)
def _dims_symbols(dims: tuple) -> frozenset:
    return frozenset().union(*(free_symbols(d) for d in dims if not isinstance(d, int)))

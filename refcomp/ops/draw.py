"""Pictures of a graph: refcomp nodes as an SVG a browser or Jupyter shows inline.

A learner sees the compiler work by comparing pictures (the user's graph, the compiled one, which
kernel computes which node), so the picture must be the same every time: the layout depends only on
the graph's topological order, never on ids, hashes or time. With Graphviz installed (the `dot`
binary and the `graphviz` package) `dot` lays the graph out; otherwise a small layered layout here
does (Sugiyama's steps: longest-path layers, dummy nodes on long edges, barycenter ordering sweeps,
polyline edges). Every step is a loop over the topological order, so a graph thousands of nodes deep
draws without recursion.

Each node is a `<g class="rc-node" data-node="N">`, N being its position in the topological order of
the whole graph (the `Mul#N` that kernel comments use); a node some kernel computes also carries
`data-kernel` (the kernel that writes it, else the first that recomputes it) and `data-kernels` (every
kernel that computes it), and is filled with that kernel's colour. Constants and Iotas are drawn as
part of their readers (not at all), as `refcomp explain` lists them. The SVG has no xmlns: it is meant
to be inlined in HTML, where none is needed.
"""
from __future__ import annotations

import html
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from .graph import toposort
from .primitives import Node

PALETTE = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
           "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f")  # ColorBrewer Set3: light enough for black text
UNCOMPUTED = "#ffffff"  # inputs, and user nodes no kernel computes as such (rewritten away)
MAX_NODES = 400  # bigger graphs draw their first MAX_NODES nodes (in topological order) and say so
NODE_H, GAP_X, GAP_Y, MARGIN, CHAR_W = 34, 18, 38, 12, 6.6
SWEEPS = 4  # barycenter ordering sweeps (down, up, down, up)
MAX_LABEL = 30  # characters of a label shown; the node's <title> holds the whole of it


def kernel_colour(index: int) -> str:
    """The fill of the index-th kernel's nodes (and of its panel's swatch in the explorer)."""
    return PALETTE[index % len(PALETTE)]


@dataclass
class Box:
    """One drawn node (or a dummy, `node` None, where a long edge crosses a layer)."""

    node: Optional[Node]
    number: int = -1
    layer: int = 0
    width: float = 8.0
    x: float = 0.0  # centre
    label: str = ""
    detail: str = ""
    kernels: tuple[str, ...] = ()
    fill: str = UNCOMPUTED
    preds: list = field(default_factory=list)  # Boxes one layer up
    succs: list = field(default_factory=list)  # Boxes one layer down


@dataclass
class Layout:
    boxes: list[Box]  # real nodes, topological order
    edges: list[
        tuple[list[Box], bool, int]
    ]  # (boxes from source to reader, read through a view?, which source)
    layers: list[list[Box]]
    note: str = ""  # what was left out of a capped graph


def draw_graph(
    roots: Sequence[Node],
    kernels: Sequence[str] = (),
    owners: Optional[Mapping[int, Sequence[str]]] = None,
    *,
    max_nodes: Optional[int] = MAX_NODES,
    graphviz: Optional[bool] = None,
) -> str:
    """An inline `<svg class="rc-graph">` of every node the roots depend on.

    kernels: kernel names in launch order (the k-th is filled with kernel_colour(k)); owners: node id ->
    the kernels computing that node, the one writing it first. max_nodes: draw at most this many (None:
    all). graphviz: None uses Graphviz when it is installed, False forces the layout here (True asks
    for Graphviz, still falling back when it is missing)."""
    colours = {name: kernel_colour(k) for k, name in enumerate(kernels)}
    layout = lay_out(roots, owners or {}, colours, max_nodes)
    if graphviz is not False:
        svg = graphviz_svg(layout)
        if svg is not None:
            return svg
    return fallback_svg(layout)


def tensor_html(tensor) -> str:
    """A tensor's repr above a picture of its expression graph (Tensor._repr_html_, for Jupyter)."""
    svg = draw_graph([tensor.node], max_nodes=200)
    return (f'<div class="rc-tensor"><code>{html.escape(repr(tensor))}</code>'
            f'<div style="max-height:420px;overflow:auto">{svg}</div></div>')


# --- what to draw -----------------------------------------------------------------------------------
def lay_out(roots: Sequence[Node], owners: Mapping[int, Sequence[str]], colours: Mapping[str, str],
            max_nodes: Optional[int]) -> Layout:
    order = toposort(list(roots))
    number = {n.id: k for k, n in enumerate(order)}
    shown = [n for n in order if not n.op.literal]
    note = ""
    if max_nodes is not None and len(shown) > max_nodes:
        note = f"showing the first {max_nodes:,} of {len(shown):,} nodes"
        shown = shown[:max_nodes]  # a prefix of a topological order: every source drawn is kept
    boxes = {n.id: _box(n, number[n.id], tuple(owners.get(n.id, ())), colours) for n in shown}
    _layer(boxes)
    layers: list[list[Box]] = [[] for _ in range(max((b.layer for b in boxes.values()), default=-1) + 1)]
    for box in boxes.values():
        layers[box.layer].append(box)
    edges = []
    for box in boxes.values():
        for edge in box.node.srcs:
            if edge.node.id in boxes:
                edges.append(
                    (_route(boxes[edge.node.id], box, layers), not edge.views.is_identity, len(box.preds) - 1)
                )
    layout = Layout(list(boxes.values()), edges, layers, note)
    _order(layout)
    _place(layout)
    return layout


def _layer(boxes: dict[int, Box]) -> None:
    """Longest-path layers (a node one below its lowest source), then each source (an input: a weight,
    say) moved down to just above its first reader, so its edges stay short."""
    first_reader: dict[int, int] = {}
    for box in boxes.values():  # topological order: sources are layered before their readers
        srcs = [e.node.id for e in box.node.srcs if e.node.id in boxes]
        box.layer = max((boxes[i].layer + 1 for i in srcs), default=0)
        for i in srcs:
            first_reader[i] = min(first_reader.get(i, box.layer), box.layer)
    for box in boxes.values():
        if not any(e.node.id in boxes for e in box.node.srcs) and box.node.id in first_reader:
            box.layer = first_reader[box.node.id] - 1


def _box(node: Node, number: int, kernels: tuple[str, ...], colours: Mapping[str, str]) -> Box:
    label = f"input {node.attrs['name']!r}" if node.op.name == "Input" else f"{node.op.name}#{number}"
    shape = "(" + ", ".join(str(d) for d in node.shape) + ("," if len(node.shape) == 1 else "") + ")"
    detail = shape + ("" if node.dtype == "float32" else f" {node.dtype}")
    width = max(84.0, min(len(label), MAX_LABEL) * CHAR_W + 16, min(len(detail), MAX_LABEL) * CHAR_W + 16)
    fill = colours.get(kernels[0], UNCOMPUTED) if kernels else UNCOMPUTED
    return Box(node, number, width=width, label=label, detail=detail, kernels=kernels, fill=fill)


def _route(src: Box, dst: Box, layers: list[list[Box]]) -> list[Box]:
    """The path of an edge, with a dummy box in every layer it crosses (so every hop is one layer)."""
    path = [src]
    for layer in range(src.layer + 1, dst.layer):
        dummy = Box(None, layer=layer)
        layers[layer].append(dummy)
        path.append(dummy)
    path.append(dst)
    for a, b in zip(path, path[1:]):
        a.succs.append(b)
        b.preds.append(a)
    return path


# --- the layered layout -------------------------------------------------------------------------------
def _order(layout: Layout) -> None:
    """Barycenter sweeps: sort each layer by the mean position of its neighbours in the layer just
    sorted (a stable sort, ties keeping the current order, so the result is deterministic). While
    ordering, a box's x is its position in its layer."""
    for layer in layout.layers:
        for k, b in enumerate(layer):
            b.x = k
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        for layer in layout.layers[1:] if down else layout.layers[-2::-1]:
            layer.sort(key=lambda b: _mean([n.x for n in (b.preds if down else b.succs)], b.x))
            for k, b in enumerate(layer):
                b.x = k


def _mean(values: list[float], default):
    return sum(values) / len(values) if values else default


def _place(layout: Layout) -> None:
    """x of each box: under the mean of its sources, nudged right to keep the gap from its left
    neighbour, then the layer shifted left as a whole by the mean nudge."""
    for layer in layout.layers:
        wanted = [_mean([p.x for p in b.preds], None) for b in layer]  # None: no sources
        right = None  # the right edge of the box placed last
        for b, want in zip(layer, wanted):
            least = None if right is None else right + GAP_X + b.width / 2
            want = want if want is not None else least if least is not None else b.width / 2
            b.x = want if least is None else max(want, least)
            right = b.x + b.width / 2
        shift = _mean([w - b.x for b, w in zip(layer, wanted) if w is not None], 0.0)
        for b in layer:
            b.x += shift
    lowest = min((b.x - b.width / 2 for layer in layout.layers for b in layer), default=0.0)
    for layer in layout.layers:
        for b in layer:
            b.x = round(b.x - lowest + MARGIN)


# --- SVG -------------------------------------------------------------------------------------------------
def _y(layer: int) -> int:
    return MARGIN + 18 + layer * (NODE_H + GAP_Y)


def _attrs(box: Box) -> str:
    out = f' class="rc-node" data-node="{box.number}"'
    if box.kernels:
        out += (f' data-kernel="{html.escape(box.kernels[0])}" '
                f'data-kernels="{html.escape(" ".join(box.kernels))}"')
    return out


def _title(box: Box) -> str:
    node = box.node
    origin = (
        f" from {node.origin.op}" + (f" at {node.origin.where}" if node.origin.where else "")
        if node.origin
        else ""
    )
    computed = f"; computed by {', '.join(box.kernels)}" if box.kernels else ""
    return html.escape(f"{box.label} {box.detail}{origin}{computed}")


def _short(text: str) -> str:
    return html.escape(_cut(text))


def fallback_svg(layout: Layout) -> str:
    """The layout as SVG: polyline edges (dashed where a view is read) ending in a small arrowhead."""
    width = (
        max((b.x + b.width / 2 for layer in layout.layers for b in layer), default=0) + MARGIN
    )  # dummies too
    height = _y(len(layout.layers)) - GAP_Y + MARGIN
    out = [
        f'<svg class="rc-graph" width="{int(width)}" height="{height}" viewBox="0 0 {int(width)} {height}" '
        f'font-family="sans-serif" font-size="11">'
    ]
    if layout.note:
        out.append(f'<text class="rc-note" x="{MARGIN}" y="{MARGIN + 4}">{html.escape(layout.note)}</text>')
    for path, viewed, lane in layout.edges:
        out.append(_edge_svg(path, viewed, lane))
    for box in layout.boxes:
        x, y = box.x - box.width / 2, _y(box.layer)
        out.append(
            f'<g{_attrs(box)}><title>{_title(box)}</title>'
            f'<rect x="{x:g}" y="{y}" width="{box.width:g}" height="{NODE_H}" rx="5" fill="{box.fill}" '
            f'stroke="#555"/><text x="{box.x}" y="{y + 14}" text-anchor="middle" font-weight="bold">'
            f'{_short(box.label)}</text><text x="{box.x}" y="{y + 27}" text-anchor="middle">'
            f'{_short(box.detail)}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _edge_svg(path: list[Box], viewed: bool, lane: int) -> str:
    dst = path[-1]  # the edges into one node are spread along its top, in the order of its sources
    end_x = dst.x + (lane - (len(dst.preds) - 1) / 2) * min(10, dst.width / max(len(dst.preds), 1))
    points = [(path[0].x, _y(path[0].layer) + NODE_H)]
    points += [(b.x, _y(b.layer) + NODE_H / 2) for b in path[1:-1]]
    points.append((end_x, _y(dst.layer) - 1))
    line = " ".join(f"{x:g},{y:g}" for x, y in points)
    dash = ' stroke-dasharray="4 3"' if viewed else ""
    tip_x, tip_y = points[-1]
    arrow = f"{tip_x - 4:g},{tip_y - 7:g} {tip_x + 4:g},{tip_y - 7:g} {tip_x:g},{tip_y:g}"
    return (f'<g class="rc-edge"><polyline points="{line}" fill="none" stroke="#777"{dash}/>'
            f'<polygon points="{arrow}" fill="#777"/></g>')


# --- Graphviz ----------------------------------------------------------------------------------------------
def graphviz_svg(layout: Layout) -> Optional[str]:
    """The same boxes laid out by `dot`, as inline SVG with the same classes and data attributes; None
    when Graphviz (the package or the binary) is missing or fails."""
    try:
        import graphviz
    except ImportError:
        return None
    if shutil.which("dot") is None:
        return None
    try:
        svg = graphviz.Source(dot_text(layout)).pipe(format="svg").decode()
    except (
        OSError,
        RuntimeError,
        subprocess.SubprocessError,
    ):  # graphviz.ExecutableNotFound is a RuntimeError
        return None
    return inline_graphviz(svg, {b.number: b for b in layout.boxes}, layout.note)


def dot_text(layout: Layout) -> str:
    """The boxes and edges in the DOT language; each node's id carries its number (rc-n12)."""
    escape = lambda text: _cut(text).replace("\\", "\\\\").replace('"', '\\"')
    lines = ["digraph G {", '  node [shape=box, style="rounded,filled", fontname="sans-serif", fontsize=10];']
    for b in layout.boxes:
        label = escape(b.label) + "\\n" + escape(b.detail)  # DOT's escape \n: a centred line break
        lines.append(f'  n{b.number} [id="rc-n{b.number}", label="{label}", fillcolor="{b.fill}"];')
    for path, viewed, _ in layout.edges:
        lines.append(f"  n{path[0].number} -> n{path[-1].number}" + (" [style=dashed];" if viewed else ";"))
    return "\n".join(lines + ["}"])


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LABEL else text[:MAX_LABEL - 1] + "\u2026"


def inline_graphviz(svg: str, boxes: dict[int, Box], note: str = "") -> str:
    """dot's SVG made fit to inline: no XML prolog, comments or namespaces (HTML needs none), no ids
    (two graphs on one page would repeat them), and each node's group given our class and data."""
    svg = re.sub(r"<\?xml.*?\?>|<!DOCTYPE.*?>|<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    node_group = lambda m: f"<g{_attrs(boxes[int(m.group(1))])}>"
    svg = re.sub(r'<g id="rc-n(\d+)" class="node">', node_group, svg)
    svg = re.sub(r'<g id="[^"]*" class="(graph|edge)"', r'<g class="rc-\1"', svg)
    svg = svg.strip().replace("<svg ", '<svg class="rc-graph" ', 1)
    return (f'<p class="rc-note">{html.escape(note)}</p>\n' if note else "") + svg

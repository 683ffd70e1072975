"""The explorer: one self-contained HTML page that shows a learner what the compiler did to a program.

`write_explorer(program)` (or `prog.explorer("out.html")`) draws the user's graph and the compiled
graph side by side with the kernel panels (exec.explorer_parts), nodes coloured by the kernel that
computes them; clicking a kernel lights up its nodes, clicking a node lights up its kernel. Below
them: the search's rewrite trace and the memory plan. Everything is inline (CSS, a few lines of
plain JS, SVG), so the file opens anywhere without a network, and the page depends only on the
program, so the same program always gives the same bytes.

Hooks for a browser: graph nodes are `g.rc-node[data-node][data-kernel]`, kernel panels are
`section.rc-kernel[data-kernel]`, and whatever is highlighted has the class `rc-selected` (the
body gets `rc-focus` while something is).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import RefcompError
from ..ops.draw import draw_graph, kernel_colour
from ..reference.bindings import show_binding
from .explorer_parts import (
    compiled_owners,
    esc,
    kernel_panel,
    memory_section,
    node_name,
    table,
    trace_section,
    user_owners,
)

# In CSS, SCRIPT and the page a `\` at a line's end joins the next line to it: the page gets one line.
CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header, .rc-wide { padding: 8px 16px; }
h1 { font-size: 20px; margin: 4px 0; } h2 { font-size: 16px; margin: 12px 0 4px; } \
h3 { font-size: 14px; margin: 0; }
.rc-main { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 12px; padding: 0 16px; }
.rc-graphs { position: sticky; top: 0; align-self: start; max-height: 100vh; overflow: auto; }
.rc-graph-box { overflow: auto; max-height: 46vh; background: #fff; border: 1px solid #ddd; }
.rc-node { cursor: pointer; }
.rc-focus .rc-node:not(.rc-selected), .rc-focus .rc-buffer:not(.rc-selected) { opacity: 0.35; }
.rc-node.rc-selected rect, .rc-node.rc-selected path, .rc-node.rc-selected polygon, \
.rc-buffer.rc-selected rect {
  stroke: #d00; stroke-width: 3; }
.rc-scroll { overflow-x: auto; }
.rc-kernel { background: #fff; border: 1px solid #ddd; border-radius: 6px; margin: 0 0 8px; padding: 6px 10px;
  cursor: pointer; }
.rc-kernel.rc-selected { border-color: #d00; box-shadow: 0 0 0 2px #d00; }
.rc-swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #555; margin-right: 6px; }
.rc-kind, .rc-where, .rc-note { color: #777; font-weight: normal; }
table { border-collapse: collapse; font-size: 13px; } \
th { text-align: left; vertical-align: top; padding-right: 8px; }
td, th { padding: 1px 6px; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.rc-trace tr:nth-child(even), .rc-kernels-table tr:nth-child(even) { background: #f0f0f0; }
.rc-counters { margin-top: 4px; } .rc-counters caption { text-align: left; color: #777; }
.rc-bar { fill: #4c78a8; } .rc-bar:hover { fill: #d00; }
pre { background: #f6f8fa; padding: 6px; overflow: auto; font-size: 12px; cursor: text; }
.hl-comment { color: #6a737d; } .hl-keyword { color: #d73a49; } .hl-type { color: #6f42c1; }
.hl-number { color: #005cc5; } .hl-string { color: #032f62; } .hl-preproc { color: #e36209; } \
.hl-builtin { color: #22863a; }
"""

# Click a kernel panel: select that kernel. Click a node: select the kernel that writes it (again: clear).
# Selecting marks the panel, every node and buffer it computes or touches (data-kernels), and opens its
# source. A drawn graph is often far wider than its box, its top row centred: each box opens on its
# topmost node, and selecting a kernel's panel scrolls each box to the kernel's first node there.
SCRIPT = """
(function () {
  var selected = null;
  function reveal(box, node) {
    if (!node) return;
    var b = node.getBBox();
    box.scrollLeft = Math.max(0, b.x + b.width / 2 - box.clientWidth / 2);
    box.scrollTop = Math.max(0, b.y - 20);
  }
  function topmost(box) {
    var nodes = box.querySelectorAll('g.rc-node'), best = null, y = Infinity;
    for (var i = 0; i < nodes.length; i++) {
      var b = nodes[i].getBBox();
      if (b.y < y) { y = b.y; best = nodes[i]; }
    }
    return best;
  }
  var boxes = document.querySelectorAll('.rc-graph-box');
  for (var i = 0; i < boxes.length; i++) reveal(boxes[i], topmost(boxes[i]));
  function select(name) {
    var marked = document.querySelectorAll('.rc-selected');
    for (var i = 0; i < marked.length; i++) marked[i].classList.remove('rc-selected');
    selected = name;
    document.body.classList.toggle('rc-focus', name !== null);
    if (name === null) return null;
    var parts = document.querySelectorAll('[data-kernels]');
    for (var j = 0; j < parts.length; j++) {
      if (parts[j].getAttribute('data-kernels').split(' ').indexOf(name) >= 0) \
parts[j].classList.add('rc-selected');
    }
    var panels = document.querySelectorAll('.rc-kernel'), panel = null;
    for (var k = 0; k < panels.length; k++) if (panels[k].getAttribute('data-kernel') === name) \
panel = panels[k];
    if (panel) panel.classList.add('rc-selected');
    return panel;
  }
  document.addEventListener('click', function (event) {
    var target = event.target;
    if (!target || !target.closest || target.closest('pre')) return;
    var node = target.closest('.rc-node, .rc-buffer');
    if (node) {
      var name = node.getAttribute('data-kernel') || (node.getAttribute('data-kernels') || '').split(' ')[0];
      var panel = select(name && name !== selected ? name : null);
      if (panel) panel.scrollIntoView({block: 'nearest'});
      return;
    }
    var kernel = target.closest('.rc-kernel');
    if (kernel) {
      select(kernel.getAttribute('data-kernel'));
      for (var b = 0; b < boxes.length; b++) {
        reveal(boxes[b], boxes[b].querySelector('g.rc-node.rc-selected'));
      }
      return;
    }
    if (target.closest('.rc-graph')) select(null);
  });
})();
"""


def write_explorer(program, path=None, profile=None) -> str:
    """The explorer page of `program` as one HTML document, also written to `path` when given.
    `profile` (from `program.profile(feeds)`) adds the profiler's counters to each kernel's panel."""
    profiled = list(profile.kernels) if profile is not None else [None] * len(program.kernels)
    title = (
        f"refcomp explorer: {len(program.kernels)} kernel(s): {', '.join(k.name for k in program.kernels)}"
    )
    names = [k.name for k in program.kernels]
    panels = "\n".join(kernel_panel(program, i, p) for i, p in enumerate(profiled))
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title><style>{CSS}</style></head>
<body>
<header><h1>refcomp explorer</h1><p>{_summary(program, profile)}</p>
<p>Click a kernel to light up the nodes it computes; click a node to find its kernel. Colours are kernels;
white boxes are inputs, or user nodes the search rewrote away; dashed edges read through a view.</p></header>
<div class="rc-main">
<div class="rc-graphs">
<h2>After search: the compiled graph ({_computed(program._nodes)} compute nodes)</h2>
<div class="rc-graph-box rc-after">{draw_graph(program.output_nodes, names, compiled_owners(program))}</div>
<h2>Before search: your graph ({_computed(program._user_nodes)} compute nodes)</h2>
<div class="rc-graph-box rc-before">\
{draw_graph([t.node for t in program.tensors], names, user_owners(program))}</div>
</div>
<div class="rc-kernels"><h2>Kernels, in launch order</h2>
{panels}
</div></div>
<section class="rc-wide" id="trace"><h2>Rewrite trace</h2>
{trace_section(program)}
</section>
<section class="rc-wide" id="memory"><h2>Memory plan</h2>
{memory_section(program)}
</section>
<script>{SCRIPT}</script>
</body></html>
"""
    if path is not None:
        write_page(path, page)
    return page


def write_page(path, page: str) -> None:
    """Write an explorer page; a path that cannot be written is the user's to fix, said by name."""
    try:
        Path(path).write_text(page, encoding="utf-8")
    except OSError as exc:
        raise RefcompError(f"cannot write the explorer page {str(path)!r}: {exc}") from exc


def _computed(nodes) -> int:
    return sum(1 for n in nodes if n.op.kind != "leaf")


def _summary(program, profile) -> str:
    cost = program.cost
    inputs = ", ".join(esc(n.label) for n in program._inputs) or "none"
    out = (
        f"{len(program.kernels)} kernel(s) computing {len(program.output_nodes)} output(s) "
        f"from inputs {inputs}. Modeled: {cost.bytes:,} B from DRAM, {cost.flops:,} flops, "
        f"<b>{cost.time_s * 1e6:.2f} us</b> predicted."
    )
    if profile is not None:
        out += (
            f" Profiled at {esc(show_binding(profile.bindings))} (the counters are in each kernel's panel)."
        )
    return out


def program_html(program) -> str:
    """A compact view for Jupyter (Program._repr_html_): a table of the kernels, then the compiled graph."""
    rows = [
        [
            f'<span style="background:{kernel_colour(i)};padding:0 6px">&nbsp;</span> {esc(k.name)}',
            esc(k.kind),
            esc(", ".join(k.ops)),
            esc(str(k.launch)),
            f"{k.cost.bytes:,}",
            f"{k.cost.flops:,}",
            f"{k.cost.time_s * 1e6:.2f}",
        ]
        for i, k in enumerate(program.kernels)
    ]
    header = ["kernel", "kind", "user ops", "launch", "bytes", "flops", "time us"]
    graph = draw_graph(
        program.output_nodes, [k.name for k in program.kernels], compiled_owners(program), max_nodes=200
    )
    outputs = ", ".join(esc(node_name(program, n)) for n in program.output_nodes)
    return (f'<div class="rc-program"><p><code>{esc(repr(program))}</code>: outputs {outputs}</p>'
            f'{table(header, rows, "rc-kernels-table", 4)}'
            f'<div style="max-height:420px;overflow:auto;margin-top:6px">{graph}</div></div>')

"""The explorer's panels, each a function from a program to an HTML fragment (see exec.explorer).

Kernels (what each computes, its launch, the cost model's figures, the profiler's counters, the
highlighted CUDA), the search's rewrite trace (a table and a bar chart of predicted time, then the
moves it left undone) and the memory plan (a timeline of intermediate buffers). Every string that
reaches the page goes through `esc`, since input names and provenance (file names) are the user's.
"""
from __future__ import annotations

import html
from dataclasses import fields
from typing import Optional

from ..codegen.highlight import highlight_cuda
from ..ops.draw import kernel_colour
from ..ops.graph import structural_key
from ..ops.dtypes import DTYPES
from ..ops.primitives import Node
from ..symbolic.dims import evaluate_dim, prod
from ..reference.bindings import show_binding

esc = html.escape


def node_name(program, node: Node) -> str:
    """`input 'x'` or `Mul#12`, numbered as in the kernels' comments (and the compiled graph)."""
    return node.label if node.op.name == "Input" else program.names.label(node)


def table(
    header: list[str], rows: list[list[str]], css: str, left: int = 2, row_attrs: Optional[list[str]] = None
) -> str:
    """An HTML table of cells that are already HTML; the columns after the first `left` (numbers) align
    right."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = []
    for k, row in enumerate(rows):
        cells = "".join(
            f'<td class="num">{c}</td>' if i >= left else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr{row_attrs[k] if row_attrs else ''}>{cells}</tr>")
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


# --- which kernel computes which node ------------------------------------------------------------
def compiled_owners(program) -> dict[int, list[str]]:
    """Compiled node id -> the kernels computing it: the one writing it first, then those recomputing it."""
    owners: dict[int, list[str]] = {}
    for kernel in program.kernels:
        for node in kernel.written:
            owners.setdefault(node.id, []).insert(0, kernel.name)
        for node in kernel.nodes:
            if node not in kernel.written:
                owners.setdefault(node.id, []).append(kernel.name)
    return owners


def user_owners(program) -> dict[int, list[str]]:
    """The same for the user's graph. The search rebuilds every node downstream of a rewrite, so a user
    node is matched to the compiled node computing the same values (ops.graph.structural_key):
    those the rules changed (or merged into another) keep no kernel."""
    memo: dict = {}
    twin = {structural_key(n, memo): n.id for n in program._nodes}
    owners = compiled_owners(program)
    matched = {n.id: owners.get(twin.get(structural_key(n, memo)), []) for n in program._user_nodes}
    return {i: names for i, names in matched.items() if names}


# --- kernels ----------------------------------------------------------------------------------------
def kernel_panel(program, index: int, profiled=None) -> str:
    """One kernel: a coloured head to click, its facts, the profile's counters, its source."""
    kernel = program.kernels[index]
    name = esc(kernel.name)
    facts = [("user ops", _user_ops(kernel)), ("launch", _launch(program, kernel)),
             ("computes", ", ".join(esc(node_name(program, n)) for n in kernel.nodes)),
             ("reads", ", ".join(esc(node_name(program, n)) for n in kernel.reads) or "nothing"),
             ("writes", ", ".join(esc(f"{node_name(program, n)} {n.dtype}")
                                  for n in kernel.written)),
             ("modeled", _modeled(kernel.cost))]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    lines = kernel.source.count("\n") + 1
    return (
        f'<section class="rc-kernel" id="kernel-{index}" data-kernel="{name}">'
        f'<h3 class="rc-kernel-head">'
        f'<span class="rc-swatch" style="background:{kernel_colour(index)}"></span>'
        f'{name} <span class="rc-kind">{esc(kernel.kind)}</span></h3>'
        f'<table class="rc-facts">{rows}</table>{counters_table(profiled) if profiled else ""}'
        f'<details class="rc-source"><summary>CUDA source ({lines} lines)</summary>'
        f'<pre><code>{highlight_cuda(kernel.source)}</code></pre></details></section>'
    )


def _user_ops(kernel) -> str:
    """The user calls it computes, with the file:line each was made at (once each, in graph order)."""
    seen = list(dict.fromkeys((n.origin.op, n.origin.where) for n in kernel.nodes if n.origin))
    if not seen:
        return esc(", ".join(kernel.ops)) or "-"
    return ", ".join(f"<b>{esc(op)}</b>" + (f" <span class=\"rc-where\">{esc(where)}</span>" if where else "")
                     for op, where in seen)


def _launch(program, kernel) -> str:
    grid, block = kernel.launch.geometry(program.cost_bindings)
    show = lambda d: "x".join(str(v) for v in d)
    return esc(
        f"{kernel.launch}: grid {show(grid)}, block {show(block)} at {show_binding(program.cost_bindings)}"
    )


def _modeled(cost) -> str:
    if cost is None:
        return "-"
    l2 = f", {cost.l2_bytes:,} B through L2" if cost.l2_bytes else ""
    return f"{cost.bytes:,} B from DRAM{l2}, {cost.flops:,} flops, <b>{cost.time_s * 1e6:.2f} us</b>"


def counters_table(profiled) -> str:
    """The profiler's counters for one kernel (exec.profile.KernelProfile), with bank conflicts."""
    c = profiled.counters
    if profiled.grid is None:
        return '<p class="rc-counters">not launched at the profiled binding (no work)</p>'
    values = [(f.name.replace("_", " "), getattr(c, f.name)) for f in fields(c)]
    values.append(("shared bank conflicts", c.shared_bank_conflicts))
    pairs = [f'<th>{esc(k)}</th><td class="num">{v:,}</td>' for k, v in values]
    cells = "".join(
        "<tr>" + "".join(pairs[i : i + 3]) + "</tr>" for i in range(0, len(pairs), 3)
    )  # three to a row
    launch = f"grid {'x'.join(map(str, profiled.grid))}, block {'x'.join(map(str, profiled.block))}"
    return f'<table class="rc-counters"><caption>profiled: {esc(launch)}</caption>{cells}</table>'


# --- the rewrite trace ------------------------------------------------------------------------------------
def trace_section(program) -> str:
    result = program.search
    if result is None:
        return "<p>This program was not searched (search=False, or loaded from a file): no rewrite trace.</p>"
    steps = result.trace
    rows, previous = [], None
    for k, step in enumerate(steps):
        delta = "" if previous is None else f"{(step.cost_s - previous) * 1e6:+.2f}"
        rows.append(
            [
                str(k),
                f"<b>{esc(step.rule)}</b>",
                esc(step.site),
                f"{step.cost_s * 1e6:.2f}",
                str(step.kernels),
                delta,
            ]
        )
        previous = step.cost_s
    attrs = [f' data-step="{k}"' for k in range(len(steps))]
    opening = f" The '{esc(result.opening)}' opening found this schedule." if result.opening else ""
    summary = (
        f"<p>{esc(result.profile.name)} cost model at {esc(show_binding(result.bindings))}; "
        f"the search explored {result.states:,} states.{opening} "
        f"Each row: a rule applied, where, and the predicted time after it.</p>"
    )
    header = ["step", "rule", "where", "predicted us", "kernels", "change us"]
    return (
        f'{summary}<div class="rc-scroll">{trace_chart(steps)}</div>'
        f'{table(header, rows, "rc-trace", 3, attrs)}'
        + untaken_section(program)
    )


def untaken_section(program) -> str:
    """The moves still legal at the chosen schedule, each priced alone (search/alternatives.py): what a
    fusion the search declined would save in bytes and cost in time."""
    claim, header, rows = program.pricing.untaken(program.search)
    if not rows:
        return "<p>Moves left undone: none. No rule applies anywhere in the chosen schedule.</p>"
    cells = [[f"<b>{esc(rule)}</b>", *map(esc, rest)] for rule, *rest in rows]
    return (
        f"<p>Moves left undone: each is legal at the chosen schedule and priced alone against it; "
        f"{claim}.</p>"
        + table(header, cells, "rc-untaken", 2)
    )


def trace_chart(steps) -> str:
    """One bar per step, its height the predicted time after that step (from zero)."""
    if not steps:
        return ""
    top = max(s.cost_s for s in steps) or 1.0
    bar, gap, height = 14, 4, 120
    width = len(steps) * (bar + gap) + 60
    out = [
        f'<svg class="rc-trace-chart" width="{width}" height="{height + 30}" font-size="10" '
        f'font-family="sans-serif">',
        f'<text x="0" y="10">{top * 1e6:.2f} us</text><line x1="56" y1="{height + 10}" x2="{width}" '
        f'y2="{height + 10}" stroke="#888"/>',
    ]
    for k, step in enumerate(steps):
        h = max(1, round(step.cost_s / top * height))
        x = 56 + k * (bar + gap)
        out.append(
            f'<rect class="rc-bar" data-step="{k}" x="{x}" y="{height + 10 - h}" width="{bar}" height="{h}">'
            f'<title>{k}: {esc(step.rule)} {esc(step.site)}: {step.cost_s * 1e6:.2f} us, '
            f'{step.kernels} kernels</title></rect>'
        )
    out.append(f'<text x="56" y="{height + 24}">step 0</text>'
               f'<text x="{width}" y="{height + 24}" text-anchor="end">step {len(steps) - 1}</text></svg>')
    return "\n".join(out)


# --- the memory plan ---------------------------------------------------------------------------------------
def memory_section(program) -> str:
    """One bar per intermediate buffer, from the kernel that writes it to its last reader, on the row
    of the slot it lives in: bars sharing a row are buffers reusing one allocation."""
    bindings = program.cost_bindings
    plan = program.memory_plan(bindings)
    kernels = program.kernels
    writer = {n.id: i for i, k in enumerate(kernels) for n in k.written}
    written = {n.id: n for k in kernels for n in k.written}
    readers: dict[int, list[int]] = {}
    for i, k in enumerate(kernels):
        for node in k.reads:
            readers.setdefault(node.id, []).append(i)
    col, row, left = 96, 26, 60
    width, height = left + col * len(kernels) + 10, 30 + row * max(len(plan.slot_bytes), 1)
    out = [
        f'<svg class="rc-memory" width="{width}" height="{height}" font-size="10" font-family="sans-serif">'
    ]
    for i, k in enumerate(kernels):
        out.append(
            f'<text x="{left + col * i + col / 2:g}" y="14" text-anchor="middle"><title>{esc(k.name)}</title>'
            f'{esc(k.name.split("_")[0])}</text>'
        )
    for slot, nbytes in enumerate(plan.slot_bytes):
        out.append(f'<text x="0" y="{30 + row * slot + 15}">slot {slot}</text>')
    for node_id, slot in sorted(plan.slot_of.items(), key=lambda item: writer[item[0]]):
        node = written[node_id]
        first, last = writer[node_id], max(readers.get(node_id, [writer[node_id]]))
        users = " ".join(esc(kernels[i].name) for i in dict.fromkeys([first] + readers.get(node_id, [])))
        size = DTYPES[node.dtype].itemsize * evaluate_dim(prod(node.shape), bindings)
        label = f"{node_name(program, node)}: {size:,} B"
        x, y, w = left + col * first + 2, 30 + row * slot + 2, col * (last - first + 1) - 4
        out.append(
            f'<g class="rc-buffer" data-node="{program.names.numbers[node_id]}" data-slot="{slot}" '
            f'data-kernels="{users}"><rect x="{x}" y="{y}" width="{w}" height="{row - 4}" rx="3" '
            f'fill="{kernel_colour(first)}" stroke="#555"/>'
            f'<text x="{x + 4}" y="{y + 15}">{esc(_fit(label, w))}</text>'
            f'<title>{esc(label)}, slot {slot}; written by {esc(kernels[first].name)}, last read by '
            f'{esc(kernels[last].name)}</title></g>'
        )
    out.append("</svg>")
    outputs = len(program.output_nodes)
    return (
        f"<p>At {esc(show_binding(bindings))}: {len(plan.slot_of)} intermediate buffers in "
        f"{len(plan.slot_bytes)} slots, {plan.peak_bytes:,} B at peak. Inputs and the {outputs} output(s) "
        f'have buffers of their own.</p><div class="rc-scroll">' + "\n".join(out) + "</div>"
    )


def _fit(text: str, width: float) -> str:
    """As much of `text` as fits `width` pixels of 10-pixel sans-serif (the bar's title has it all)."""
    room = max(int(width / 6), 1)
    return text if len(text) <= room else text[:room - 1] + "\u2026"

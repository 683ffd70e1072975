"""`refcomp explain`: what the search did and why, in a form a person can check.

It prints the graph before and after the rewrites (once, when they changed nothing), the rules applied
in order with the modeled cost after each, and for every kernel its nodes, bytes, flops and predicted
time on the device profile, next to the minimum bytes any program must move.
"""
from __future__ import annotations

from ..codegen.legality import ProgramNames
from ..ops.graph import toposort
from ..ops.primitives import Edge
from .alternatives import UNTAKEN_HEADER, untaken_rows
from .cost import minimum_bytes
from ..ops.graph import identity_edge


def describe_graph(edges: list[Edge]) -> list[str]:
    """One line per node, numbered by its position in this graph (as in the kernels' comments)."""
    nodes = toposort([e.node for e in edges])
    label = ProgramNames.of(nodes).label
    lines = []
    for node in nodes:
        if node.op.literal:  # a Constant or an Iota: part of its readers, not a node of its own
            continue
        srcs = ", ".join(label(s.node) + ("" if s.views.is_identity else "[view]") for s in node.srcs)
        shape = (
            "("
            + ", ".join(str(d) for d in node.shape)
            + ")"
            + ("" if node.dtype == "float32" else f" {node.dtype}")
        )
        lines.append(f"  {label(node)} {shape}" + (f" <- {srcs}" if srcs else ""))
    return lines


def format_table(header: list[str], rows: list[list[str]], left: int = 2) -> list[str]:
    """Columns as wide as their widest cell: the first `left` columns flush left, numbers flush right."""
    widths = [max(len(str(r[k])) for r in [header] + rows) for k in range(len(header))]
    cell = lambda k, v: f"{v:<{widths[k]}}" if k < left else f"{v:>{widths[k]}}"
    return ["  " + "  ".join(cell(k, v) for k, v in enumerate(r)).rstrip() for r in [header] + rows]


def cost_table(kernels, costs, output_nodes, all_nodes, bindings) -> list[str]:
    """Per kernel: its user ops, modeled DRAM bytes, flops, bytes through L2 (32 x the sectors its warps
    request, when priced from its accesses) and time; then the total against the minimum bytes."""
    rows = [
        [
            k.name,
            k.kind,
            str(len(k.nodes)),
            f"{c.bytes:,}",
            f"{c.flops:,}",
            f"{c.l2_bytes:,}" if c.l2_bytes else "-",
            f"{c.time_s * 1e6:.2f}",
        ]
        for k, c in zip(kernels, costs)
    ]
    lines = format_table(["kernel", "kind", "nodes", "bytes", "flops", "L2 bytes", "time us"], rows)
    total_bytes = sum(c.bytes for c in costs)
    least = minimum_bytes(output_nodes, all_nodes, bindings)
    lines.append(
        f"  total: {len(kernels)} kernels, {total_bytes:,} bytes "
        f"(minimum {least:,}, ratio {total_bytes / max(least, 1):.2f}), "
        f"predicted {sum(c.time_s for c in costs) * 1e6:.2f} us"
    )
    return lines


def explain(program) -> str:
    result = program.search
    if result is None:
        return "this program was compiled with search=False: one kernel per compute node, nothing to explain"
    binding = ", ".join(f"{k}={v}" for k, v in result.bindings.items()) or "no symbolic dims"
    out = [
        f"cost model: {result.profile.name} roofline at {binding}; "
        f"search explored {result.states} states in {result.seconds:.2f} s"
        + (f"; the '{result.opening}' opening found the schedule" if result.opening else ""),
        "",
    ]
    before, after = (
        describe_graph(result.before),
        describe_graph([identity_edge(n) for n in result.graph.output_nodes]),
    )
    if before == after:  # the same lines twice would only make a reader look for a difference
        out.append(
            f"graph ({len(result.graph.compute)} compute nodes; the search's rewrites left it unchanged):"
        )
        out += before
    else:
        computed = len([n for n in toposort([e.node for e in result.before]) if n.op.kind != 'leaf'])
        out.append(f"graph before ({computed} compute nodes):")
        out += before
        out.append(f"graph after ({len(result.graph.compute)} compute nodes):")
        out += after
    out.append("")
    out.append("rules applied (modeled time and kernel count after each, and the change in time):")
    previous = None
    for step in result.trace:
        delta = "" if previous is None else f"{(step.cost_s - previous) * 1e6:>+10.2f} us"
        out.append(
            f"  {step.rule:<22}{step.site:<34}{step.cost_s * 1e6:>10.2f} us {step.kernels:>4} kernels "
            f"{delta}".rstrip()
        )
        previous = step.cost_s
    out.append("")
    claim, rows = untaken_rows(result)
    out.append(f"moves the search did not take (each alone, from the chosen schedule; {claim}):")
    out += (
        format_table(UNTAKEN_HEADER, rows)
        if rows
        else ["  none: no rule applies anywhere in the chosen schedule"]
    )
    out.append("")
    out.append("kernels:")
    for kernel in program.kernels:
        out.append(f"  {kernel.name}: " + ", ".join(program.names.label(n) for n in kernel.nodes))
    out += cost_table(
        program.kernels,
        [k.cost for k in program.kernels],
        result.graph.output_nodes,
        result.graph.nodes,
        result.bindings,
    )
    return "\n".join(out)

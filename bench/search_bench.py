"""What the search buys under the H200 cost model, on six workloads.

For each workload: kernels of the plain lowering (compile(search=False)) and of the searched program,
the searched program's modeled bytes (sum of KernelCost.bytes) against the minimum any program must
move (refcomp.search.cost.minimum_bytes), predicted time before (the search trace's "start" step:
the plain lowering under the same model) and after, and the search time (median of 5 compiles).
Targets are printed next to the numbers, and every missed one is reported, with the searched
program's cost table so the reason can be read off.

    REFCOMP_CACHE_DIR=/tmp/rc-cache python bench/search_bench.py [--repeats 5] [--only softmax ...]

Writes bench/results/search.json. Workloads are shared with bench/gpu_bench.py.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make the repository importable
    sys.path.insert(0, str(ROOT))

import refcomp as rc  # noqa: E402
from refcomp.search.cost import H200, minimum_bytes  # noqa: E402

RESULTS = ROOT / "bench" / "results"


@dataclass
class Workload:
    name: str
    build: Callable[[], tuple]  # () -> (outputs, fixed feeds {name: array} such as real weights)
    dims_hint: dict
    max_kernels: Optional[int] = None  # target: the searched program has at most this many kernels
    max_bytes_ratio: Optional[float] = None  # target: modeled bytes / minimum bytes at most this
    note: str = ""


def _elementwise():
    x = rc.input("x", ("B", 4096))
    y = ((x * 2.0 + 1.0).relu() * x).tanh()
    return (y - x).sigmoid() * x + 0.5, {}


def _softmax():
    return rc.input("x", ("B", 1024)).softmax(-1), {}


def _layer_norm():
    x, g, b = rc.input("x", ("B", 1024)), rc.input("g", (1024,)), rc.input("b", (1024,))
    return rc.nn.layer_norm(x, g, b), {}


def _mlp():
    x = rc.input("x", ("B", 784))
    w1, b1 = rc.input("w1", (256, 784)), rc.input("b1", (256,))
    w2, b2 = rc.input("w2", (10, 256)), rc.input("b2", (10,))
    return rc.nn.linear(rc.nn.linear(x, w1, b1).relu(), w2, b2), {}


def _conv():
    x = rc.input("x", ("N", 16, 32, 32))
    w, b = rc.input("w", (32, 16, 3, 3)), rc.input("b", (32,))
    return rc.nn.max_pool2d(rc.nn.conv2d(x, w, b, padding=1).relu(), 2), {}


def _gpt2():
    from examples.gpt2_block import build_block
    return build_block()


WORKLOADS = [
    Workload("elementwise", _elementwise, {"B": 1024}, 1, 1.25, "8-op chain on (B, 4096)"),
    Workload("softmax", _softmax, {"B": 1024}, 1, 1.25, "rows of 1024"),
    Workload("layer_norm", _layer_norm, {"B": 1024}, 1, 1.25, "rows of 1024, gain and bias"),
    Workload("mlp", _mlp, {"B": 1024}, 3, None, "784-256-10, relu; matmul: no bytes target"),
    Workload(
        "conv_block",
        _conv,
        {"N": 8},
        None,
        None,
        "conv2d 16->32 3x3 pad 1 + relu + max_pool2d 2, 32x32; contraction: no target",
    ),
    Workload(
        "gpt2_block", _gpt2, {"B": 8, "T": 128}, 12, None, "examples/gpt2_block.py; matmul: no bytes target"
    ),
]


@dataclass
class Row:
    name: str
    binding: dict
    kernels_plain: int
    kernels_plain_model: int  # the trace's start step (should equal kernels_plain)
    kernels_search: int
    modeled_bytes: int
    minimum_bytes: int
    bytes_ratio: float
    predicted_before_s: float
    predicted_after_s: float
    compile_s_median: float  # rc.compile(search=True), median of `repeats`
    search_s_median: float  # SearchResult.seconds (the search alone), median of `repeats`
    compile_s_first: float  # the first compile of the workload in this process (cold in-process caches)
    states: int
    candidates: int
    max_kernels: Optional[int]
    max_bytes_ratio: Optional[float]
    missed: list = field(default_factory=list)
    note: str = ""
    cost_table: str = ""

    @property
    def speedup(self) -> float:
        return self.predicted_before_s / self.predicted_after_s if self.predicted_after_s else float("nan")


def bench_workload(w: Workload, repeats: int = 5) -> Row:
    outputs, _ = w.build()
    plain = rc.compile(outputs, search=False)
    compile_times, search_times, prog = [], [], None
    for _ in range(max(repeats, 1)):
        started = time.perf_counter()
        prog = rc.compile(outputs, search=True, dims_hint=w.dims_hint, cache=False)
        compile_times.append(time.perf_counter() - started)
        search_times.append(prog.search.seconds)
    r = prog.search
    start = r.trace[0]
    assert start.rule == "start", r.trace[0]
    modeled = sum(c.bytes for c in r.costs)
    least = minimum_bytes(r.graph.output_nodes, r.graph.nodes, r.bindings)
    row = Row(
        w.name,
        dict(r.bindings),
        len(plain.kernels),
        start.kernels,
        len(prog.kernels),
        modeled,
        least,
        modeled / max(least, 1),
        start.cost_s,
        r.time_s,
        statistics.median(compile_times),
        statistics.median(search_times),
        compile_times[0],
        r.states,
        len(r.candidates),
        w.max_kernels,
        w.max_bytes_ratio,
        note=w.note,
        cost_table=prog.cost_summary(),
    )
    if w.max_kernels is not None and row.kernels_search > w.max_kernels:
        row.missed.append(f"{row.kernels_search} kernels > target {w.max_kernels}")
    if w.max_bytes_ratio is not None and row.bytes_ratio > w.max_bytes_ratio:
        row.missed.append(f"bytes ratio {row.bytes_ratio:.2f} > target {w.max_bytes_ratio:.2f}")
    return row


def bench_rows(workloads=None, repeats: int = 5, log=None) -> list[Row]:
    rows = []
    for w in WORKLOADS if workloads is None else workloads:
        if log:
            print(f"... {w.name}", file=log, flush=True)
        rows.append(bench_workload(w, repeats))
    return rows


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f}"


def format_table(rows: list[Row]) -> str:
    head = (
        f"{'workload':<12} {'binding':<14} {'kernels':>8} {'target':>6} {'model MB':>10} {'min MB':>8} "
        f"{'ratio':>6} {'target':>6} {'before us':>10} {'after us':>9} {'x':>6} {'search s':>9} "
        f"{'compile s':>9} {'first s':>8}  status"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        binding = ",".join(f"{k}={v}" for k, v in r.binding.items()) or "-"
        kt = f"<={r.max_kernels}" if r.max_kernels is not None else "-"
        bt = f"<={r.max_bytes_ratio:g}" if r.max_bytes_ratio is not None else "-"
        status = "ok" if not r.missed else "MISSED: " + "; ".join(r.missed)
        if r.max_kernels is None and r.max_bytes_ratio is None:
            status = "(no target)"
        lines.append(
            f"{r.name:<12} {binding:<14} {f'{r.kernels_plain}->{r.kernels_search}':>8} {kt:>6} "
            f"{_mb(r.modeled_bytes):>10} {_mb(r.minimum_bytes):>8} {r.bytes_ratio:>6.2f} {bt:>6} "
            f"{r.predicted_before_s * 1e6:>10.2f} {r.predicted_after_s * 1e6:>9.2f} {r.speedup:>6.2f} "
            f"{r.search_s_median:>9.3f} {r.compile_s_median:>9.3f} {r.compile_s_first:>8.3f}  {status}"
        )
    lines.append("")
    lines.append(
        f"kernels: plain -> searched. model MB: sum of the searched program's KernelCost.bytes; "
        f"min MB: every input read once and every output written once; before/after: predicted time "
        f"on the {H200.name} profile ({H200.bandwidth / 1e12:g} TB/s, {H200.flops / 1e12:g} TFLOP/s fp32, "
        f"{H200.launch_s * 1e6:g} us per launch) of the plain lowering (the trace's start step) and of "
        f"the searched program; search s: "
        f"SearchResult.seconds, and compile s: the whole rc.compile(search=True), medians of the compiles; "
        f"first s: the first of them (cold caches)."
    )
    for r in rows:
        if r.kernels_plain != r.kernels_plain_model:
            lines.append(
                f"note: {r.name}: compile(search=False) gives {r.kernels_plain} kernels "
                f"but the search's start step models {r.kernels_plain_model}; "
                f"'before' is the model's plain lowering"
            )
    return "\n".join(lines)


def format_misses(rows: list[Row]) -> str:
    missed = [r for r in rows if r.missed]
    if not missed:
        return "targets: all met"
    out = [f"targets: {len(missed)} workload(s) MISSED a target:"]
    for r in missed:
        out.append(f"  {r.name}: " + "; ".join(r.missed) + " - the searched program's kernels:")
        out.append(r.cost_table)
    return "\n".join(out)


def to_json(rows: list[Row]) -> dict:
    return {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": platform.python_version(),
        "profile": asdict(H200),
        "workloads": [{**{k: v for k, v in asdict(r).items() if k != "cost_table"}, "speedup": r.speedup,
                       "targets_met": not r.missed} for r in rows],
        "targets_missed": [{"workload": r.name, "missed": r.missed} for r in rows if r.missed],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeats", type=int, default=5, help="compiles per workload (the search time is their median)"
    )
    parser.add_argument("--only", nargs="*", help="workload names to run (default: all)")
    parser.add_argument("--out", default=str(RESULTS / "search.json"), help="JSON output path ('' for none)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    workloads = [w for w in WORKLOADS if not args.only or w.name in args.only]
    unknown = set(args.only or ()) - {w.name for w in WORKLOADS}
    if unknown:
        parser.error(f"unknown workload(s) {sorted(unknown)}; choose from {[w.name for w in WORKLOADS]}")
    rows = bench_rows(workloads, args.repeats, log=sys.stderr)
    print(format_table(rows))
    print()
    print(format_misses(rows))
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(to_json(rows), indent=2) + "\n")
        print(f"\nwrote {os.path.relpath(path)}")
    return 1 if args.strict and any(r.missed for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

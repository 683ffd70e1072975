"""Issue 14's SPMD table: the shardings refcomp's search finds on a dp=2 x tp=4 mesh, beside GSPMD's.

Three workloads, x annotated ("dp", None, None) and the weights left to the search: a Megatron MLP
512-2048-512, a GPT-2 block (D=512, 8 heads, separate q, k, v weights) and the same block with one
fused (D, 3D) q|k|v weight, all at B=8, T=128. Per
workload: the shardings found, the collectives by kind, their bytes per device, and the sharding
search's time (median of `--repeats` calls of refcomp.spmd.search.search_shardings, timed apart from
the stage compiles of rc.spmd.compile).

GSPMD runs in a child process of another Python (`--jax-python`, one with JAX installed; refcomp
does not depend on JAX) on 8 simulated CPU devices: bench/spmd_bench_jax.py counts the collectives
of the compiled HLO for the Megatron shardings written by hand, and for a fused QKV weight (D, 3D)
annotated the natural way, P(None, "tp"). Without it the table shows the issue's figures.

    PYTHONPATH=. python bench/spmd_bench.py [--jax-python /tmp/jaxenv/bin/python] [--repeats 3]
        # prints the table, writes bench/results/spmd.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "bench"):  # run as a script: the repository, and the benches' shared helpers
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import refcomp as rc  # noqa: E402
from examples.spmd_gpt2 import gpt2_block  # noqa: E402
from results_file import write_results  # noqa: E402
from refcomp.ops.graph import flatten_outputs, input_nodes, toposort  # noqa: E402
from refcomp.spmd.search import search_shardings  # noqa: E402

OUT = ROOT / "bench" / "results" / "spmd.json"
MESH, HINT = {"dp": 2, "tp": 4}, {"B": 8, "T": 128}
# GSPMD's figures as issue 14 states them: (case, workload, collectives, bytes per device)
ISSUE = {"mlp_by_hand": ("mlp", "1 all-reduce", None),
         "gpt2_by_hand": ("gpt2", "2 all-reduce", 2_097_152),
         "gpt2_fused_qkv_natural": ("gpt2_fused", "7 collective-permute + 2 all-reduce", 4_718_592)}
GSPMD_SHARDINGS = {"mlp_by_hand": "w1 (None,tp); w2 (tp,None): by hand",
                   "gpt2_by_hand": "wq,wk,wv,w1 (None,tp); wo,w2 (tp,None): by hand",
                   "gpt2_fused_qkv_natural": "wqkv (D,3D) (None,tp); wo,w2 (tp,None); w1 (None,tp)"}


def mlp(d=512, hidden=2048):
    x = rc.input("x", ("B", "T", d), sharding=("dp", None, None))
    return (x @ rc.input("w1", (d, hidden))).gelu(approximate="tanh") @ rc.input("w2", (hidden, d))


WORKLOADS = {"mlp": ("MLP 512-2048-512", mlp), "gpt2": ("GPT-2 block D=512 H=8", gpt2_block),
             "gpt2_fused": ("GPT-2 block, fused QKV", lambda: gpt2_block(fused_qkv=True))}


def time_search(y, mesh, repeats: int) -> list[float]:
    """search_shardings alone, prepared as rc.spmd.compile prepares it (specs from the annotations)."""
    tensors, _ = flatten_outputs(y)
    edges = [t.edge for t in tensors]
    inputs = input_nodes(toposort([e.node for e in edges]))
    specs = {n.attrs["name"]: n.attrs["sharding"] for n in inputs if n.attrs.get("sharding") is not None}
    free = [n for n in inputs if n.attrs["name"] not in specs and n.dtype != "int32"]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        search_shardings(edges, mesh, dict(specs), free, HINT)
        times.append(time.perf_counter() - started)
    return times


def show_shardings(shardings: dict) -> str:
    """Weights grouped by sharding, 2-d ones first ('wq,wk (None,tp); ...'); x (annotated) left out."""
    groups: dict = {}
    for name, spec in shardings.items():
        if name != "x":
            groups.setdefault(spec, []).append(name)
    fmt = lambda spec: "(" + ",".join(str(a) for a in spec) + ")"  # noqa: E731
    return "; ".join(
        f"{','.join(names)} {fmt(spec)}" for spec, names in sorted(groups.items(), key=lambda g: -len(g[0]))
    )


def show_counts(counts: dict) -> str:
    return " + ".join(f"{n} {kind}" for kind, n in counts.items()) or "none"


def run_refcomp(key: str, repeats: int) -> dict:
    mesh = rc.Mesh(MESH)
    y = WORKLOADS[key][1]()
    search_s = time_search(y, mesh, repeats)
    started = time.perf_counter()
    prog = rc.spmd.compile(y, mesh, dims_hint=HINT)  # search again, then every stage compiled
    return {
        "shardings": {k: list(v) for k, v in prog.shardings.items()},
        "collectives": [
            {
                "kind": c.kind,
                "axis": c.axis,
                "tensor": c.tensor,
                "bytes_per_device": c.bytes_per_device,
                "time_s": c.time_s,
            }
            for c in prog.collectives
        ],
        "counts": dict(Counter(c.kind for c in prog.collectives)),
        "bytes_per_device": sum(c.bytes_per_device for c in prog.collectives),
        "search_s": search_s,
        "search_s_median": statistics.median(search_s),
        "spmd_compile_s": time.perf_counter() - started,
        "stages": len(prog.stages),
        "table": show_shardings(prog.shardings),
    }


def run_jax(python: str | None) -> tuple[dict | None, str]:
    """(the JAX child's JSON, or None; a note saying what ran or why not)."""
    if not python:
        return None, "GSPMD not run (no --jax-python): the issue's figures"
    try:
        proc = subprocess.run(
            [python, str(ROOT / "bench" / "spmd_bench_jax.py")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"GSPMD not run ({python}: {exc}): the issue's figures"
    if proc.returncode != 0:
        return None, f"GSPMD not run ({python} failed: {proc.stderr.strip()[-300:]}): the issue's figures"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result, f"GSPMD measured: JAX {result['jax']} on {result['devices']} simulated CPU devices"


def format_table(rows: list[dict]) -> str:
    cols = ["workload", "system", "shardings", "collectives", "B/device", "search s", "issue's GSPMD figure"]
    widths = {c: max(len(str(r[c])) for r in [dict(zip(cols, cols))] + rows) for c in cols}
    lines = [
        "  ".join(f"{str(r[c]):<{widths[c]}}" for c in cols).rstrip() for r in [dict(zip(cols, cols))] + rows
    ]
    return "\n".join([lines[0], "-" * len(lines[0]), *lines[1:]])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jax-python", help="a Python with JAX installed, for the GSPMD rows")
    parser.add_argument("--repeats", type=int, default=3, help="search_shardings calls per median")
    parser.add_argument("--out", default=str(OUT), help="JSON output path ('' for none)")
    args = parser.parse_args(argv)
    load_start, started = os.getloadavg(), time.perf_counter()
    ours = {key: run_refcomp(key, args.repeats) for key in WORKLOADS}
    gspmd, note = run_jax(args.jax_python)
    rows = []
    for key, (label, _) in WORKLOADS.items():
        r = ours[key]
        rows.append({"workload": label, "system": "refcomp (searched)", "shardings": r["table"],
                     "collectives": show_counts(r["counts"]), "B/device": f"{r['bytes_per_device']:,}",
                     "search s": f"{r['search_s_median']:.2f}", "issue's GSPMD figure": ""})
        for case, (workload, figure, figure_bytes) in ISSUE.items():
            if workload != key:
                continue
            m = gspmd["cases"][case] if gspmd else None
            rows.append(
                {
                    "workload": "",
                    "system": "GSPMD " + ("(measured)" if m else "(issue's figure)"),
                    "shardings": GSPMD_SHARDINGS[case],
                    "collectives": show_counts(m["counts"]) if m else figure,
                    "B/device": f"{m['bytes_per_device']:,}"
                    if m
                    else (f"{figure_bytes:,}" if figure_bytes else "-"),
                    "search s": "-",
                    "issue's GSPMD figure": figure + (f", {figure_bytes:,} B" if figure_bytes else ""),
                }
            )
    elapsed = time.perf_counter() - started
    print(format_table(rows))
    print(
        f"\nmesh dp=2 x tp=4, B=8 T=128; search s: median of {args.repeats} search_shardings calls; {note}; "
        f"bench took {elapsed:.0f} s"
    )
    if args.out:
        write_results(
            args.out,
            "bench/spmd_bench.py",
            load_start,
            elapsed,
            mesh=MESH,
            dims=HINT,
            gspmd=note,
            rows=rows,
            refcomp=ours,
            gspmd_measured=gspmd,
            gspmd_issue_figures=ISSUE,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

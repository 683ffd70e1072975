"""Sorting at real sizes: topk(50) over a GPT-2 vocabulary and sort of 4,096 floats.

For each workload: the graph's node count (refcomp.ops.graph.toposort of the outputs), rc.compile
with the search on and the program cache off (the first compile in this process, whose SymPy
caches are cold, and the median over --rounds compiles; the search's own seconds beside it), the first
emulator run (which builds the kernels with g++ into a
fresh kernel cache, so it counts the build) and the warm emulator run (median of --repeats), and
whether the emulator's outputs equal the NumPy reference's bit for bit. `--profile` also records
where one compile spends its time (cProfile, the heaviest functions by cumulative time).

    python bench/sorting_bench.py [--rounds 3] [--repeats 5] [--profile]
        # prints a table, writes bench/results/sorting.json

Targets (issue 28): topk(50) of (8, 50257) compiles in at most 3 s and runs in at most 50 ms on the
emulator; sort of 4,096 floats builds at most 400 nodes.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from results_file import write_results  # noqa: E402

WORKLOADS = {  # name: (input shape, build, targets)
    "topk5_1x65": (
        (1, 65),
        lambda x: list(x.topk(5)),
        {},
    ),  # issue 28's example: 6,431 nodes, 96 s, 57 kernels before
    "topk50_8x50257": ((8, 50257), lambda x: list(x.topk(50)), {"compile_s": 3.0, "emulator_s": 0.050}),
    "sort_4096": ((4096,), lambda x: list(x.sort()), {"nodes": 400}),
}


def _profile(rc, outputs) -> list[str]:
    """The heaviest functions of one compile by cumulative time, as pstats prints them."""
    profiler = cProfile.Profile()
    profiler.enable()
    rc.compile(outputs, cache=False)
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(25)
    lines = [line for line in text.getvalue().splitlines() if "(" in line and "/" in line]
    return [" ".join(line.split()) for line in lines]


def measure(name: str, rounds: int, repeats: int, profile: bool) -> dict:
    import refcomp as rc
    from refcomp.ops.graph import toposort
    shape, build, targets = WORKLOADS[name]
    outputs = build(rc.input("x", shape))
    feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    entry = {"shape": list(shape), "nodes": len(toposort([t.node for t in outputs])), "targets": targets}
    compiles, searches = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        prog = rc.compile(outputs, cache=False)
        compiles.append(time.perf_counter() - start)
        searches.append(prog.search.seconds)
    entry.update(compile_first_s=compiles[0], compile_s=statistics.median(compiles), compile_all_s=compiles,
                 search_s=statistics.median(searches),
                 search_complete=prog.search.complete, kernels=len(prog.kernels))
    start = time.perf_counter()
    got = prog.run(feeds, backend="emulator")
    entry["first_run_with_build_s"] = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        prog.run(feeds, backend="emulator")
        times.append(time.perf_counter() - start)
    entry.update(emulator_s=statistics.median(times), emulator_all_s=times)
    want = rc.evaluate(outputs, feeds)
    entry["matches_reference"] = all(np.array_equal(g, w) for g, w in zip(got, want))
    entry["meets"] = {key: entry[key] <= limit for key, limit in targets.items()}
    if profile:
        entry["profile_top"] = _profile(rc, outputs)
    print(
        f"  {name}: {entry['nodes']} nodes, compile {entry['compile_s']:.2f} s, "
        f"emulator {entry['emulator_s'] * 1e3:.1f} ms",
        file=sys.stderr,
        flush=True,
    )
    return entry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--rounds", type=int, default=3, help="compiles per workload (the median is reported)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="warm emulator runs per workload")
    parser.add_argument("--profile", action="store_true", help="also profile one compile per workload")
    args = parser.parse_args()
    load_start, start = os.getloadavg(), time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["REFCOMP_CACHE_DIR"] = cache  # the first run builds every kernel
        rows = {
            name: measure(name, args.rounds, args.repeats, args.profile) for name in args.workloads.split(",")
        }
    print(
        f"{'workload':<16}{'nodes':>7}{'kernels':>9}{'1st compile s':>15}{'compile s':>11}{'search s':>10}"
        f"{'first run s':>13}{'emulator ms':>13}{'exact':>7}  targets"
    )
    for name, r in rows.items():
        met = ", ".join(f"{k} <= {v} {'yes' if r['meets'][k] else 'NO'}" for k, v in r["targets"].items())
        print(
            f"{name:<16}{r['nodes']:>7}{r['kernels']:>9}{r['compile_first_s']:>15.2f}{r['compile_s']:>11.2f}"
            f"{r['search_s']:>10.2f}{r['first_run_with_build_s']:>13.2f}{r['emulator_s'] * 1e3:>13.1f}"
            f"{str(r['matches_reference']):>7}  {met}"
        )
    write_results(ROOT / "bench" / "results" / "sorting.json", "bench/sorting_bench.py", load_start,
                  time.perf_counter() - start, rounds=args.rounds, repeats=args.repeats, workloads=rows)


if __name__ == "__main__":
    main()

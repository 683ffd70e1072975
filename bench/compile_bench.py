"""Compile time in a fresh process, without and with the compiled-program cache.

For each model, N fresh Python processes each build the graph and time `rc.compile(graph)`:
the first process of a round finds an empty program cache (it searches, lowers and stores), the
second finds the stored program and loads it. The kernel cache is shared and warm throughout, so
the figures are the compiler's own time (the compiler's modules load on the first rc.compile, so the
first process's figure counts their import). Medians over the rounds, side by side; each round also
times bench/numpy_workload.py in a fresh process, and the first process's seconds over the
workload's are reported with them. Each run is added to the file under its --label.

    python bench/compile_bench.py [--rounds 3] [--label after]   # adds to bench/results/compile_cache.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from numpy_workload import in_fresh_process as numpy_workload_s  # noqa: E402

OUT = ROOT / "bench" / "results" / "compile_cache.json"
WORKLOADS = {
    "minilm": "from examples.minilm import graph; outputs = graph()",
    "gpt2_block": "from examples.gpt2_block import build_block; outputs, _ = build_block()",
}
CHILD = """
import time, sys
sys.path.insert(0, {root!r})
import refcomp as rc
{build}
t = time.perf_counter()
prog = rc.compile(outputs)
print(time.perf_counter() - t, len(prog.kernels), prog.search is None)
"""


def one_process(build: str, cache_dir: str) -> tuple[float, int, bool]:
    env = dict(os.environ, REFCOMP_PROGRAM_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), build=build)], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), int(out[1]), out[2] == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--label", default=time.strftime("%Y-%m-%dT%H:%M"),
                        help="this run's name in the file")
    args = parser.parse_args()
    load_start = os.getloadavg()
    rows = []
    for name, build in WORKLOADS.items():
        first, second, numpy_s, kernels = [], [], [], 0
        for _ in range(args.rounds):
            numpy_s.append(numpy_workload_s())
            with tempfile.TemporaryDirectory() as programs:
                t, kernels, loaded = one_process(build, programs)
                assert not loaded, "the first process found a cached program"
                first.append(t)
                t, _, loaded = one_process(build, programs)
                assert loaded, "the second process searched again"
                second.append(t)
        rows.append({"workload": name, "kernels": kernels, "first_process_s": statistics.median(first),
                     "second_process_s": statistics.median(second),
                     "numpy_workload_s": statistics.median(numpy_s),
                     "first_over_numpy": statistics.median(first) / statistics.median(numpy_s),
                     "first_all": first, "second_all": second, "numpy_all": numpy_s})
    print(f"{'workload':<12}{'kernels':>8}{'first process s':>17}{'second process s':>18}{'ratio':>8}"
          f"{'numpy s':>9}{'first / numpy':>15}")
    for r in rows:
        print(f"{r['workload']:<12}{r['kernels']:>8}{r['first_process_s']:>17.3f}{r['second_process_s']:>18.3f}"
              f"{r['second_process_s'] / r['first_process_s']:>8.3f}{r['numpy_workload_s']:>9.3f}"
              f"{r['first_over_numpy']:>15.2f}")
    run = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
           "revision": revision(), "load_average_at_start": load_start,
           "load_average_at_end": os.getloadavg(), "rounds": args.rounds, "workloads": rows}
    runs = earlier_runs()
    runs[args.label] = run
    OUT.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} (run {args.label!r})")


def revision() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def earlier_runs() -> dict:
    """The file's runs by label; a file of one unlabelled run (as this bench wrote before) keeps it as
    "earlier"."""
    if not OUT.exists():
        return {}
    old = json.loads(OUT.read_text())
    return old["runs"] if "runs" in old else {"earlier": old}


if __name__ == "__main__":
    main()

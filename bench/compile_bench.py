"""Compile time in a fresh process, without and with the compiled-program cache.

For each model, N fresh Python processes each build the graph and time `rc.compile(graph)`:
the first process of a round finds an empty program cache (it searches, lowers and stores), the
second finds the stored program and loads it. The kernel cache is shared and warm throughout, so
the figures are the compiler's own time. Medians over the rounds, side by side.

    python bench/compile_bench.py [--rounds 3]      # writes bench/results/compile_cache.json
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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
    args = parser.parse_args()
    rows = []
    for name, build in WORKLOADS.items():
        first, second, kernels = [], [], 0
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as programs:
                t, kernels, loaded = one_process(build, programs)
                assert not loaded, "the first process found a cached program"
                first.append(t)
                t, _, loaded = one_process(build, programs)
                assert loaded, "the second process searched again"
                second.append(t)
        rows.append({"workload": name, "kernels": kernels, "first_process_s": statistics.median(first),
                     "second_process_s": statistics.median(second), "first_all": first, "second_all": second})
    print(f"{'workload':<12}{'kernels':>8}{'first process s':>17}{'second process s':>18}{'ratio':>8}")
    for r in rows:
        print(f"{r['workload']:<12}{r['kernels']:>8}{r['first_process_s']:>17.3f}{r['second_process_s']:>18.3f}"
              f"{r['second_process_s'] / r['first_process_s']:>8.3f}")
    out = ROOT / "bench" / "results" / "compile_cache.json"
    out.write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "machine": platform.machine(),
                "cpus": os.cpu_count(),
                "rounds": args.rounds,
                "workloads": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""The NumPy reference interpreter's speed: rc.evaluate on ResNet-18 (batch 1), the GPT-2 block and the
MLP, in this tree and (with --base-tree) in another checkout, each in a fresh child process, against
NumPy written directly (bench/emulator_bench.py's oracles) for the answer.

    PYTHONPATH=. python bench/reference_bench.py [--base-tree ../main_base] [--repeats 3] [--skip-base-resnet]
        # prints the table, writes bench/results/reference.json

The base tree's ResNet-18 takes minutes (bench/results/reference.json); --skip-base-resnet leaves it
out.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "results" / "reference.json"

CHILD = r"""
import json, sys, time
sys.path.insert(0, {tree!r}); sys.path.insert(0, {bench!r})
import numpy as np
import refcomp as rc
import emulator_bench as eb
graphs = {{"resnet18": lambda: (eb.resnet18(rc), eb.resnet18_numpy),
           "gpt2_block": lambda: (eb.gpt2_block(rc), None), "mlp": lambda: (eb.mlp(rc), None)}}
(out, feeds), oracle = graphs[{workload!r}]()
times = []
for _ in range({repeats}):
    t = time.perf_counter(); got = rc.evaluate(out, feeds); times.append(time.perf_counter() - t)
err = None if oracle is None else float(
    np.abs(np.asarray(got, np.float64) - oracle(feeds)).max() / max(np.abs(oracle(feeds)).max(), 1e-30))
print(json.dumps({{"seconds": times, "rel_error": err}}))
"""


def run(tree: Path, workload: str, repeats: int) -> dict:
    code = CHILD.format(tree=str(tree), bench=str(ROOT / "bench"), workload=workload, repeats=repeats)
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tree)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-800:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-tree", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-base-resnet", action="store_true")
    args = parser.parse_args()
    rows = []
    for workload in ("resnet18", "gpt2_block", "mlp"):
        now = run(ROOT, workload, args.repeats)
        base = None
        if args.base_tree and not (workload == "resnet18" and args.skip_base_resnet):
            base = run(Path(args.base_tree), workload, 1 if workload == "resnet18" else args.repeats)
        row = {
            "workload": workload,
            "now_s": statistics.median(now["seconds"]) if "seconds" in now else None,
            "now": now,
            "base_s": statistics.median(base["seconds"]) if base and "seconds" in base else None,
            "base": base,
        }
        row["ratio"] = row["now_s"] / row["base_s"] if row["now_s"] and row["base_s"] else None
        rows.append(row)
        print(
            f"{workload:12s} now {row['now_s'] or float('nan'):9.3f} s   "
            f"base {row['base_s'] or float('nan'):9.3f} s   "
            f"ratio {row['ratio'] or float('nan'):.4f}   rel error vs NumPy {now.get('rel_error')}",
            flush=True,
        )
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    OUT.write_text(
        json.dumps(
            {
                "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
                "revision": rev,
                "command": "PYTHONPATH=. python bench/reference_bench.py " + " ".join(sys.argv[1:]),
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

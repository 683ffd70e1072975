"""Wall time of the default test suite, before and after, measured back to back in one run.

    python bench/suite_bench.py [--base-rev 65eff5e]

Runs `pytest -q` three times: in a worktree of the base revision (the last commit before emulator
2.0, whose suite the emulator issue measured as "today"), in this tree as the README runs it (every
core, through pytest-xdist), and in this tree in one process (`-n0`), so the gain from faster code
and the gain from using both cores are reported apart. Kernel caches are whatever the machine has
(warm after the first run of each tree). Prints a table and writes bench/results/suite.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulator_bench import base_tree  # noqa: E402  (one way to make the base worktree)


def run_suite(tree: Path, extra: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra], cwd=tree, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    passed = re.search(r"(\d+) passed", tail)
    return {"wall_s": round(seconds, 2), "exit_code": proc.returncode, "summary": tail,
            "passed": int(passed.group(1)) if passed else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-rev", default="65eff5e")
    parser.add_argument("--base-tree", default=str(ROOT.parent / (ROOT.name + "_base")))
    args = parser.parse_args()
    tree = base_tree(args.base_rev, Path(args.base_tree))
    runs = {"before (base revision, one process)": run_suite(tree, []),
            "after (README: pytest, all cores)": run_suite(ROOT, []),
            "after, one process (-n0)": run_suite(ROOT, ["-n0"])}
    before = runs["before (base revision, one process)"]["wall_s"]
    print(f"{'run':<40} {'wall s':>8} {'ratio':>7} {'passed':>7}  exit")
    for name, r in runs.items():
        r["ratio_to_before"] = round(r["wall_s"] / before, 3)
        print(f"{name:<40} {r['wall_s']:8.1f} {r['ratio_to_before']:7.2f} {r['passed'] or '-':>7}  {r['exit_code']}")
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(),
              "revision": rev, "base_revision": args.base_rev, "target_ratio": 0.6, "runs": runs}
    out = ROOT / "bench" / "results" / "suite.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""Wall time of the default test suite, before and after, measured back to back in one run.

    python bench/suite_bench.py [--base-rev 65eff5e]

Runs `pytest -q` three times: in a worktree of the base revision (the last commit before emulator
2.0, whose suite the emulator issue measured as "today"), in this tree as the README runs it (every
core, through pytest-xdist), and in this tree in one process (`-n0`), so the gain from faster code
and the gain from using both cores are reported apart. A fourth run takes only the tests the base
revision has that still exist under the same id (the suite has grown since, with the features of
later issues): the same tests, the base's code against this one. Kernel caches are whatever the machine has
(warm after the first run of each tree). With `--cold`, each run gets its own empty kernel and
program cache (`REFCOMP_CACHE_DIR`), as a new user's first `pytest` after a clean clone: every
emulator library is built by g++ inside the timed run. Prints a table and writes
bench/results/suite.json (the warm and the cold figures are kept side by side).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulator_bench import base_tree  # noqa: E402  (one way to make the base worktree)


def run_suite(tree: Path, extra: list[str], cold: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    if cold:  # a fresh cache for this run alone; the program cache lives under it unless redirected
        env["REFCOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="refcomp-suite-cold-")
        env.pop("REFCOMP_PROGRAM_CACHE_DIR", None)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra], cwd=tree, env=env,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    passed = re.search(r"(\d+) passed", tail)
    return {"wall_s": round(seconds, 2), "exit_code": proc.returncode, "summary": tail,
            "passed": int(passed.group(1)) if passed else None}


def collected_ids(tree: Path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n0"],
                          cwd=tree, env=env, capture_output=True, text=True)
    return [line for line in proc.stdout.splitlines() if "::" in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-rev", default="65eff5e")
    parser.add_argument("--base-tree", default=str(ROOT.parent / (ROOT.name + "_base")))
    parser.add_argument("--cold", action="store_true", help="every run starts from an empty kernel cache")
    args = parser.parse_args()
    tree = base_tree(args.base_rev, Path(args.base_tree))
    runs = {"before (base revision, one process)": run_suite(tree, [], args.cold),
            "after (README: pytest, all cores)": run_suite(ROOT, [], args.cold),
            "after, one process (-n0)": run_suite(ROOT, ["-n0"], args.cold)}
    same = sorted(set(collected_ids(tree)) & set(collected_ids(ROOT)))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as ids:
        ids.write("\n".join(same) + "\n")
    runs["after, only the base's tests (README: pytest)"] = {**run_suite(ROOT, [f"@{ids.name}"], args.cold), "tests": len(same)}
    before = runs["before (base revision, one process)"]["wall_s"]
    print(f"{'run':<46} {'wall s':>8} {'ratio':>7} {'passed':>7}  exit")
    for name, r in runs.items():
        r["ratio_to_before"] = round(r["wall_s"] / before, 3)
        print(f"{name:<46} {r['wall_s']:8.1f} {r['ratio_to_before']:7.2f} {r['passed'] or '-':>7}  {r['exit_code']}")
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    mode = "cold" if args.cold else "warm"
    out = ROOT / "bench" / "results" / "suite.json"
    try:
        kept = json.loads(out.read_text())
    except (OSError, ValueError):
        kept = {}
    kept = {m: kept[m] for m in ("warm", "cold") if isinstance(kept.get(m), dict)}  # the other mode's last run stays
    kept[mode] = {"python": platform.python_version(), "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(),
                  "revision": rev, "base_revision": args.base_rev, "target_ratio": 0.6, "caches": mode, "runs": runs}
    out.write_text(json.dumps(kept, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

"""g++ time of the host emulator's libraries: what a first run pays before any kernel runs.

Builds the emulator library of every golden case in the covering slice (tests/cuda_cases.SLICE; all
cases with --all), plain and searched, into an empty kernel cache, one after another, and charges
each build the CPU seconds of its g++ child; then a one-kernel program. The cache's one-off builds
(the precompiled shim, the grid runner's object) are made by a warm-up program first and reported
apart, as a suite pays them once. With --base-rev the same programs are built by that revision's
emulator too, in a worktree, in turns with this tree's (the generated CUDA is the same; only the
emulator's build differs). Prints a table and writes bench/results/emulator_build.json.

    python bench/emulator_build_bench.py --base-rev 99943db
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_file import write_results

ROOT = Path(__file__).resolve().parent.parent


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child(all_cases: bool) -> dict:
    """In the tree on PYTHONPATH, with an empty REFCOMP_CACHE_DIR: build every program and time it."""
    sys.path.insert(0, str(Path.cwd() / "tests"))
    import refcomp as rc
    from refcomp.exec.emulator import EmulatorBackend
    from cuda_cases import CASES, SLICE

    def built(program) -> float:
        before = _children_cpu()
        EmulatorBackend().load(program.source, [k.signature for k in program.kernels])
        return _children_cpu() - before

    x = rc.input("x", (64, 32))
    # the first parses the shim, the second precompiles it (and the grid runner's object is made)
    warm_up = [built(rc.compile((x * 2.0 + 1.0).exp().sum(axis=1), search=False)),
               built(rc.compile((x * 3.0 - 1.0).sqrt(), search=False))]
    one_kernel = built(rc.compile((x * 7.0 + 1.0).exp().sum(axis=1), search=False))
    cases = [c for c in CASES if all_cases or c.name in SLICE]
    seconds = [built(rc.compile(c.build(), search=s, cache=False)) for c in cases for s in (False, True)]
    return {"libraries": len(seconds), "gxx_cpu_s": round(sum(seconds), 2),
            "median_library_s": round(statistics.median(seconds), 3), "one_kernel_s": round(one_kernel, 3),
            "warm_up_s": [round(s, 3) for s in warm_up]}


def measure(tree: Path, all_cases: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), REFCOMP_CACHE_DIR=tempfile.mkdtemp(prefix="refcomp-build-"),
               REFCOMP_EMU_OPTIMIZE="0", REFCOMP_PROGRESS="0")
    env.pop("REFCOMP_PROGRAM_CACHE_DIR", None)
    args = [sys.executable, str(Path(__file__).resolve()), "--child"] + (["--all"] if all_cases else [])
    proc = subprocess.run(args, env=env, cwd=tree, capture_output=True, text=True)
    sys.stderr.write(proc.stderr[-2000:])
    proc.check_returncode()
    return json.loads(proc.stdout.strip().splitlines()[-1])


def base_tree(rev: str) -> Path:
    tree = Path(tempfile.gettempdir()) / f"refcomp-build-base-{rev}"
    if not (tree / "refcomp" / "__init__.py").exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                       capture_output=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-rev", help="also build with this revision's emulator, in turns")
    parser.add_argument("--all", action="store_true", help="every golden case, not the covering slice")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each tree (the median is kept)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    load_start, start = os.getloadavg(), time.perf_counter()
    if args.child:
        print(json.dumps(child(args.all)))
        return
    trees = {"this tree": ROOT}
    if args.base_rev:
        trees[f"base {args.base_rev}"] = base_tree(args.base_rev)
    runs: dict = {name: [] for name in trees}
    for _ in range(args.repeats):  # in turns, so a change in the machine's load hits both trees alike
        for name, tree in trees.items():
            runs[name].append(measure(tree, args.all))
    rows = {}
    print(f"{'tree':<16} {'libraries':>9} {'g++ CPU s':>10} {'median lib s':>13} {'1 kernel s':>11}")
    for name, got in runs.items():
        row = {k: statistics.median(r[k] for r in got)
               for k in ("gxx_cpu_s", "median_library_s", "one_kernel_s")}
        row["libraries"], row["runs"] = got[0]["libraries"], got
        rows[name] = row
        print(f"{name:<16} {row['libraries']:>9} {row['gxx_cpu_s']:>10.2f} {row['median_library_s']:>13.3f} "
              f"{row['one_kernel_s']:>11.3f}")
    write_results(ROOT / "bench" / "results" / "emulator_build.json", "bench/emulator_build_bench.py",
                  load_start, round(time.perf_counter() - start, 1), cases="all" if args.all else "slice",
                  base_rev=args.base_rev, trees=rows)


if __name__ == "__main__":
    main()

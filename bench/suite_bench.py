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

    python bench/suite_bench.py --newcomer [--before-rev a2c22fb]

A new user's suite (issue 32; the issue's cold figure is suite.json's "issue_cold_s"): the README's
`pytest` in a worktree of --before-rev and in this tree, each first on an empty cache (cold), then
again on the cache that run left (warm), back to back. Besides the wall time it counts the emulator
libraries each run built (the .so files it added to the cache) and sums pytest's --durations per
file; this tree's runs also charge each test its CPU seconds and builds (bench/suite_cpu_plugin.py),
to say where the time went; kept as suite.json's "newcomer" entry.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulator_bench import base_tree  # noqa: E402  (one way to make the base worktree)

CPU_DIR_ENV = "REFCOMP_SUITE_CPU_DIR"  # where suite_cpu_plugin writes its rows
ISSUE_COLD_S = 13 * 60 + 45  # issue 32: "today's" first pytest from a fresh clone, empty caches, 2 cores


def run_suite(tree: Path, extra: list[str], cold: bool = False, cache: str | None = None,
              by_test: bool = False) -> dict:
    """One `pytest -q` in `tree`; `cache`: the kernel cache to use (else a fresh one when `cold`);
    `by_test`: charge each test its CPU seconds and g++ builds (bench/suite_cpu_plugin.py)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    if by_test:
        env["PYTHONPATH"] += os.pathsep + str(Path(__file__).resolve().parent)
        env[CPU_DIR_ENV] = tempfile.mkdtemp(prefix="refcomp-suite-cpu-")
        extra = ["-p", "suite_cpu_plugin", *extra]
    if cold or cache:  # a cache for this run alone; the program cache lives under it unless redirected
        env["REFCOMP_CACHE_DIR"] = cache or tempfile.mkdtemp(prefix="refcomp-suite-cold-")
        env.pop("REFCOMP_PROGRAM_CACHE_DIR", None)
    libraries = _libraries(env.get("REFCOMP_CACHE_DIR"))
    load = os.getloadavg()[0]
    start, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds, cpu = time.perf_counter() - start, _children_cpu() - cpu
    tail = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else proc.stderr[-300:]
    passed = re.search(r"(\d+) passed", tail)
    result = {
        "wall_s": round(seconds, 2),
        "exit_code": proc.returncode,
        "summary": tail,
        "passed": int(passed.group(1)) if passed else None,
        "load_average_at_start": round(load, 2),
        "cpu_s": round(cpu, 1),
    }  # user + system time of every process the suite ran: steadier than wall time under load
    if cache:
        result["libraries_built"] = _libraries(cache) - libraries
    if "--durations=0" in extra:
        result["seconds_by_file"] = _by_file(proc.stdout)
    if by_test:
        result.update(_cpu_by_test(env[CPU_DIR_ENV]))
    return result


def _cpu_by_test(folder: str, top: int = 15) -> dict:
    """The plugin's rows summed per file, and the costliest tests: CPU seconds (own + children) and
    emulator libraries built, which say where the time goes better than wall time on a busy machine."""
    rows = [json.loads(line) for path in Path(folder).glob("*.jsonl")
            for line in path.read_text().splitlines()]
    files: dict[str, list] = {}
    for row in rows:
        entry = files.setdefault(row["test"].split("::")[0], [0.0, 0])
        entry[0] += row["cpu_s"]
        entry[1] += row["builds"]
    ranked = sorted(files.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "failed": sorted(row["test"] for row in rows if row.get("failed")),
        "tests_cpu_s": round(sum(row["cpu_s"] for row in rows), 1),
        "cpu_s_and_builds_by_file": {f: [round(c, 1), b] for f, (c, b) in ranked},
        "costliest_tests_cpu_s": {
            row["test"]: round(row["cpu_s"], 1) for row in sorted(rows, key=lambda r: -r["cpu_s"])[:top]
        },
    }


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _libraries(cache: str | None) -> int:
    """Emulator libraries in a kernel cache (each built by g++ once)."""
    return len(list(Path(cache, "emu").glob("*.so"))) if cache else 0


def _by_file(stdout: str, top: int = 12) -> dict[str, float]:
    """pytest's --durations summed per test file (setup, call and teardown), the largest `top`."""
    files: dict[str, float] = {}
    for seconds, test in re.findall(r"^([\d.]+)s (?:setup|call|teardown) +(\S+?)::", stdout, re.M):
        files[test] = files.get(test, 0.0) + float(seconds)
    return {f: round(s, 1) for f, s in sorted(files.items(), key=lambda kv: -kv[1])[:top]}


def newcomer(before_rev: str, before_tree: Path, with_before: bool = True) -> dict:
    """Cold then warm, before and after, back to back: the README's pytest on a fresh clone.
    Without `with_before`, this tree alone (beside the issue's figure, ISSUE_COLD_S)."""
    trees = {"before": base_tree(before_rev, before_tree), "after": ROOT} if with_before else {"after": ROOT}
    caches = {name: tempfile.mkdtemp(prefix=f"refcomp-suite-{name}-") for name in trees}
    runs: dict = {name: {} for name in trees}
    for mode in ("cold", "warm"):  # interleaved, so a change in the machine's load hits both trees alike
        for name, tree in trees.items():
            runs[name][mode] = run_suite(tree, ["--durations=0"], cache=caches[name], by_test=name == "after")
    print(f"{'tree':<8} {'cold s':>8} {'warm s':>8} {'built cold':>11} {'built warm':>11} {'passed':>7}")
    for name, r in runs.items():
        print(
            f"{name:<8} {r['cold']['wall_s']:8.1f} {r['warm']['wall_s']:8.1f} "
            f"{r['cold']['libraries_built']:11d} {r['warm']['libraries_built']:11d} "
            f"{r['cold']['passed'] or '-':>7}"
        )
    for name, r in runs.items():
        print(
            f"{name}, cold, seconds by file: "
            + ", ".join(f"{f} {s}" for f, s in list(r["cold"]["seconds_by_file"].items())[:6])
        )
    return {
        "issue_cold_s": ISSUE_COLD_S,
        "target_cold_s": 300,
        "before_revision": before_rev if with_before else None,
        "runs": runs,
    }


def collected_ids(tree: Path) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n0"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    return [line for line in proc.stdout.splitlines() if "::" in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-rev", default="65eff5e")
    parser.add_argument("--base-tree", default=str(ROOT.parent / (ROOT.name + "_base")))
    parser.add_argument("--cold", action="store_true", help="every run starts from an empty kernel cache")
    parser.add_argument("--newcomer", action="store_true", help="cold then warm, --before-rev and this tree")
    parser.add_argument(
        "--before-rev", default="a2c22fb", help="the 'before' of --newcomer (issue 32's start)"
    )
    parser.add_argument("--before-tree", default=str(ROOT.parent / (ROOT.name + "_before")))
    parser.add_argument("--no-before", action="store_true", help="--newcomer on this tree alone")
    args = parser.parse_args()
    if args.newcomer:
        _keep(
            "newcomer",
            {
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "revision": _revision(),
                **newcomer(args.before_rev, Path(args.before_tree), not args.no_before),
                "load_average_at_end": os.getloadavg(),
            },
        )
        return
    tree = base_tree(args.base_rev, Path(args.base_tree))
    runs = {"before (base revision, one process)": run_suite(tree, [], args.cold),
            "after (README: pytest, all cores)": run_suite(ROOT, [], args.cold),
            "after, one process (-n0)": run_suite(ROOT, ["-n0"], args.cold)}
    same = sorted(set(collected_ids(tree)) & set(collected_ids(ROOT)))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as ids:
        ids.write("\n".join(same) + "\n")
    runs["after, only the base's tests (README: pytest)"] = {
        **run_suite(ROOT, [f"@{ids.name}"], args.cold),
        "tests": len(same),
    }
    before = runs["before (base revision, one process)"]["wall_s"]
    print(f"{'run':<46} {'wall s':>8} {'ratio':>7} {'passed':>7}  exit")
    for name, r in runs.items():
        r["ratio_to_before"] = round(r["wall_s"] / before, 3)
        print(
            f"{name:<46} {r['wall_s']:8.1f} {r['ratio_to_before']:7.2f} {r['passed'] or '-':>7}  "
            f"{r['exit_code']}"
        )
    mode = "cold" if args.cold else "warm"
    _keep(
        mode,
        {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_average_at_end": os.getloadavg(),
            "revision": _revision(),
            "base_revision": args.base_rev,
            "target_ratio": 0.6,
            "caches": mode,
            "runs": runs,
        },
    )


def _revision() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def _keep(entry: str, result: dict) -> None:
    """Write `entry` of bench/results/suite.json; the other entries' last runs stay."""
    out = ROOT / "bench" / "results" / "suite.json"
    try:
        kept = json.loads(out.read_text())
    except (OSError, ValueError):
        kept = {}
    kept = {m: kept[m] for m in ("warm", "cold", "newcomer") if isinstance(kept.get(m), dict)}
    kept[entry] = result
    out.write_text(json.dumps(kept, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()

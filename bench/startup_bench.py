"""Start-up time: `import refcomp`, `refcomp --version`, and a tiny graph's first rc.input + rc.compile.

Each figure is taken in a fresh process, --runs times, and the median is reported: the process's wall
time as `time` shows it (the interpreter's own start included) for `import refcomp` and `refcomp
--version`; for the tiny graph (rc.input of (4, 8), exp, add, sum, compiled with the search on) the
seconds to import refcomp and build the graph, and the first rc.compile's, measured inside the child,
with an empty program cache (so it searches and lowers; the kernel cache is the machine's). The base
revision (before the lazy imports of issue 32) runs the same commands from a git worktree, made here
if missing, interleaved run by run with this tree so both see the same load. The JSON also lists
the heavy libraries each command loaded.

    python bench/startup_bench.py [--runs 5] [--base-rev 1ee04e8] [--no-base]
        # prints a table, writes bench/results/startup.json

Targets (issue 32): `import refcomp` and `refcomp --version` in at most 0.3 s each (the base
revision's figures are in bench/results/startup.json).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from results_file import write_results  # noqa: E402

TARGETS_S = {"import_s": 0.3, "version_s": 0.3}
HEAVY = ("sympy", "numpy", "jinja2", "onnx", "torch")
LOADED = "import sys, json; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r})))"
TINY = """
import time
t = time.perf_counter()
import refcomp as rc
x = rc.input("x", (4, 8))
y = (x.exp() + 1.0).sum(-1)
built = time.perf_counter()
rc.compile(y)
done = time.perf_counter()
print(built - t, done - built)
"""
ROWS = [  # key, label
    ("import_s", "import refcomp (process wall)"),
    ("version_s", "refcomp --version (process wall)"),
    ("tiny_input_s", "tiny graph: import + first rc.input"),
    ("tiny_compile_s", "tiny graph: first rc.compile"),
    ("tiny_wall_s", "tiny graph: whole process"),
]


def version_command() -> list[str]:
    """The console script beside this interpreter (what a user types), else `python -m refcomp`."""
    script = Path(sys.executable).with_name("refcomp")
    return [str(script), "--version"] if script.exists() else [sys.executable, "-m", "refcomp", "--version"]


def _run(command: list[str], tree: Path, **env) -> tuple[float, str]:
    """The wall seconds and stdout of `command` in a fresh process that imports refcomp from `tree`."""
    environment = dict(os.environ, PYTHONPATH=str(tree), **env)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} in {tree} failed:\n{done.stderr}")
    return seconds, done.stdout


def one_round(tree: Path) -> dict[str, float]:
    """Each measurement once, each in its own fresh process."""
    row = {"import_s": _run([sys.executable, "-c", "import refcomp"], tree)[0],
           "version_s": _run(version_command(), tree)[0]}
    with tempfile.TemporaryDirectory(prefix="refcomp-startup-programs-") as programs:
        wall, out = _run([sys.executable, "-c", TINY], tree, REFCOMP_PROGRAM_CACHE_DIR=programs)
    built, compiled = map(float, out.split())
    return {**row, "tiny_input_s": built, "tiny_compile_s": compiled, "tiny_wall_s": wall}


def heavy_loaded(tree: Path) -> dict[str, list[str]]:
    """Which of HEAVY `import refcomp` and `refcomp --version` (through refcomp.cli.main) load."""
    probe = LOADED.format(heavy=set(HEAVY))
    cli = ("from refcomp.cli import main\nimport contextlib, io\n"
           "with contextlib.redirect_stdout(io.StringIO()): main(['--version'])\n")
    return {"import refcomp": json.loads(_run([sys.executable, "-c", f"import refcomp\n{probe}"], tree)[1]),
            "refcomp --version": json.loads(_run([sys.executable, "-c", cli + probe], tree)[1])}


def base_tree(rev: str, tree: Path) -> Path:
    """A git worktree of `rev` at `tree` (made if missing; one at another revision is refused)."""
    if not (tree / "refcomp" / "__init__.py").exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                       capture_output=True)
    head = subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    want = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True
    ).stdout.strip()
    if head != want:
        raise SystemExit(f"{tree} is at {head[:10]}, not {rev}: pass another --base-tree")
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=int, default=5, help="fresh processes per figure (the median is reported)"
    )
    parser.add_argument(
        "--base-rev",
        default="1ee04e8",
        help="the 'before' commit (default: the last before issue 32's lazy imports)",
    )
    parser.add_argument("--base-tree", help="its worktree (default: <this checkout>_base_<rev>)")
    parser.add_argument("--no-base", action="store_true", help="measure this tree only")
    args = parser.parse_args()
    load_start, started = os.getloadavg(), time.perf_counter()
    trees = {"after": ROOT}
    if not args.no_base:
        trees = {
            "before": base_tree(args.base_rev, Path(args.base_tree or f"{ROOT}_base_{args.base_rev}")),
            **trees,
        }
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            samples[name].append(one_round(tree))
    medians = {
        name: {key: statistics.median(s[key] for s in runs) for key, _ in ROWS}
        for name, runs in samples.items()
    }

    print(
        f"{'median of ' + str(args.runs) + ' fresh processes':<40}"
        + "".join(f"{name + ' s':>10}" for name in trees)
        + ("    ratio" if "before" in trees else "")
        + f"{'target s':>10}"
    )
    for key, label in ROWS:
        line = f"{label:<40}" + "".join(f"{medians[name][key]:>10.3f}" for name in trees)
        if "before" in trees:
            line += f"{medians['after'][key] / medians['before'][key]:>9.2f}"
        print(line + (f"{TARGETS_S[key]:>10.2f}" if key in TARGETS_S else f"{'-':>10}"))
    loaded = {name: heavy_loaded(tree) for name, tree in trees.items()}
    for name in trees:
        print(
            f"{name}: heavy libraries loaded: "
            + "; ".join(f"{cmd}: {', '.join(libs) or 'none'}" for cmd, libs in loaded[name].items())
        )
    met = {key: medians["after"][key] <= target for key, target in TARGETS_S.items()}
    print("targets met" if all(met.values()) else f"targets missed: {[k for k, ok in met.items() if not ok]}")
    write_results(
        ROOT / "bench" / "results" / "startup.json",
        "bench/startup_bench.py",
        load_start,
        time.perf_counter() - started,
        runs=args.runs,
        base_revision=None if args.no_base else args.base_rev,
        version_command=" ".join(Path(c).name for c in version_command()),
        targets_s=TARGETS_S,
        targets_met=met,
        median_s=medians,
        heavy_loaded=loaded,
        samples_s=samples,
    )


if __name__ == "__main__":
    main()

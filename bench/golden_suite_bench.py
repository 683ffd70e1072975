"""The CUDA path over the whole golden suite: emulator time and nvcc's resource report.

    python bench/golden_suite_bench.py [--cold]

For every golden case, plain and searched: compile, run every binding on the host emulator, and
build the source with nvcc for sm_90. Prints the emulator wall time (with a cold compile cache when
--cold is given, so g++ builds are included), the kernels, and the largest register count, shared
memory and any spills nvcc reports; writes bench/results/golden_suite.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import refcomp as rc  # noqa: E402
from refcomp import golden  # noqa: E402
from refcomp.exec.nvcc import nvcc_available, nvcc_check  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def run(search: bool) -> dict:
    cases = golden.load_cases()
    compile_s = run_s = 0.0
    kernels = mismatches = 0
    resources = []
    for case in cases:
        start = time.perf_counter()
        prog = rc.compile(case.build(), search=search)
        compile_s += time.perf_counter() - start
        kernels += len(prog.kernels)
        start = time.perf_counter()
        for i in range(len(case.bindings)):
            feeds, dims = golden.case_feeds(case, i)
            got = prog.run(feeds, backend="emulator", dims=dims)
            mismatches += bool(golden.compare(got, golden.expected(case, i), golden.case_tolerance(case)))
        run_s += time.perf_counter() - start
        if nvcc_available() is None:
            for name, r in nvcc_check(prog.source).kernels.items():
                resources.append({"case": case.name, "kernel": name, **r.__dict__})
    worst = max(resources, key=lambda r: r["registers"]) if resources else None
    return {
        "search": search,
        "cases": len(cases),
        "kernels": kernels,
        "mismatches": mismatches,
        "compile_s": round(compile_s, 2),
        "emulator_s": round(run_s, 2),
        "max_registers": worst
        and {"registers": worst["registers"], "case": worst["case"], "kernel": worst["kernel"]},
        "max_shared_bytes": max((r["shared_bytes"] for r in resources), default=None),
        "spilling_kernels": [
            f"{r['case']}:{r['kernel']}" for r in resources if r["spill_store_bytes"] or r["spill_load_bytes"]
        ],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--cold", action="store_true", help="use an empty compile cache (g++ builds included)"
    )
    args = parser.parse_args(argv)
    if args.cold:
        os.environ["REFCOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="refcomp-cold-")
    rows = [run(False), run(True)]
    print(
        f"{'lowering':<10}{'cases':>6}{'kernels':>9}{'mismatch':>9}{'compile s':>11}{'emulator s':>12}"
        f"{'max regs':>10}{'max smem B':>11}{'spills':>8}"
    )
    for r in rows:
        regs = r["max_registers"]["registers"] if r["max_registers"] else "-"
        print(
            f"{'search' if r['search'] else 'plain':<10}{r['cases']:>6}{r['kernels']:>9}{r['mismatches']:>9}"
            f"{r['compile_s']:>11}{r['emulator_s']:>12}{regs:>10}{str(r['max_shared_bytes']):>11}"
            f"{len(r['spilling_kernels']):>8}"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "golden_suite.json").write_text(json.dumps({"cold_cache": args.cold, "rows": rows}, indent=2))
    return 0 if all(r["mismatches"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The profiler over the whole golden suite: what the counters cost, next to a plain emulator run.

    python bench/profile_bench.py [--cold]

For every golden case (searched) and every binding: profile it (the instrumented build; g++ is
timed apart, on the first binding, with a cold kernel cache when --cold is given) and run it on the
plain emulator, both warm. Prints the totals, the slowest cases and the suite's counter totals;
writes bench/results/profile.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import refcomp as rc  # noqa: E402
from refcomp import golden  # noqa: E402
from refcomp.exec.profile import Counters  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", action="store_true", help="use an empty kernel cache (g++ builds timed)")
    args = parser.parse_args(argv)
    if args.cold:
        os.environ["REFCOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="refcomp-cold-")
    rows, total = [], Counters()
    for case in golden.load_cases():
        start = time.perf_counter()
        prog = rc.compile(case.build())
        compile_s = time.perf_counter() - start
        bindings = [golden.case_feeds(case, i) for i in range(len(case.bindings))]
        start = time.perf_counter()
        prog.profile(*bindings[0][:1], dims=bindings[0][1])  # builds (g++) and profiles once
        build_s = time.perf_counter() - start
        prog.run(bindings[0][0], dims=bindings[0][1], backend="emulator")  # the plain build, loaded
        start = time.perf_counter()
        for feeds, dims in bindings:
            profile = prog.profile(feeds, dims=dims)
            total = total + profile.total
        profile_s = time.perf_counter() - start
        start = time.perf_counter()
        for feeds, dims in bindings:
            prog.run(feeds, dims=dims, backend="emulator")
        run_s = time.perf_counter() - start
        rows.append({"case": case.name, "bindings": len(bindings), "kernels": len(prog.kernels),
                     "compile_s": round(compile_s, 3), "first_profile_s": round(build_s, 3),
                     "profile_s": round(profile_s, 3), "emulator_s": round(run_s, 3)})
    sums = {
        k: round(sum(r[k] for r in rows), 2)
        for k in ("compile_s", "first_profile_s", "profile_s", "emulator_s")
    }
    print(
        f"{len(rows)} golden cases, {sum(r['bindings'] for r in rows)} bindings, "
        f"{sum(r['kernels'] for r in rows)} kernels"
        f" ({'cold' if args.cold else 'warm'} kernel cache, {os.cpu_count()} cores)"
    )
    print(f"  compile (search)                    {sums['compile_s']:8.2f} s")
    print(f"  first profile of each case (+ g++)  {sums['first_profile_s']:8.2f} s")
    print(f"  profile every binding, warm         {sums['profile_s']:8.2f} s")
    print(f"  plain emulator, every binding, warm {sums['emulator_s']:8.2f} s")
    print("slowest profiles: " + ", ".join(f"{r['case']} {r['profile_s']:.2f} s"
                                           for r in sorted(rows, key=lambda r: -r["profile_s"])[:5]))
    print(f"suite totals: {total}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "profile.json").write_text(json.dumps(
        {"cold_cache": args.cold, "machine": f"{platform.machine()}, {os.cpu_count()} cores", "totals": sums,
         "counters": total.__dict__, "cases": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

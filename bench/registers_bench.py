"""Registers, spills and the occupancy they allow: ptxas's figures for every kernel refcomp emits.

The cost model has no register term yet (docs/cost_model.md, "Not modeled yet"). This bench says how
much that matters today and how well a cheap estimate would do. It compiles every golden case (at
its first binding) and the search bench's GPT-2 block, MLP and CNN, plain and searched, runs nvcc
for sm_90 on each program (cached), and reports per template: ptxas's registers per thread, spill
bytes, the resident threads per SM those registers and the static shared memory allow, and the
kernels where that limit would lower the model's occupancy at the priced binding. It also correlates
ptxas's count with the candidate estimate, the most values named in the kernel body at one point
(`const float vN`, `const long long uN`, ... from definition to last use).

    PYTHONPATH=. python bench/registers_bench.py    # table; writes bench/results/registers.json
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import numpy as np  # noqa: E402

import refcomp as rc  # noqa: E402
from refcomp import golden  # noqa: E402
from refcomp.exec.nvcc import nvcc_available, nvcc_check  # noqa: E402
from refcomp.search.cost import H200  # noqa: E402
from results_file import write_results  # noqa: E402
from search_targets_bench import cnn_graph, gpt2_graph, mlp_graph  # noqa: E402

# compute capability 9.0 (CUDA C++ Programming Guide, "Technical specifications per compute capability")
REGISTERS_PER_SM, THREADS_PER_SM, BLOCKS_PER_SM = 65536, 2048, 32
REGISTER_UNIT = 8  # registers are allocated per warp in units of 256: 8 per thread
SHARED_PER_SM, SHARED_RESERVED_PER_BLOCK = 228 * 1024, 1024
SMS = H200.resident_threads // THREADS_PER_SM

_DEFINED = re.compile(r"\b(?:const\s+)?(?:float|double|int|long long)\s+([A-Za-z_]\w*)\s*=")
_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def resident_threads(registers: int, shared_bytes: int, block: int) -> int:
    """Threads one SM holds at once, as registers, shared memory and the block limit allow."""
    per_block = -(-max(registers, 1) // REGISTER_UNIT) * REGISTER_UNIT * block
    blocks = min(BLOCKS_PER_SM, THREADS_PER_SM // block, REGISTERS_PER_SM // per_block,
                 SHARED_PER_SM // (shared_bytes + SHARED_RESERVED_PER_BLOCK))
    return blocks * block


def most_live_values(source: str) -> int:
    """The most named values alive at one line of the kernel body (definition to last mention)."""
    body = [line for line in source.split("\n") if not line.lstrip().startswith("//")]
    defined, last = {}, {}
    for i, line in enumerate(body):
        for m in _DEFINED.finditer(line):
            defined.setdefault(m.group(1), i)
        for m in _NAME.finditer(line):
            last[m.group(0)] = i
    alive = [0] * (len(body) + 1)
    for name, start in defined.items():
        alive[start] += 1
        alive[last.get(name, start) + 1] -= 1
    return max(np.cumsum(alive)) if defined else 0


def programs():
    for case in golden.load_cases():
        binding = dict(case.bindings[0]) if case.bindings and case.bindings[0] else None
        yield case.name, case.build, binding
    yield "gpt2 B=8 T=128", lambda: gpt2_graph(1)[0], {"B": 8, "T": 128}
    yield "mlp B=64", lambda: mlp_graph(64)[0], None
    yield "cnn", lambda: cnn_graph()[0], None


def main() -> None:
    reason = nvcc_available()
    if reason is not None:
        sys.exit(f"registers_bench needs nvcc: {reason}")
    start, load_start = time.perf_counter(), os.getloadavg()
    kernels, refused = [], []
    for name, build, hint in programs():
        for search in (False, True):
            try:
                prog = rc.compile(build(), cache=False, dims_hint=hint, search=search)
                report = nvcc_check(prog.source)
            except rc.RefcompError as exc:
                refused.append(f"{name} ({'searched' if search else 'plain'}): {str(exc)[:120]}")
                continue
            for k in prog.kernels:
                r = report.kernels[k.name]
                slots = resident_threads(
                    r.registers,
                    r.shared_bytes,
                    k.launch.block**2 if k.launch.mode == "tiles" else k.launch.block,
                )
                threads = k.cost.threads if k.cost is not None else 0
                kernels.append(
                    {
                        "program": name,
                        "searched": search,
                        "kernel": k.name,
                        "template": k.plan.template if k.plan else k.kind,
                        "registers": r.registers,
                        "spill_bytes": r.spill_store_bytes + r.spill_load_bytes,
                        "shared_bytes": r.shared_bytes,
                        "resident_threads_per_sm": slots,
                        "threads": threads,
                        "occupancy_lowered": slots < THREADS_PER_SM and threads > SMS * slots,
                        "most_live_values": int(most_live_values(k.source)),
                    }
                )
    by_template = defaultdict(list)
    for k in kernels:
        by_template[k["template"]].append(k)
    rows = []
    print(
        f"{'template':<22}{'kernels':>8}{'regs min':>9}{'median':>7}{'max':>5}{'spill B':>8}{'< 2048/SM':>10}"
        f"{'binding':>8}{'corr':>6}"
    )
    for template, ks in sorted(by_template.items()):
        regs = [k["registers"] for k in ks]
        live = [k["most_live_values"] for k in ks]
        corr = float(np.corrcoef(regs, live)[0, 1]) if len(ks) > 2 and np.std(regs) and np.std(live) else None
        row = {
            "template": template,
            "kernels": len(ks),
            "registers_min": min(regs),
            "registers_median": statistics.median(regs),
            "registers_max": max(regs),
            "spill_bytes": sum(k["spill_bytes"] for k in ks),
            "fewer_resident_threads": sum(k["resident_threads_per_sm"] < THREADS_PER_SM for k in ks),
            "occupancy_lowered": sum(k["occupancy_lowered"] for k in ks),
            "corr_with_most_live_values": corr,
        }
        rows.append(row)
        print(
            f"{template:<22}{len(ks):>8}{min(regs):>9}{row['registers_median']:>7}{max(regs):>5}{row['spill_bytes']:>8}"
            f"{row['fewer_resident_threads']:>10}{row['occupancy_lowered']:>8}"
            f"{'-' if corr is None else f'{corr:.2f}':>6}"
        )
    worst = sorted(kernels, key=lambda k: -k["registers"])[:5]
    print("most registers:", ", ".join(f"{k['program']}/{k['kernel']} {k['registers']}" for k in worst))
    print(
        f"{len(kernels)} kernels; {sum(k['spill_bytes'] > 0 for k in kernels)} spill; "
        f"{len(refused)} programs refused"
    )
    write_results(
        ROOT / "bench" / "results" / "registers.json",
        "bench/registers_bench.py",
        load_start,
        time.perf_counter() - start,
        kernels=len(kernels),
        rows=rows,
        most_registers=worst,
        refused=refused,
        occupancy_lowered=[k for k in kernels if k["occupancy_lowered"]],
    )


if __name__ == "__main__":
    main()

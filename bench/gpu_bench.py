"""Measured kernel times on a GPU next to the cost model's predictions, for the search benchmark's workloads.

For each workload (bench/search_bench.py's list): the plain program (compile(search=False)), the
searched program (the cost model's pick, candidate 0) and every other candidate schedule the
search kept are checked against the NumPy reference and timed with CUDA events (kernels only,
cold L2 each round, rounds queued behind a spin kernel: see refcomp/measure.py); measured
mode's pick is the fastest of the candidates. Also: the achieved bandwidth of a large
device-to-device copy, to check the H200 profile's 4.3 TB/s, and what a launch costs
(bench/launch_bench.py), to check its 3 us launch (an estimate until a GPU session measures it).

Runs only where PyCUDA and a CUDA device are usable; elsewhere it prints "skipped: <reason>" and
exits 0. Sized for a ~5 minute budget: few timed rounds, one failure never loses the others, and
workloads past --budget seconds are skipped (and said so).

    python bench/gpu_bench.py [--repeats 20] [--warmup 5] [--budget 240] [--only softmax ...]

Writes bench/results/gpu.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import refcomp as rc  # noqa: E402
from refcomp.search.cost import H200  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_bench import graph_launch_gap, launch_gap, no_gpu  # noqa: E402

RESULTS = ROOT / "bench" / "results"


def copy_bandwidth(nbytes: int = 2 << 30, repeats: int = 10) -> dict:
    """Median bandwidth of a device-to-device copy, counting bytes read and written (as the model does)."""
    from refcomp.exec.pycuda_backend import cuda_driver
    drv = cuda_driver()
    src, dst = drv.mem_alloc(nbytes), drv.mem_alloc(nbytes)
    try:
        drv.memset_d32(int(src), 0, nbytes // 4)
        for _ in range(2):
            drv.memcpy_dtod(int(dst), int(src), nbytes)
        drv.Context.synchronize()
        times = []
        for _ in range(repeats):
            start, end = drv.Event(), drv.Event()
            start.record()
            drv.memcpy_dtod_async(int(dst), int(src), nbytes)
            end.record()
            end.synchronize()
            times.append(start.time_till(end) * 1e-3)
        median = statistics.median(times)
        return {"bytes_copied": nbytes, "median_s": median, "bandwidth_Bps": 2 * nbytes / median,
                "profile_Bps": H200.bandwidth, "times_s": times}
    finally:
        src.free()
        dst.free()


def _measured(out: dict, key: str, what: str, measure, line) -> None:
    """out[key] = measure(), with its `line` printed; an error is reported there and the bench goes on."""
    try:
        out[key] = result = measure()
        print(line(result), flush=True)
    except Exception as exc:  # noqa: BLE001 - report and go on
        out[key] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"{what}: ERROR {type(exc).__name__}: {exc}", flush=True)


def _timing_json(t) -> dict:
    return {
        "median_s": t.median_s,
        "rounds_s": t.rounds_s,
        "kernel_times": t.kernels,
        "host_bound": t.host_bound,
    }


def bench_gpu_workload(w, repeats: int, warmup: int, max_candidates: int, log=sys.stdout) -> dict:
    from refcomp.measure import ReferenceCheck, make_feeds, measure_programs, pick, time_program

    outputs, fixed = w.build()
    started = time.perf_counter()
    plain = rc.compile(outputs, search=False)
    searched = rc.compile(outputs, search=True, dims_hint=w.dims_hint)
    result = searched.search
    dims = dict(result.bindings)
    check = ReferenceCheck.build(outputs, dims, seed=1, fixed=fixed, result=result)
    row = {"name": w.name, "binding": dims, "check_binding": check.dims,
           "predicted_plain_s": result.trace[0].cost_s, "predicted_search_s": result.time_s}

    problems = check.problems(plain)
    row["plain"] = {
        "kernels": len(plain.kernels),
        "predicted_s": result.trace[0].cost_s,
        "problems": problems,
    }
    if not problems:
        feeds = make_feeds(outputs, dims, 0, fixed, result)
        row["plain"].update(_timing_json(time_program(plain, feeds, dims, repeats, warmup)))
    print(
        f"  {w.name}: plain checked and timed ({time.perf_counter() - started:.1f} s)", file=log, flush=True
    )

    schedules = list(result.candidates or [result.schedule])[:max_candidates]
    measured = measure_programs(
        outputs,
        result,
        dims,
        repeats,
        warmup,
        schedules=schedules,
        fixed_feeds=fixed,
        check=check,
        strict=False,
    )
    row["candidates"] = [
        {
            "index": m.index,
            "kernels": len(m.program.kernels),
            "predicted_s": m.predicted_s,
            "problems": m.problems,
            **(_timing_json(m.timing) if m.timing else {}),
        }
        for m in measured
    ]
    first = next((m for m in measured if m.index == 0 and m.timing is not None), None)
    if first is not None:  # the searched program kernel by kernel, next to the model's per-kernel prediction
        feeds = make_feeds(outputs, dims, 0, fixed, result)
        t = time_program(first.program, feeds, dims, repeats, warmup, per_kernel=True)
        predicted = {
            k.name: k.cost.time_s for k in first.program.kernels
        }  # priced from each kernel's accesses
        row["search_kernels"] = [{"kernel": name, "measured_s": sec, "predicted_s": predicted.get(name)}
                                 for name, sec in t.kernels]
    try:
        best = pick(measured)
        row["pick"] = best.index
    except rc.RefcompError as exc:
        row["pick"] = None
        row["error"] = str(exc)
    print(
        f"  {w.name}: {len(measured)} candidate(s) checked and timed ({time.perf_counter() - started:.1f} s)",
        file=log,
        flush=True,
    )
    row["seconds"] = time.perf_counter() - started
    return row


def correlation(rows: list[dict]) -> dict:
    """How well the model's per-kernel predictions track CUDA-event times over every timed kernel:
    Pearson's r of the log times (does it get the scale right) and Spearman's rho (the order, which
    is what the search needs)."""
    pairs = [(k["predicted_s"], k["measured_s"]) for r in rows for k in r.get("search_kernels", [])
             if k.get("predicted_s") and k.get("measured_s")]
    if len(pairs) < 3:
        return {"kernels": len(pairs)}
    import numpy as np
    pred, meas = (np.array(v, dtype=np.float64) for v in zip(*pairs))
    rank = lambda v: np.argsort(np.argsort(v)).astype(np.float64)  # noqa: E731 (ties are rare in timings)
    return {"kernels": len(pairs), "pearson_log": float(np.corrcoef(np.log(pred), np.log(meas))[0, 1]),
            "spearman": float(np.corrcoef(rank(pred), rank(meas))[0, 1]),
            "median_measured_over_predicted": float(np.median(meas / pred))}


def _us(x) -> str:
    return "-" if x is None else f"{x * 1e6:.2f}"


def format_table(rows: list[dict]) -> str:
    head = (
        f"{'workload':<12} {'binding':<14} | {'plain k':>7} {'pred us':>9} {'meas us':>9} | "
        f"{'search k':>8} {'pred us':>9} {'meas us':>9} {'meas/pred':>9} | "
        f"{'pick':>4} {'k':>3} {'meas us':>9} {'vs plain':>8}  notes"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        binding = ",".join(f"{k}={v}" for k, v in r.get("binding", {}).items()) or "-"
        if "plain" not in r:
            lines.append(f"{r['name']:<12} {binding:<14} | {r.get('error', 'not run')}")
            continue
        notes = []
        p = r["plain"]
        cands = {c["index"]: c for c in r.get("candidates", [])}
        s = cands.get(0, {})
        pk = cands.get(r.get("pick"), {}) if r.get("pick") is not None else {}
        if p.get("problems"):
            notes.append("plain WRONG: " + p["problems"][0][:80])
        for c in r.get("candidates", []):
            if c.get("problems"):
                notes.append(f"candidate {c['index']} WRONG: " + c["problems"][0][:80])
            if c.get("host_bound"):
                notes.append(f"candidate {c['index']} host-bound timing")
        if p.get("host_bound"):
            notes.append("plain host-bound timing")
        if r.get("error"):
            notes.append(r["error"][:100])
        ratio = (s["median_s"] / s["predicted_s"]) if s.get("median_s") and s.get("predicted_s") else None
        vs_plain = (p["median_s"] / pk["median_s"]) if p.get("median_s") and pk.get("median_s") else None
        lines.append(
            f"{r['name']:<12} {binding:<14} | {p['kernels']:>7} {_us(p.get('predicted_s')):>9} "
            f"{_us(p.get('median_s')):>9} | "
            f"{s.get('kernels', '-'):>8} {_us(s.get('predicted_s')):>9} {_us(s.get('median_s')):>9} "
            f"{'-' if ratio is None else f'{ratio:.2f}':>9} | {str(r.get('pick', '-')):>4} "
            f"{pk.get('kernels', '-'):>3} {_us(pk.get('median_s')):>9} "
            f"{'-' if vs_plain is None else f'{vs_plain:.2f}x':>8}  "
            + "; ".join(notes)
        )
        others = [c for c in r.get("candidates", []) if c["index"] != 0]
        if others:
            lines.append(
                " " * 29
                + "other candidates: "
                + ", ".join(
                    f"#{c['index']} {c['kernels']}k pred {_us(c['predicted_s'])} "
                    f"meas {_us(c.get('median_s'))}"
                    for c in others
                )
            )
    lines.append("")
    lines.append(
        "k: kernels. pred: the cost model's time on the H200 profile; "
        "meas: median CUDA-event time of the kernels (cold L2 each round). "
        "pick: measured mode's choice among the candidates (0 = the model's pick); "
        "vs plain: plain measured / pick measured."
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--candidates", type=int, default=4, help="candidate schedules timed per workload")
    parser.add_argument(
        "--budget", type=float, default=240.0, help="seconds; workloads not started by then are skipped"
    )
    parser.add_argument("--only", nargs="*", help="workload names (default: all)")
    parser.add_argument("--out", default=str(RESULTS / "gpu.json"), help="JSON output path ('' for none)")
    args = parser.parse_args(argv)

    if no_gpu():
        return 0

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from search_bench import WORKLOADS  # noqa: E402
    from refcomp.exec.pycuda_backend import cuda_driver
    drv = cuda_driver()
    device = drv.Context.get_device()
    started = time.perf_counter()
    out = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "python": platform.python_version(),
        "device": device.name(),
        "compute_capability": list(device.compute_capability()),
        "repeats": args.repeats,
        "warmup": args.warmup,
        "profile": {
            "bandwidth": H200.bandwidth,
            "flops": H200.flops,
            "launch_s": H200.launch_s,
            "l2_bandwidth": H200.l2_bandwidth,
            "l2_bytes": H200.l2_bytes,
        },
    }
    print(f"device: {out['device']} (sm_{''.join(map(str, out['compute_capability']))})", flush=True)
    _measured(out, "copy", "copy bandwidth", copy_bandwidth, lambda c: (
        f"device-to-device copy of {c['bytes_copied'] / 2**30:.0f} GiB: {c['bandwidth_Bps'] / 1e12:.2f} TB/s "
        f"(bytes read + written; profile {H200.bandwidth / 1e12:.1f} TB/s, "
        f"ratio {c['bandwidth_Bps'] / H200.bandwidth:.2f})"))
    _measured(out, "launch_gap", "launch gap", launch_gap, lambda g: (
        f"empty kernels back to back: {g['device_s_per_launch'] * 1e6:.2f} us each on the device "
        f"(queued), {g['host_s_per_launch'] * 1e6:.2f} us per launch call on the host "
        f"(profile launch_s {H200.launch_s * 1e6:.1f} us; {g['host_bound_rounds']} rounds host-bound)"))
    _measured(out, "graph_launch_gap", "graph launch gap", graph_launch_gap, lambda g: (
        f"the same in one CUDA graph: {g['device_s_per_launch'] * 1e6:.2f} us each on the device, "
        f"{g['host_s_per_graph_launch'] * 1e6:.1f} us per graph launch on the host"))

    rows = []
    for w in WORKLOADS:
        if args.only and w.name not in args.only:
            continue
        if time.perf_counter() - started > args.budget:
            rows.append({"name": w.name, "error": f"skipped: past the {args.budget:.0f} s budget"})
            print(f"  {w.name}: skipped (past the {args.budget:.0f} s budget)", flush=True)
            continue
        try:
            rows.append(bench_gpu_workload(w, args.repeats, args.warmup, args.candidates))
        except Exception as exc:  # noqa: BLE001 - one failure must not lose the others
            print(f"  {w.name}: ERROR {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc(limit=4)
            rows.append({"name": w.name, "error": f"{type(exc).__name__}: {exc}"})
    out["workloads"] = rows
    out["model_vs_measured"] = correlation(rows)
    out["seconds"] = time.perf_counter() - started
    if args.out:  # written before the table, so a formatting slip cannot lose the measurements
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print()
    try:
        print(format_table(rows))
    except Exception as exc:  # noqa: BLE001
        print(f"(table failed: {type(exc).__name__}: {exc}; the JSON has everything)")
    print(f"\nmodel vs measured, per kernel of the searched programs: {out['model_vs_measured']}")
    if args.out:
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

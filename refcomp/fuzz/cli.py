"""`python -m refcomp.fuzz`: long runs in child processes, replay, and the summary."""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from typing import Optional, Sequence


from .graph import FuzzGraph, KNOWN_BUGS
from .generator import generate
from .check import BatchResult, check_one, bindings_for, check_batch, check_graph, shrink


# --- the command line -----------------------------------------------------------------------------
def _job(conn, seed: int, p: int, first: int, last: int, modes, avoid, model: bool = False) -> None:
    """One program's check, in a child process: sends (graphs, BatchResult) or (None, traceback)."""
    try:
        graphs = [generate(seed, i, avoid) for i in range(first, last)]
        conn.send((graphs, check_batch(graphs, bindings_for(seed, p), modes, model=model)))
    except BaseException:
        conn.send((None, traceback.format_exc()))
    finally:
        conn.close()


def run_programs(
    count: int, seed: int, per_program: int, modes, avoid, jobs: int, timeout: float, model: bool = False
):
    """Yield (program index, graphs or None, BatchResult or an error text) in program order.

    Programs run in `jobs` child processes at once (the search, code generation and g++ of one
    overlap with another's); a program that takes longer than `timeout` seconds is killed and
    reported, since a compile that never ends is a bug too."""
    import multiprocessing
    from multiprocessing.connection import wait
    firsts = list(range(0, count, per_program))
    ctx = multiprocessing.get_context("fork")
    running: dict = {}  # p -> (process, connection, start)
    done: dict = {}
    submitted = emitted = 0
    while emitted < len(firsts):
        while submitted < len(firsts) and len(running) < max(1, jobs):
            receive, send = ctx.Pipe(duplex=False)
            last = min(firsts[submitted] + per_program, count)
            proc = ctx.Process(
                target=_job,
                args=(send, seed, submitted, firsts[submitted], last, modes, avoid, model),
                daemon=True,
            )
            proc.start()
            send.close()
            running[submitted] = (proc, receive, time.perf_counter())
            submitted += 1
        ready = wait([c for _, c, _ in running.values()], timeout=1.0)
        for p, (proc, conn, t0) in list(running.items()):
            if conn in ready:
                try:
                    done[p] = conn.recv()
                except EOFError:
                    done[p] = (None, f"program {p}: the checking process died (exit code {proc.exitcode})")
            elif time.perf_counter() - t0 > timeout:
                proc.kill()
                done[p] = (
                    None,
                    f"program {p} (graphs {firsts[p]}..{min(firsts[p] + per_program, count) - 1}) "
                    f"did not finish within {timeout:.0f} s: a compile or run that takes that long is a bug",
                )
            else:
                continue
            proc.join()
            conn.close()
            del running[p]
        while emitted in done:
            graphs, res = done.pop(emitted)
            yield emitted, graphs, res
            emitted += 1


def run(count: int, seed: int = 0, per_program: int = 30, modes=("search", "plain"), progress: bool = True,
        shrink_failures: bool = True, out=None, avoid: Sequence[str] = tuple(KNOWN_BUGS),
        jobs: int = 2, timeout: float = 600.0, model: bool = False) -> BatchResult:
    """Check `count` graphs, `per_program` to a program, `jobs` programs at once; print what fails.
    With `model`, also check the cost model's memory counts against the profiler on every program."""
    out = sys.stdout if out is None else out
    total = BatchResult()
    start = time.perf_counter()
    coverage: dict[str, int] = {}
    for p, graphs, res in run_programs(count, seed, per_program, modes, avoid, jobs, timeout, model):
        if graphs is None:
            total.errors.append(res)
            print(f"ERROR (seed={seed}, program {p}, bindings {bindings_for(seed, p)}):\n{res}", file=out)
            if "did not finish" in res:
                _find_slow(seed, p, per_program, count, modes, avoid, timeout / 4, out)
            continue
        _merge(total, res, graphs, coverage)
        for m in res.mismatches:
            print(m.report(), file=out)
            print(f"--- replay: python -m refcomp.fuzz --replay {m.graph.seed}:{m.graph.index} "
                  f"--per-program {per_program}", file=out)
            if shrink_failures:
                small = shrink(m.graph, m.binding, m.which, m.mode)
                alone = check_one(m.graph, m.binding, m.which, m.mode)
                verdict = ("reproduces" if alone
                           else f"does NOT reproduce (needs the other graphs of program {p})")
                print(
                    f"--- alone: {verdict}"
                    f"; shrunk ({len(small.lines)} lines) ---\n{small.code()}\n",
                    file=out,
                )
        for e in res.errors:
            print(f"ERROR (seed={seed}, program {p}, bindings {bindings_for(seed, p)}):\n{e}", file=out)
        if progress:
            done = min((p + 1) * per_program, count)
            elapsed = time.perf_counter() - start
            print(
                f"[fuzz] {done}/{count} graphs, {len(total.mismatches)} mismatches, "
                f"{len(total.errors)} errors, "
                f"{elapsed:.0f} s ({elapsed / done * 1000:.0f} s per 1000)",
                file=out,
                flush=True,
            )
    total.seconds["total"] = time.perf_counter() - start
    total.coverage = coverage
    if progress:
        print(
            f"[fuzz] summary: {count} graphs (seed {seed}, {per_program} per program, "
            f"modes {', '.join(modes)}), {total.compared} output comparisons, "
            f"{len(total.mismatches)} mismatches, {len(total.errors)} errors, "
            f"refusals agreeing with the reference {total.refusals or 'none'}, kernels {total.kernels}, "
            + (
                f"{total.model_checked} kernels' memory-model counts checked against the profiler, "
                f"{total.minimum_checked} searches checked to stop where no single move is cheaper, "
                if model
                else ""
            )
            + f"{total.resident_runs} runs with the inputs resident ({total.resident_left} outputs left "
            f"on the device), {total.seconds['total']:.1f} s",
            file=out,
        )
        print(
            "[fuzz] search rules applied: " + ", ".join(f"{k} {v}" for k, v in sorted(total.rules.items())),
            file=out,
        )
        launches = ", ".join(f"{k} {v}" for k, v in sorted(total.launches.items()))
        print(f"[fuzz] searched kernels by launch: {launches}", file=out)
        print(
            "[fuzz] moves: "
            + ", ".join(f"{k} {v}" for k, v in sorted(coverage.items(), key=lambda kv: -kv[1])),
            file=out,
        )
    return total


def _find_slow(seed: int, p: int, per_program: int, count: int, modes, avoid, timeout: float, out) -> None:
    """After a program timed out: check its graphs one at a time and print those that are slow alone."""
    import multiprocessing
    first = p * per_program
    for i in range(first, min(first + per_program, count)):
        graph = generate(seed, i, avoid)
        ctx = multiprocessing.get_context("fork")
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_check_alone, args=(send, graph, bindings_for(seed, p), modes), daemon=True)
        proc.start()
        send.close()
        finished = receive.poll(timeout)
        if not finished:
            proc.kill()
            print(
                f"SLOW graph (seed={seed}, index={i}): not checked alone within {timeout:.0f} s\n"
                f"{graph.code()}\n",
                file=out,
            )
        proc.join()
        receive.close()


def _check_alone(conn, graph: FuzzGraph, bindings, modes) -> None:
    try:
        check_graph(graph, bindings, modes)
        conn.send(True)
    except BaseException:
        conn.send(False)
    finally:
        conn.close()


def _merge(total: BatchResult, res: BatchResult, graphs, coverage: dict) -> None:
    total.mismatches += res.mismatches
    total.errors += res.errors
    for kind, n in res.refusals.items():
        total.refusals[kind] = total.refusals.get(kind, 0) + n
    total.compared += res.compared
    total.model_checked += res.model_checked
    total.minimum_checked += res.minimum_checked
    total.resident_runs += res.resident_runs
    total.resident_left += res.resident_left
    for counts, more in ((total.kernels, res.kernels), (total.rules, res.rules),
                         (total.launches, res.launches)):
        for k, v in more.items():
            counts[k] = counts.get(k, 0) + v
    for g in graphs:
        for op in g.ops:
            coverage[op] = coverage.get(op, 0) + 1


def _run_sharded(args) -> int:
    """`--mesh dp=2,tp=2`: fuzz/sharded.py over --count graphs; prints a summary and every mismatch."""
    from ..spmd import Mesh
    from .sharded import check_sharded
    axes = {}
    for pair in args.mesh.split(","):
        name, _, size = pair.partition("=")
        if not (size.isascii() and size.isdigit()):  # isdigit() alone takes '²', which int() refuses
            print(
                f"python -m refcomp.fuzz: --mesh takes AXIS=SIZE pairs (dp=2,tp=2), got {pair!r}",
                file=sys.stderr,
            )
            return 2
        axes[name] = int(size)
    t0 = time.perf_counter()
    result = check_sharded(args.count, args.seed, Mesh(axes), args.backend)
    for m in result.mismatches:
        print(m)
    print(
        f"[fuzz] sharded on {Mesh(axes)}: {args.count} graphs (seed {args.seed}), "
        f"{result.sharded_inputs} inputs split, {result.compared} output comparisons, "
        f"{len(result.mismatches)} mismatches, collectives {dict(result.collectives)}, "
        f"{result.clashes} with a local symbol renamed off a user dim, "
        f"{time.perf_counter() - t0:.1f} s"
    )
    return 1 if result.mismatches else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m refcomp.fuzz", description=__doc__.split("\n\n")[0],
                                     allow_abbrev=False)  # a flag is never matched by its prefix
    parser.add_argument("--count", type=int, default=1000, help="how many random graphs (default 1000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--per-program", type=int, default=30, help="graphs compiled into one program (default 30)"
    )
    parser.add_argument("--modes", default="search,plain", help="comma-separated: search, plain")
    parser.add_argument(
        "--replay", metavar="SEED:INDEX", help="rebuild one graph, print it and check it alone"
    )
    parser.add_argument("--no-shrink", action="store_true", help="do not shrink failing graphs")
    parser.add_argument("--known-bugs", action="store_true", help="also generate the triggers of KNOWN_BUGS")
    parser.add_argument(
        "--jobs", type=int, default=2, help="programs checked at once, in child processes (default 2)"
    )
    parser.add_argument(
        "--timeout", type=float, default=600.0, help="seconds one program may take (default 600)"
    )
    parser.add_argument(
        "--model",
        action="store_true",
        help="also profile every program and check the cost model's "
        "memory counts against the profiler's, and that each search stops where no single move is cheaper",
    )
    parser.add_argument(
        "--mesh",
        metavar="AXIS=SIZE,...",
        help="instead: compile each graph for this device mesh "
        "(rc.spmd) with every input split at random, and compare the simulated mesh with the reference",
    )
    parser.add_argument(
        "--backend", default="numpy", help="with --mesh: each device's executor (numpy or emulator)"
    )
    args = parser.parse_args(argv)
    for flag, value in (("--count", args.count), ("--per-program", args.per_program), ("--jobs", args.jobs)):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    modes = tuple(m for m in args.modes.split(",") if m)
    if not modes or any(m not in ("search", "plain") for m in modes):
        parser.error(f"--modes takes search and/or plain, comma-separated, got {args.modes!r}")
    replay = args.replay.split(":") if args.replay else None
    if replay and (len(replay) != 2 or not all(p.isdigit() for p in replay)):
        parser.error(f"--replay takes SEED:INDEX (two non-negative ints), got {args.replay!r}")
    if args.mesh:
        return _run_sharded(args)
    if replay:
        seed, index = (int(x) for x in replay)
        graph = generate(seed, index, () if args.known_bugs else tuple(KNOWN_BUGS))
        bindings = bindings_for(seed, index // args.per_program)
        print(f"# seed {seed}, graph {index}, bindings {bindings}\n{graph.code()}")
        res = check_graph(graph, bindings, modes, model=args.model)
        for m in res.mismatches:
            print(m.report())
        for e in res.errors:
            print(e)
        print(f"{len(res.mismatches)} mismatches, {len(res.errors)} errors")
        return 1 if res.mismatches or res.errors else 0
    total = run(args.count, args.seed, args.per_program, modes, shrink_failures=not args.no_shrink,
                avoid=() if args.known_bugs else tuple(KNOWN_BUGS), jobs=args.jobs,
                timeout=args.timeout, model=args.model)
    return 1 if total.mismatches or total.errors else 0

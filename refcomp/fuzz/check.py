"""Checking generated graphs: compile with and without search, run on the emulator, compare."""
from __future__ import annotations

import os
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..errors import RefcompError
from ..exec.profile import model_disagreements
from ..pipeline.assemble import program_for_schedule
from ..pipeline.load import load_program
from ..golden import FLOAT32_TOLERANCE, STORAGE_TOLERANCE
from ..ops.graph import flatten_outputs, input_nodes, symbols_of, toposort
from ..search.alternatives import untaken_moves
from ..search.search import search
from .resident import run_resident
from .graph import EDGE_BINDING, FuzzGraph, MAX_BINDING, SYMBOLS
from .tamper import tampered_load


# --- checking -------------------------------------------------------------------------------------
@dataclass
class Mismatch:
    graph: FuzzGraph
    mode: str  # "search" or "plain", or "reference" (its values are not finite where they must be)
    binding: dict
    which: int  # binding index (selects the random data)
    output: str
    message: str

    def report(self) -> str:
        return (
            f"MISMATCH seed={self.graph.seed} index={self.graph.index} mode={self.mode} "
            f"binding={self.binding} data={self.which} output={self.output}\n{self.message}\n"
            f"--- graph ---\n{self.graph.code()}"
        )


def bindings_for(seed: int, program: int) -> list[dict]:
    """Three bindings of the symbolic dims for one program: two in [1, MAX_BINDING] (B = 1 and the
    extremes included over a run), and the edge binding in [0, 2], where axes are empty and views of
    symbolic axes may not fit (then every backend must refuse as the reference does)."""
    rng = np.random.default_rng([seed, 1_000_000_007, program])
    out = []
    for _ in range(2):
        out.append({s: int(rng.integers(1, MAX_BINDING + 1)) for s in SYMBOLS})
    out.append({s: int(rng.integers(0, 3)) for s in SYMBOLS})
    return out


def storage_of(tensor) -> Optional[str]:
    """The 16-bit type rounded on the way to this output, if any (bfloat16, the coarser, if both)."""
    narrow = {n.dtype for n in toposort([tensor.node])} & set(STORAGE_TOLERANCE)
    return "bfloat16" if "bfloat16" in narrow else next(iter(narrow), None)


def tolerance(want64: np.ndarray, want32: np.ndarray, storage: Optional[str] = None) -> np.ndarray:
    """Per element: golden's float32 tolerance (its storage tolerance where a 16-bit type is rounded
    on the way), plus 4x the float32 reference's own error there (unbounded where the float32
    reference itself overflows), plus 2x its largest finite error anywhere in the output.

    The last term is for outputs that float32 cannot compute well anywhere: attention over scores of
    10,000 (seed 46's graph 100) is off by 2e-3 in most rows whichever way it is rounded, and the
    float32 reference's worst elements are not the program's. Where float32 is accurate it adds
    nothing; where it is not, no smaller error could be told from rounding."""
    tol = STORAGE_TOLERANCE[storage] if storage else FLOAT32_TOLERANCE
    rtol, atol = tol["rtol"], tol["atol"]
    with np.errstate(invalid="ignore"):
        own = np.abs(want32.astype(np.float64) - want64)
    finite = own[np.isfinite(own)]
    worst = float(finite.max()) if finite.size else 0.0
    return atol + rtol * np.abs(want64) + 4.0 * np.where(np.isfinite(own), own, np.inf) + 2.0 * worst


def compare(got, want64, want32, storage: Optional[str] = None) -> Optional[str]:
    """None when `got` matches: within tolerance where the reference is finite, and NaN or infinite
    where it is not. Which non-finite value is not compared: an infinity times a zero that rounding
    left at 1e-9 instead of 0 (a variance of equal values) is an infinity, not NaN, and either is
    right. Where the float32 reference is itself not finite, NaN is a float32 answer too (an input's
    infinity times a weight that underflows to 0 in float32 but not in float64: attention over a
    value row holding inf). Exact NaN and infinity semantics are the golden cases' job."""
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want64.shape:
        return f"shape {got.shape}, expected {want64.shape}"
    finite = np.isfinite(want64)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want64)
        float32_nan = np.isnan(got) & ~np.isfinite(want32)
        bad = np.where(
            finite, ~(err <= tolerance(want64, want32, storage)) & ~float32_nan, np.isfinite(got)
        )  # NaN is bad
    if not bad.any():
        return None
    where = np.argwhere(bad)
    i = tuple(where[0])
    worst = np.where(finite & np.isfinite(err), err, 0.0)
    return (
        f"{int(bad.sum())} of {bad.size} elements differ; first at {i}: got {got[i]!r}, "
        f"expected {want64[i]!r} (float32 reference {float(want32[i])!r}); "
        f"max abs error where finite {float(worst.max()):.3g}"
    )


TIED = "(tied across repeated layers)"


@dataclass
class BatchResult:
    mismatches: list[Mismatch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # internal errors: exceptions while compiling or running
    compared: int = 0  # (graph output, mode, binding) triples compared
    refusals: dict = field(
        default_factory=dict
    )  # error type -> (mode, binding) pairs refused as the reference refused
    kernels: dict = field(default_factory=dict)  # mode -> total kernels
    rules: dict = field(default_factory=dict)  # search rule -> how often the searched programs applied it
    launches: dict = field(default_factory=dict)  # launch mode (columns, tiles, ...) -> searched kernels
    seconds: dict = field(default_factory=dict)
    coverage: dict = field(default_factory=dict)  # generator move -> how many lines used it
    model_checked: int = 0  # kernels whose memory-model counts were compared with the profiler's
    minimum_checked: int = 0  # searched programs checked to stop where no single move is cheaper
    resident_runs: int = 0  # runs with the float inputs held on the backend (exec.resident), not fed
    resident_left: int = 0  # outputs such runs left in a held buffer (a Scatter into a held table)


def _reference(outputs, feeds, binding):
    """(float64, float32) outputs, or the RefcompError with which the reference refuses these feeds."""
    import refcomp as rc
    try:
        return (rc.evaluate(outputs, feeds, dims=binding, precision="float64"),
                rc.evaluate(outputs, feeds, dims=binding, precision="float32")), None
    except rc.RefcompError as exc:
        return None, exc


def check_batch(graphs: Sequence[FuzzGraph], bindings: Sequence[dict], modes=("search", "plain"),
                backend: str = "emulator", model: bool = False) -> BatchResult:
    """Compile all graphs into one program per mode, run at every binding, compare with the reference.

    Where the reference refuses a binding or feeds (a view that does not fit, stray ids), every mode
    must refuse with the same error type and message. Any other exception is an internal error.
    With `model`, each program is also profiled at its first accepted binding and the cost model's
    memory counts must equal the profiler's for every kernel (exec.profile.model_disagreements)."""
    result = BatchResult()
    outputs, owner = {}, {}
    for g in graphs:
        prefix = f"g{g.index}_"
        for var, tensor in g.build(prefix).items():
            outputs[prefix + var] = tensor
            owner[prefix + var] = (g, var)
    references = []
    t0 = time.perf_counter()
    for which, binding in enumerate(bindings):
        binding = own_dims(outputs.values(), binding)
        feeds = {}
        for g in graphs:
            feeds.update(g.feeds(f"g{g.index}_", binding, which))
        # an input read for its shape alone (rc.rand_like(x)) is no input of the graph
        feeds = feeds_of(outputs, feeds)
        references.append((binding, feeds) + _reference(outputs, feeds, binding))
        _check_finite(result, outputs, owner, binding, which, references[-1][2])
    result.seconds["reference"] = time.perf_counter() - t0
    for mode in modes:
        t0 = time.perf_counter()
        try:
            built, prog = _compile(outputs, mode)
        except Exception:
            result.errors.append(
                f"compile ({mode}) of graphs {[g.index for g in graphs]} failed:\n{traceback.format_exc()}"
            )
            continue
        result.kernels[mode] = len(prog.kernels)
        if mode == "search":
            for kernel in prog.kernels:
                launch = (kernel.launch.mode + (" in K slices" if kernel.launch.slices > 1 else "")
                          + (" split across blocks" if kernel.launch.splits > 1 else "")
                          + (" (online softmax)" if kernel.launch.splits > 1 and kernel.launch.stats else "")
                          + (" of 512+ threads" if kernel.launch.mode != "tiles" and kernel.launch.block > 256
                             else "")
                          + (" carrying a Scatter" if kernel.carried else "")
                          + (f" with {kernel.launch.row_end}" if kernel.row_stats else "")
                          + (" finishing its rows' reduction" if kernel.tail else "")
                          + _staged(kernel))
                result.launches[launch] = result.launches.get(launch, 0) + 1
        for step in (built.search.trace if built.search is not None else ()):
            result.rules[step.rule] = result.rules.get(step.rule, 0) + 1
            if step.copies:  # a move fired at the same node of every copy of a repeated layer
                result.rules[TIED] = result.rules.get(TIED, 0) + 1
        if model:
            _check_model(result, graphs, mode, built, references)
            if built.search is not None:
                _check_search_minimum(result, graphs, built.search)
        for which, (binding, feeds, want, refused) in enumerate(references):
            try:
                if mode == "search" and which == 1:  # the second binding with the inputs held on the device
                    got, left = run_resident(prog, outputs, feeds, backend, binding)
                    result.resident_runs += 1
                    result.resident_left += left
                else:
                    got = prog.run(feeds, backend=backend, dims=binding)
            except RefcompError as exc:
                got = exc
            except Exception:
                result.errors.append(
                    f"run ({mode}, {binding}) of graphs {[g.index for g in graphs]} failed:\n"
                    f"{traceback.format_exc()}"
                )
                continue
            if refused is not None:
                _check_refusal(result, graphs, outputs, owner, mode, binding, which, feeds, refused, got)
                continue
            if isinstance(got, Exception):
                result.errors.append(f"run ({mode}, {binding}) of graphs {[g.index for g in graphs]} raised "
                                     f"{type(got).__name__} where the reference ran: {got}")
                continue
            want64, want32 = want
            for key in outputs:
                g, var = owner[key]
                result.compared += 1
                message = compare(got[key], want64[key], want32[key], storage_of(outputs[key]))
                if message is not None:
                    result.mismatches.append(Mismatch(g, mode, binding, which, var, message))
        result.seconds[mode] = time.perf_counter() - t0
    return result


def _check_finite(result: BatchResult, outputs, owner, binding, which: int, want) -> None:
    """The generator's intervals promise finite values (no planted specials, the axes not emptied): a
    reference that is not finite there overflowed on the way (a 16-bit composite's squares once did),
    which no comparison with it would show."""
    if want is None or which == EDGE_BINDING:
        return
    for key, tensor in outputs.items():
        g, var = owner[key]
        if g.finite and not np.isfinite(want[0][key]).all():
            result.mismatches.append(
                Mismatch(
                    g,
                    "reference",
                    binding,
                    which,
                    var,
                    "the float64 reference is not finite where the generator's intervals say it is",
                )
            )


def _check_model(result: BatchResult, graphs, mode: str, program, references) -> None:
    """The cost model's counts against the profiler's, at the first binding the reference accepts."""
    accepted = next(((binding, feeds) for binding, feeds, _, refused in references if refused is None), None)
    if accepted is None:
        return
    try:
        problems = model_disagreements(program, program.profile(accepted[1], dims=accepted[0]))
    except (
        Exception
    ):  # like compile and run failures above: an internal error the fuzz report names, not a crash
        result.errors.append(
            f"profile ({mode}, {accepted[0]}) of graphs {[g.index for g in graphs]} failed:\n"
            f"{traceback.format_exc()}"
        )
        return
    result.model_checked += len(program.kernels)
    if problems:
        result.errors.append(f"the cost model ({mode}, {accepted[0]}) disagrees with the profiler on graphs "
                             f"{[g.index for g in graphs]}: " + "; ".join(problems[:8]))


def _check_search_minimum(result: BatchResult, graphs, search_result) -> None:
    """A finished search claims no single rule application from its schedule is cheaper: each move
    still legal there is priced (search/alternatives.py) and none may be."""
    if not search_result.complete:  # stopped on its budget: it claims nothing
        return
    try:
        chosen, moves = untaken_moves(search_result)
    except (
        Exception
    ):  # like compile, run and profile failures above: an internal error the report names, not a crash
        result.errors.append(
            f"pricing the untaken moves of graphs {[g.index for g in graphs]} failed:\n"
            f"{traceback.format_exc()}"
        )
        return
    result.minimum_checked += 1
    cheaper = [m for m in moves if m.time_s < chosen.time_s * (1 - 1e-9)]
    if cheaper:
        result.errors.append(
            f"the search of graphs {[g.index for g in graphs]} stopped at {chosen.time_s * 1e6:.3f} us, but "
            + "; ".join(f"{m.rule} at {m.where} costs {m.time_s * 1e6:.3f} us" for m in cheaper[:4])
        )


def _check_refusal(
    result: BatchResult, graphs, outputs, owner, mode, binding, which, feeds, refused, got
) -> None:
    """The program must refuse exactly as the reference did; the mismatch names the graph at fault."""
    same = isinstance(got, Exception) and type(got) is type(refused) and str(got) == str(refused)
    if same:
        kind = type(refused).__name__
        result.refusals[kind] = result.refusals.get(kind, 0) + 1
        return
    culprit = _refusing_graph(graphs, outputs, owner, binding, feeds) or graphs[0]
    what = f"raised {type(got).__name__}: {got}" if isinstance(got, Exception) else "returned values"
    result.mismatches.append(
        Mismatch(
            culprit,
            mode,
            binding,
            which,
            "(refusal)",
            f"the reference refused with {type(refused).__name__}: {refused}\nbut the program {what}",
        )
    )


def _refusing_graph(graphs, outputs, owner, binding, feeds):
    """The first graph whose own reference refuses these feeds."""
    for g in graphs:
        mine = {k: t for k, t in outputs.items() if owner[k][0] is g}
        _, refused = _reference(mine, feeds_of(mine, feeds), own_dims(mine.values(), binding))
        if refused is not None:
            return g
    return None


def feeds_of(outputs, feeds) -> dict:
    """The feeds these outputs read."""
    names = {n.attrs["name"] for n in input_nodes(toposort([t.node for t in outputs.values()]))}
    return {k: v for k, v in feeds.items() if k in names}


def own_dims(tensors, binding: dict) -> dict:
    """The part of a binding that names dims of these tensors' graph (dims= refuses any other)."""
    tensors = list(tensors)
    names = {s.name for s in symbols_of(toposort([t.node for t in tensors]), [t.edge for t in tensors])}
    return {k: v for k, v in binding.items() if k in names}


def _compile(outputs, mode: str):
    """(the program as built, the program to run): rc.compile, without the search's progress line. A
    searched program is run as saved to a file and loaded again (against the same user graph, as the
    program cache loads it), so every fuzzed program also checks program files: the same source, and
    the compiled graph rebuilt from JSON; then an edited copy of the file must be refused (tamper.py).
    The built one keeps its kernels' access plans (a loaded program has none), for the cost model's check."""
    import refcomp as rc
    if mode == "plain":
        program = rc.compile(outputs, search=False, cache=False)
        return program, program
    tensors, _ = flatten_outputs(outputs)
    result = search([t.edge for t in tensors], progress=False)
    program = program_for_schedule(outputs, result, result.schedule)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "program.json")
        program.save(path)
        loaded = load_program(path, outputs)
        tampered_load(path, outputs, program.source, seed=len(program.source))
    if loaded.source != program.source:
        raise AssertionError("the loaded program's source differs from the saved one")
    return program, loaded


def check_graph(
    graph: FuzzGraph, bindings: Sequence[dict], modes=("search", "plain"), model: bool = False
) -> BatchResult:
    """One graph alone (its input names unprefixed apart from the g<index>_ the batch uses)."""
    return check_batch([graph], bindings, modes, model=model)


def shrink(graph: FuzzGraph, binding: dict, which: int, mode: str) -> FuzzGraph:
    """The shortest prefix of the graph (one output, dead lines dropped) that still mismatches alone."""
    for upto in range(len(graph.lines)):
        candidate = graph.truncated(upto)
        res = check_one(candidate, binding, which, mode)
        if res:
            return candidate
    return graph


def check_one(graph: FuzzGraph, binding: dict, which: int, mode: str) -> bool:
    bindings = [binding] * (which + 1)  # the data of binding `which`
    try:
        res = check_batch([graph], bindings, () if mode == "reference" else (mode,))
    except Exception:
        return True
    return bool(res.mismatches or res.errors)


def _staged(kernel) -> str:
    """The tally's words for a matmul's loads of A made once per K step or per row (codegen.staged)."""
    scopes = {a.scope for a in kernel.plan.accesses} if kernel.plan is not None else set()
    return ((" staging A's loads of k" if "a_cols" in scopes else "")
            + (" holding A's loads of a row" if "a_rows" in scopes else ""))

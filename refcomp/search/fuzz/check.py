"""Checking generated graphs: compile with and without search, run on the emulator, compare."""
from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ...golden import FLOAT32_TOLERANCE
from .graph import FuzzGraph, MAX_BINDING, SYMBOLS


# --- checking -------------------------------------------------------------------------------------
@dataclass
class Mismatch:
    graph: FuzzGraph
    mode: str  # "search" or "plain"
    binding: dict
    which: int  # binding index (selects the random data)
    output: str
    message: str

    def report(self) -> str:
        return (f"MISMATCH seed={self.graph.seed} index={self.graph.index} mode={self.mode} binding={self.binding} "
                f"data={self.which} output={self.output}\n{self.message}\n--- graph ---\n{self.graph.code()}")


def bindings_for(seed: int, program: int) -> list[dict]:
    """Two bindings of the symbolic dims for one program (B = 1 and extremes included over a run)."""
    rng = np.random.default_rng([seed, 1_000_000_007, program])
    out = []
    for _ in range(2):
        out.append({s: int(rng.integers(1, MAX_BINDING + 1)) for s in SYMBOLS})
    return out


def tolerance(want64: np.ndarray, want32: np.ndarray) -> np.ndarray:
    """Per element: golden's float32 tolerance plus 4x the float32 reference's own error there."""
    rtol, atol = FLOAT32_TOLERANCE["rtol"], FLOAT32_TOLERANCE["atol"]
    return atol + rtol * np.abs(want64) + 4.0 * np.abs(want32.astype(np.float64) - want64)


def compare(got, want64, want32) -> Optional[str]:
    got = np.asarray(got, dtype=np.float64)
    if got.shape != want64.shape:
        return f"shape {got.shape}, expected {want64.shape}"
    if not np.all(np.isfinite(want64)):
        return None  # the reference itself is not finite: a generator problem, counted separately
    err = np.abs(got - want64)
    bad = ~(err <= tolerance(want64, want32))  # NaN counts as bad
    if not bad.any():
        return None
    where = np.argwhere(bad)
    i = tuple(where[0])
    return (f"{int(bad.sum())} of {bad.size} elements differ; first at {i}: got {got[i]!r}, expected {want64[i]!r} "
            f"(float32 reference {float(want32[i])!r}); max abs error {np.nanmax(np.where(np.isfinite(err), err, np.inf)):.3g}")


@dataclass
class BatchResult:
    mismatches: list[Mismatch] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # exceptions while compiling or running
    skipped: int = 0  # outputs whose float64 reference is not finite (a generator problem)
    compared: int = 0  # (graph, mode, binding) triples compared
    kernels: dict = field(default_factory=dict)  # mode -> total kernels
    seconds: dict = field(default_factory=dict)
    coverage: dict = field(default_factory=dict)  # generator move -> how many lines used it


def check_batch(graphs: Sequence[FuzzGraph], bindings: Sequence[dict], modes=("search", "plain"),
                backend: str = "emulator") -> BatchResult:
    """Compile all graphs into one program per mode, run at every binding, compare with the reference."""
    import refcomp as rc
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
        feeds = {}
        for g in graphs:
            feeds.update(g.feeds(f"g{g.index}_", binding, which))
        want64 = rc.evaluate(outputs, feeds, dims=binding, precision="float64")
        want32 = rc.evaluate(outputs, feeds, dims=binding, precision="float32")
        references.append((feeds, want64, want32))
    result.seconds["reference"] = time.perf_counter() - t0
    for mode in modes:
        t0 = time.perf_counter()
        try:
            prog = _compile(outputs, mode)
        except Exception:
            result.errors.append(f"compile ({mode}) of graphs {[g.index for g in graphs]} failed:\n{traceback.format_exc()}")
            continue
        result.kernels[mode] = len(prog.kernels)
        for which, (binding, (feeds, want64, want32)) in enumerate(zip(bindings, references)):
            try:
                got = prog.run(feeds, backend=backend, dims=binding)
            except Exception:
                result.errors.append(f"run ({mode}, {binding}) of graphs {[g.index for g in graphs]} failed:\n{traceback.format_exc()}")
                continue
            for key in outputs:
                g, var = owner[key]
                if not np.all(np.isfinite(want64[key])):
                    result.skipped += 1
                    continue
                result.compared += 1
                message = compare(got[key], want64[key], want32[key])
                if message is not None:
                    result.mismatches.append(Mismatch(g, mode, binding, which, var, message))
        result.seconds[mode] = time.perf_counter() - t0
    return result


def _compile(outputs, mode: str):
    """rc.compile, without the search's progress line."""
    import refcomp as rc
    from ...codegen.program import program_for_schedule
    from ...ops.graph import flatten_outputs
    from ..search import search
    if mode == "plain":
        return rc.compile(outputs, search=False)
    tensors, _ = flatten_outputs(outputs)
    result = search([t.edge for t in tensors], progress=False)
    return program_for_schedule(outputs, result, result.schedule)


def check_graph(graph: FuzzGraph, bindings: Sequence[dict], modes=("search", "plain")) -> BatchResult:
    """One graph alone (its input names unprefixed apart from the g<index>_ the batch uses)."""
    return check_batch([graph], bindings, modes)


def shrink(graph: FuzzGraph, binding: dict, which: int, mode: str) -> FuzzGraph:
    """The shortest prefix of the graph (one output, dead lines dropped) that still mismatches alone."""
    for upto in range(len(graph.lines)):
        candidate = graph.truncated(upto)
        res = _check_one(candidate, binding, which, mode)
        if res:
            return candidate
    return graph


def _check_one(graph: FuzzGraph, binding: dict, which: int, mode: str) -> bool:
    bindings = [binding] if which == 0 else [binding, binding]
    try:
        res = check_batch([graph], bindings, (mode,))
    except Exception:
        return True
    return bool(res.mismatches or res.errors)

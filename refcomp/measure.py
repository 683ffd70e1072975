"""Measured mode: time the search's candidate schedules on the GPU and keep the fastest.

The cost model ranks schedules; on a real device the ranking can be wrong (caches, occupancy,
launch gaps the roofline does not see). The search therefore keeps its best few distinct
schedules (`SearchResult.candidates`, the model's pick first), and measured mode builds each
one's program, checks it against the NumPy reference, and times its kernels with CUDA events
(refcomp.exec.timing: cold L2, rounds queued behind a spin kernel).

The correctness check runs the program through `Program.run` at a small binding (each symbol
capped at CHECK_DIM_CAP, since the reference interpreter is slow at full size) and compares with
`rc.evaluate(..., precision="float64")` within `golden.FLOAT32_TOLERANCE`.

Everything here needs PyCUDA and a CUDA device; without them every entry point raises
RefcompError naming what is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .errors import BindingError, RefcompError
from .pipeline.assemble import program_for_schedule
from .reference.reference import evaluate
from .exec.timing import Timing, gpu_unavailable_reason, require_gpu, time_program  # noqa: F401  (part of this module's API)
from .golden import FLOAT32_TOLERANCE, compare
from .ops.dtypes import DTYPES
from .ops.graph import flatten_outputs, input_nodes, toposort
from .ops.primitives import Node
from .search.search import search as run_search
from .symbolic.dims import evaluate_dim

CHECK_DIM_CAP = 16  # symbols are bound to at most this for the correctness check (the reference is slow)
PREFER_MODEL_MARGIN = 0.02  # another candidate replaces the model's pick only when this much faster


# --- inputs --------------------------------------------------------------------------------------
def graph_inputs(outputs, result=None) -> list[Node]:
    """The Input nodes of the user's graph and of the searched graph (a rewrite may drop one)."""
    tensors, _ = flatten_outputs(outputs)
    nodes = toposort([t.node for t in tensors])
    if result is not None:
        nodes = nodes + list(result.graph.nodes)
    return input_nodes(nodes)


def _id_ranges(nodes: Sequence[Node], dims: Mapping[str, int]) -> dict[str, int]:
    """For each int32 input read as ids by a Gather or Scatter: the number of rows of the smallest table."""
    rows: dict[str, int] = {}
    for node in nodes:
        if node.op.name not in ("Gather", "Scatter"):
            continue
        table, ids = node.srcs[:2]
        if ids.node.op.name == "Input":
            n = evaluate_dim(table.shape[0], dims)
            name = ids.node.attrs["name"]
            rows[name] = min(rows.get(name, n), n)
    return rows


def make_feeds(
    outputs,
    dims: Mapping[str, int],
    seed: int = 0,
    fixed: Optional[Mapping[str, np.ndarray]] = None,
    result=None,
) -> dict[str, np.ndarray]:
    """Fresh random feeds for every input at binding `dims`; arrays in `fixed` are used as given.

    Float inputs are standard normal, except that an input of two or more axes all of fixed size
    (a weight) is scaled by 1/sqrt(prod(shape[1:])), its fan-in for (out, in) and (out, in, kh, kw)
    layouts, so activations stay O(1) through matmuls and a float32 program can be held to
    FLOAT32_TOLERANCE. int32 inputs read by a Gather get ids in [0, rows of the table), by a Scatter
    distinct ones; other int32 inputs get 0 or 1.
    """
    fixed = dict(fixed or {})
    inputs = graph_inputs(outputs, result)
    tensors, _ = flatten_outputs(outputs)
    nodes = toposort([t.node for t in tensors]) + (list(result.graph.nodes) if result is not None else [])
    ranges = _id_ranges(nodes, dims)
    scattered = {n.srcs[1].node.attrs.get("name") for n in nodes if n.op.name == "Scatter"}
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for node in inputs:
        name, shape = node.attrs["name"], node.attrs["shape"]
        if name in fixed:
            feeds[name] = fixed[name]
            continue
        try:
            sizes = tuple(evaluate_dim(d, dims) for d in shape)
        except Exception as exc:  # an unbound symbol
            raise BindingError(
                f"input {name!r} of shape {tuple(map(str, shape))}: cannot size it at {dict(dims)} ({exc})"
            ) from exc
        if DTYPES[node.dtype].is_int and name in scattered:  # a Scatter's ids must be distinct
            count = int(np.prod(sizes))
            feeds[name] = (
                rng.permutation(max(ranges.get(name, count), count))[:count].reshape(sizes).astype(node.dtype)
            )
            continue
        if DTYPES[node.dtype].is_int:
            feeds[name] = rng.integers(0, max(ranges.get(name, 2), 1), size=sizes, dtype=node.dtype)
            continue
        scale = 1.0
        if len(shape) >= 2 and all(isinstance(d, int) for d in shape):
            scale = 1.0 / np.sqrt(max(int(np.prod(sizes[1:])), 1))
        feeds[name] = (rng.standard_normal(sizes) * scale).astype(
            np.float64 if node.dtype == "float64" else np.float32)
    return feeds


def check_binding(dims: Mapping[str, int], cap: int = CHECK_DIM_CAP) -> dict[str, int]:
    """The binding the correctness check runs at: every symbol at most `cap`."""
    return {k: min(int(v), cap) for k, v in dims.items()}


def _flat(values) -> dict[str, np.ndarray]:
    if isinstance(values, dict):
        return {str(k): np.asarray(v) for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return {str(i): np.asarray(v) for i, v in enumerate(values)}
    return {"output": np.asarray(values)}


# --- the correctness check -----------------------------------------------------------------------
@dataclass
class ReferenceCheck:
    """Feeds at a (small) binding and the float64 reference outputs there, to check programs against."""

    feeds: dict[str, np.ndarray]
    dims: dict[str, int]
    want: dict[str, np.ndarray]

    @classmethod
    def build(
        cls,
        outputs,
        dims: Mapping[str, int],
        seed: int = 1,
        fixed: Optional[Mapping[str, np.ndarray]] = None,
        result=None,
        cap: Optional[int] = CHECK_DIM_CAP,
    ) -> "ReferenceCheck":
        """Reference at `dims` capped to `cap` (None: at `dims` itself). If the capped binding is
        invalid for the graph (a slice longer than a capped axis), the full binding is used."""
        bindings = [dict(dims)] if cap is None else [check_binding(dims, cap), dict(dims)]
        error: Optional[Exception] = None
        for b in bindings:
            try:
                feeds = make_feeds(outputs, b, seed, fixed, result)
                known = {n.attrs["name"] for n in graph_inputs(outputs)}
                want = evaluate(
                    outputs, {k: v for k, v in feeds.items() if k in known}, dims=b, precision="float64"
                )
                return cls(feeds, b, _flat(want))
            except RefcompError as exc:  # BindingError / FeedError at the capped binding: try the full one
                error = exc
        raise RefcompError(f"the reference could not be evaluated at {dict(dims)}: {error}")

    def problems(self, program, backend: str = "pycuda") -> list[str]:
        """Mismatches of `program`'s outputs with the reference ([] when they agree)."""
        names = {n.attrs["name"] for n in graph_inputs(program.outputs)}
        got = program.run(
            {k: v for k, v in self.feeds.items() if k in names}, backend=backend, dims=self.dims
        )
        return compare(_flat(got), self.want, FLOAT32_TOLERANCE)


# --- measured mode -------------------------------------------------------------------------------
@dataclass
class Measurement:
    index: int  # position in result.candidates (0: the cost model's pick)
    schedule: Any
    program: Any
    predicted_s: float
    timing: Optional[Timing]  # None when the program failed its check (and strict=False)
    problems: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.timing.median_s if self.timing is not None else float("inf")


def measure_programs(
    outputs,
    result,
    dims: Optional[Mapping[str, int]] = None,
    repeats: int = 20,
    warmup: int = 5,
    *,
    schedules: Optional[Sequence] = None,
    fixed_feeds: Optional[Mapping[str, np.ndarray]] = None,
    check: Optional[ReferenceCheck] = None,
    verify: bool = True,
    strict: bool = True,
    seed: int = 0,
    flush_l2: bool = True,
) -> list[Measurement]:
    """Build, check and time the program of each candidate schedule (default: result.candidates).

    `dims` is the binding to time at (default: the search's own binding, from its dims_hint);
    `fixed_feeds` are arrays to feed as given (e.g. real weights), every other input is random.
    `check` is a prepared ReferenceCheck (built here when None and `verify`). A candidate whose
    outputs disagree with the reference raises RefcompError when `strict`, else is reported in
    `problems` and not timed.
    """
    require_gpu()
    dims = dict(result.bindings if dims is None else dims)
    schedules = list(result.candidates or [result.schedule]) if schedules is None else list(schedules)
    feeds = make_feeds(outputs, dims, seed, fixed_feeds, result)
    if verify and check is None:
        check = ReferenceCheck.build(outputs, dims, seed + 1, fixed_feeds, result)
    out = []
    for i, sched in enumerate(schedules):
        program = program_for_schedule(outputs, result, sched)
        m = Measurement(i, sched, program, program.search.time_s if program.search else float("nan"), None)
        if verify:
            m.problems = check.problems(program)
            if m.problems:
                if strict:
                    raise RefcompError(
                        f"candidate schedule {i} ({len(program.kernels)} kernels) gives wrong results at "
                        f"{check.dims}: " + "; ".join(m.problems)
                    )
                out.append(m)
                continue
        m.timing = time_program(program, feeds, dims, repeats, warmup, flush_l2)
        out.append(m)
    return out


def measure_candidates(
    outputs, result, dims: Optional[Mapping[str, int]] = None, repeats: int = 20, warmup: int = 5, **options
) -> list[tuple[Any, float]]:
    """(schedule, median seconds) for each of the search's candidate schedules, in candidate order
    (the cost model's pick first). See measure_programs for the options."""
    return [
        (m.schedule, m.seconds) for m in measure_programs(outputs, result, dims, repeats, warmup, **options)
    ]


def pick(measurements: Sequence[Measurement], margin: float = PREFER_MODEL_MARGIN) -> Measurement:
    """The fastest measured candidate; the model's pick (index 0) unless another beats it by `margin`."""
    timed = [m for m in measurements if m.timing is not None]
    if not timed:
        raise RefcompError("measured mode: no candidate program passed its check, so none was timed")
    best = min(timed, key=lambda m: m.seconds)
    first = next((m for m in timed if m.index == 0), None)
    if first is not None and best.seconds >= first.seconds * (1.0 - margin):
        return first
    return best


def compile_measured(
    outputs, dims_hint: Optional[Mapping[str, int]] = None, repeats: int = 20, warmup: int = 5, **options
):
    """`rc.compile(outputs, measure=True)`: search, time every candidate on the GPU, return the fastest.

    The returned Program has `.measured`: (schedule, median seconds) for every candidate, model's pick first.
    """
    require_gpu("rc.compile(measure=True)")
    tensors, _ = flatten_outputs(outputs)
    result = run_search([t.edge for t in tensors], dims_hint)
    measurements = measure_programs(outputs, result, None, repeats, warmup, **options)
    best = pick(measurements)
    best.program.measured = [(m.schedule, m.seconds) for m in measurements]
    result.evaluator = None  # as in rc.compile: the program keeps the search's result, not its kernels
    return best.program

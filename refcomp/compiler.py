"""The driver: `rc.compile` calls each stage once, in order, and nothing below it imports it.

    tensors (ops, or frontends.onnx)
      -> search.search: verified rewrites, then the fusion schedule and its kernels' prices
      -> codegen (pipeline.assemble.lower_schedule): the kernel of each scheduled group
      -> pipeline.assemble.searched_program: prices refined from the kernels, and the Program (exec)
    or, with search=False, pipeline.assemble.plain_program: one kernel per compute node.

A searched program is cached on disk (pipeline.program_cache), so the next process loads it instead
of searching again. Measured mode (`measure=True`) times the search's candidate schedules on a GPU
(refcomp.measure).
"""
from __future__ import annotations

import contextlib
import gc
from typing import Mapping, Optional

from .codegen.lower import materialise_outputs
from .errors import RefcompError
from .reference.limits import require_indexable
from .exec.program import Program
from .ops.core import dtype_name
from .ops.dtypes import FLOAT_DTYPES
from .ops.graph import flatten_outputs, symbols_of, toposort
from .ops.primitives import make_node
from .ops.tensor import Tensor
from .pipeline.assemble import lower_schedule, plain_program, searched_program
from .pipeline.program_cache import load_cached, program_path, store
from .progress import stage
from .search.cost import H200, binding_for
from .ops.graph import identity_edge, own_scatter_tables, rebuild
from .search.search import search as run_search
from .symbolic.dims import check_dim_values


def stored_as(outputs, dtype):
    """`outputs` with every float32 input and output stored as `dtype` (compile(dtype=)): each such
    input becomes a `dtype` input widened as it is read, each output is rounded to `dtype`, and the
    computation between them stays float32."""
    name = dtype_name(dtype, "compile(dtype=)")
    if name not in FLOAT_DTYPES:
        raise RefcompError(
            f"compile(dtype={dtype!r}): the storage type must be one of {', '.join(FLOAT_DTYPES)}"
        )
    tensors, restructure = flatten_outputs(outputs)
    if name == "float32":
        return outputs

    def narrow_input(node):
        if node.op.name != "Input" or node.dtype != "float32":
            return None
        kept = (
            {"ranges": node.attrs["ranges"]} if "ranges" in node.attrs else {}
        )  # the dims' allowed values stay
        stored = make_node("Input", dtype=name, name=node.attrs["name"], shape=node.attrs["shape"], **kept)
        return identity_edge(make_node("Cast", (identity_edge(stored),), to="float32"))

    edges, _ = rebuild([t.edge for t in tensors], narrow_input)
    return restructure([t if t.dtype == "int32" else t.to(name) for t in (Tensor(e) for e in edges)])


YOUNG_COLLECTION = 20000  # allocations between collections of the youngest generation during a compile


@contextlib.contextmanager
def _older_objects_frozen():
    """A compile allocates enough to set off a full garbage collection, which would scan every object
    of SymPy and the other imported modules; with the objects that existed before it frozen
    (gc.freeze) a collection scans only the compile's own. A caller that froze objects itself keeps
    its arrangement. The youngest generation is collected after YOUNG_COLLECTION allocations rather
    than 700: most of a compile's objects (SymPy's intermediate expressions) die young, freed by
    their reference counts, and are then never scanned. (What it saves: docs/ARCHITECTURE.md,
    "Compile time".)"""
    threshold = gc.get_threshold()
    gc.set_threshold(
        max(threshold[0], YOUNG_COLLECTION) if threshold[0] else 0, *threshold[1:]
    )  # (0: collection is off)
    frozen = not gc.get_freeze_count()
    if frozen:
        gc.freeze()
    try:
        yield
    finally:
        if frozen:
            gc.unfreeze()
        gc.set_threshold(*threshold)


def compile(
    outputs,
    search: bool = True,
    dims_hint: Optional[Mapping[str, int]] = None,
    measure: bool = False,
    cache: bool = True,
    dtype=None,
) -> Program:
    """Lower `outputs` (a Tensor, list or dict) to a CUDA program.

    With `search` (the default) the graph is rewritten by verified rules and the fusion schedule is
    chosen by the search under the H200 cost model, at the binding `dims_hint` (symbols it leaves out
    count as refcomp.search.cost.DEFAULT_DIM). Without it, every compute node gets its own kernel.
    With `measure` (needs PyCUDA and a GPU) the search's candidate schedules are each built, checked
    against the NumPy reference and timed on the GPU at `dims_hint`, and the fastest is returned
    (`program.measured` lists every candidate's time; see refcomp.measure). With `cache` (the
    default) a searched program is loaded from the program cache when this graph was compiled
    before; a loaded program has no `.search` (its `explain()` is the text saved with it). With
    `dtype` ("float16", "bfloat16") float32 inputs and outputs are stored in that type (stored_as).
    """
    with _older_objects_frozen():
        return _compile(outputs, search, dims_hint, measure, cache, dtype)


def _compile(outputs, search, dims_hint, measure, cache, dtype) -> Program:
    if dtype is not None:
        outputs = stored_as(outputs, dtype)
    tensors, _ = flatten_outputs(outputs)
    nodes, edges = toposort([t.node for t in tensors]), [t.edge for t in tensors]
    dims_hint = check_dim_values(dims_hint, {s.name for s in symbols_of(nodes, edges)}, "dims_hint")
    require_indexable(nodes, edges, binding_for(nodes, dims_hint, edges))  # before anything is priced
    if measure:
        if not search:
            raise RefcompError(
                "compile(measure=True) times the search's candidate schedules, so it needs search=True"
            )
        from .measure import (
            compile_measured,
        )  # here: measured mode's timing and checks are not every compile's

        return compile_measured(outputs, dims_hint)
    if not search:
        with stage("code generation"):
            output_nodes = [
                e.node for e in own_scatter_tables([identity_edge(n) for n in materialise_outputs(tensors)])
            ]
            return plain_program(outputs, output_nodes)
    path = program_path(outputs, dims_hint, H200) if cache else None
    program = load_cached(outputs, path) if cache else None
    if program is None:
        result = run_search([t.edge for t in tensors], dims_hint, H200)
        with stage("code generation"):
            kernels = lower_schedule(result)
            program = searched_program(outputs, result, kernels)
        if cache:
            store(program, path)  # its explanation prices untaken moves with the search's evaluator
        result.evaluator = None  # whose built kernels a program should not keep alive
    return program


class CompilingModel:
    """What an imported model (rc.onnx's, rc.torch's) adds to its graph: a program compiled once per
    `search` setting, which runs every binding in range. The importer's model class provides `feeds`
    (weights added), `dims_for` (dims the feeds show), `evaluate` and `finish` (outputs typed as the
    model's framework types them)."""

    def compile(self, search: bool = True) -> Program:
        programs = self.__dict__.setdefault("_programs", {})
        if search not in programs:
            programs[search] = compile(self.outputs, search=search)
        return programs[search]

    def run(self, feeds: Optional[Mapping[str, object]] = None, backend: Optional[str] = None,
            dims: Optional[Mapping[str, int]] = None, search: bool = True) -> dict:
        """Every output, by the compiled program on `backend` ("emulator", "pycuda" or "numpy": the
        reference)."""
        if backend == "numpy":
            return self.evaluate(feeds, dims)
        merged, dims = self.feeds(feeds), self.dims_for(feeds, dims)
        results = self.compile(search).run(merged, backend=backend, dims=dims) if self.outputs else {}
        return self.finish(results, merged, dims)

"""The driver: `rc.compile` calls each stage in turn, and nothing below it imports it.

    tensors (ops, or frontends.onnx)
      -> search.search: verified rewrites, then the fusion schedule under the cost model
      -> exec.program.program_for_schedule: codegen lowers each kernel group, and a Program runs them
    or, with search=False, codegen.lower.lower_plain: one kernel per compute node.

Measured mode (`measure=True`) times the search's candidate schedules on a GPU (refcomp.measure).
"""
from __future__ import annotations

from typing import Mapping, Optional

from .codegen.lower import lower_plain, materialise_outputs
from .errors import RefcompError
from .exec.program import Program, program_for_schedule
from .measure import compile_measured
from .ops.graph import flatten_outputs, symbols_of, toposort
from .search.search import search as run_search
from .symbolic.dims import check_dim_values


def compile(outputs, search: bool = True, dims_hint: Optional[Mapping[str, int]] = None, measure: bool = False) -> Program:
    """Lower `outputs` (a Tensor, list or dict) to a CUDA program.

    With `search` (the default) the graph is rewritten by verified rules and the fusion schedule is
    chosen by the search under the H200 cost model, at the binding `dims_hint` (symbols it leaves out
    count as refcomp.search.cost.DEFAULT_DIM). Without it, every compute node gets its own kernel.
    With `measure` (needs PyCUDA and a GPU) the search's candidate schedules are each built, checked
    against the NumPy reference and timed on the GPU at `dims_hint`, and the fastest is returned
    (`program.measured` lists every candidate's time; see refcomp.measure).
    """
    tensors, _ = flatten_outputs(outputs)
    symbols = symbols_of(toposort([t.node for t in tensors]), [t.edge for t in tensors])
    dims_hint = check_dim_values(dims_hint, {s.name for s in symbols}, "dims_hint")
    if measure:
        if not search:
            raise RefcompError("compile(measure=True) times the search's candidate schedules, so it needs search=True")
        return compile_measured(outputs, dims_hint)
    if not search:
        output_nodes = materialise_outputs(tensors)
        return Program(outputs, lower_plain(output_nodes), output_nodes)
    result = run_search([t.edge for t in tensors], dims_hint)
    return program_for_schedule(outputs, result, result.schedule)

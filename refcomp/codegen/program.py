"""A compiled program: CUDA source, kernels, and a runner that drives any backend.

`rc.compile(outputs)` lowers once; `Program.run(feeds)` binds dims from the feeds, plans memory
for that binding, uploads, launches every kernel with geometry computed from the bound dims, and
downloads the outputs. The same runner serves the host emulator and PyCUDA through the
`exec.abi.Backend` protocol; `backend="numpy"` answers with the reference interpreter instead.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..errors import FeedError, RefcompError
from ..exec.backends import get_backend
from ..exec.bindings import bind_dims
from ..exec.reference import evaluate
from ..ops.graph import flatten_outputs, input_nodes, toposort
from ..ops.primitives import Node
from ..symbolic.dims import evaluate_dim, prod
from .kernels import Kernel, prelude
from .lower import dim_names_of, kernel_for_group, kernel_name, lower_plain, materialise_outputs
from .memory import MemoryPlan, plan_memory


class Program:
    def __init__(self, outputs, kernels: list[Kernel], output_nodes: list[Node], search=None):
        self.outputs = outputs
        self.tensors, self._rebuild = flatten_outputs(outputs)
        self.kernels = kernels
        self.output_nodes = output_nodes
        self.search = search  # the SearchResult (trace, costs) when the program was searched
        self.measured = None  # measured mode: (schedule, median GPU seconds) per candidate, the model's pick first
        nodes = toposort(list(output_nodes))
        self._inputs = input_nodes(nodes)
        self._all_inputs = [n for n in nodes if n.op.name == "Input"]
        self.dim_symbols = {name: sym for sym, name in dim_names_of(nodes).items()}
        self.source = prelude(len(kernels)) + "\n\n" + "\n\n".join(k.source for k in kernels) + "\n"
        self._modules: dict[str, object] = {}

    def __repr__(self) -> str:
        return f"<Program: {len(self.kernels)} kernels ({', '.join(k.name for k in self.kernels)})>"

    # --- memory ------------------------------------------------------------------------------
    def _node_bytes(self, node: Node, bindings: Mapping[str, int]) -> int:
        return 4 * evaluate_dim(prod(node.shape), bindings)

    def memory_plan(self, bindings: Mapping[str, int]) -> MemoryPlan:
        steps = [(k.output.id, [n.id for n in k.reads]) for k in self.kernels]
        nbytes = {k.output.id: self._node_bytes(k.output, bindings) for k in self.kernels}
        return plan_memory(steps, nbytes, keep={n.id for n in self.output_nodes})

    def peak_intermediate_bytes(self, dims: Optional[Mapping[str, int]] = None) -> int:
        """Bytes of intermediate buffers one run allocates at this binding (after reuse)."""
        return self.memory_plan(dict(dims or {})).peak_bytes

    # --- running -----------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, object], backend: Optional[str] = None, dims: Optional[Mapping[str, int]] = None):
        if backend == "numpy":
            return evaluate(self.outputs, feeds, dims)
        be = get_backend(backend)
        arrays, bindings = bind_dims(self._inputs, feeds, dims)
        self._check_ids(arrays)
        if be.name not in self._modules:
            self._modules[be.name] = be.load(self.source, [k.signature for k in self.kernels])
        module = self._modules[be.name]
        buffers: dict[int, object] = {}
        uploaded = {name: be.upload(np.ascontiguousarray(a, dtype=np.int32 if a.dtype.kind in "iu" else np.float32))
                    for name, a in arrays.items()}
        for node in self._all_inputs:
            buffers[node.id] = uploaded[node.attrs["name"]]
        plan = self.memory_plan(bindings)
        slots = [be.alloc(max(n, 4)) for n in plan.slot_bytes]
        for slot, n in zip(slots, plan.slot_bytes):
            be.fill_nan(slot, max(n, 4))
        for node_id, slot in plan.slot_of.items():
            buffers[node_id] = slots[slot]
        for node in self.output_nodes:
            if node.id not in buffers:
                n = max(self._node_bytes(node, bindings), 4)
                buffers[node.id] = be.alloc(n)
                be.fill_nan(buffers[node.id], n)
        for kernel in self.kernels:
            grid, block = kernel.launch.geometry(bindings)
            if grid[0] == 0:
                continue
            module.launch(kernel.name, grid, block, kernel.args(buffers, bindings, self.dim_symbols))
        be.synchronize()
        results = []
        for node, tensor in zip(self.output_nodes, self.tensors):  # an identity view may reshape
            shape = tuple(evaluate_dim(n, bindings) for n in tensor.shape)
            results.append(be.download(buffers[node.id], shape, np.dtype(np.float32)))
        return self._rebuild(results)

    def _check_ids(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Reject out-of-range embedding ids before launch (the reference interpreter does the same)."""
        for kernel in self.kernels:
            if kernel.kind != "gather":
                continue
            table, ids = kernel.output.srcs
            if ids.node.op.name == "Input":
                values = arrays[ids.node.attrs["name"]]
                rows = table.shape[0]
                if values.size and (values.min() < 0 or (isinstance(rows, int) and values.max() >= rows)):
                    raise FeedError(f"{kernel.output.label}: ids from input {ids.node.attrs['name']!r} must lie in [0, {rows}), got {values.min()}..{values.max()}")

    # --- reports -------------------------------------------------------------------------------
    def explain(self) -> str:
        """The graph before and after search, the rules applied with the cost after each, per-kernel costs."""
        from ..search.explain import explain
        return explain(self)

    def cost_summary(self) -> str:
        """Per kernel: modeled bytes, flops and predicted time on the H200 profile (searched programs)."""
        from ..search.explain import cost_table
        if self.search is None:
            return "compiled with search=False: no cost model was run"
        return "\n".join(cost_table(self.search, self.kernels))

    def report(self) -> str:
        """Per kernel: kind, launch, and nvcc's registers / shared memory / spills for sm_90."""
        from ..exec.nvcc import nvcc_check
        resources = nvcc_check(self.source).kernels
        lines = [f"{'kernel':<28}{'kind':<13}{'launch':<18}{'regs':>5}{'smem B':>8}{'spill B':>8}"]
        for k in self.kernels:
            r = resources.get(k.name)
            regs, smem, spills = (r.registers, r.shared_bytes, r.spill_store_bytes + r.spill_load_bytes) if r else ("?", "?", "?")
            lines.append(f"{k.name:<28}{k.kind:<13}{k.launch.mode:<18}{regs:>5}{smem:>8}{spills:>8}")
        return "\n".join(lines)


def compile(outputs, search: bool = True, dims_hint: Optional[Mapping[str, int]] = None, measure: bool = False) -> Program:
    """Lower `outputs` (a Tensor, list or dict) to a CUDA program.

    With `search` (the default) the graph is rewritten by verified rules and the fusion schedule is
    chosen by the search under the H200 cost model, at the binding `dims_hint` (symbols it leaves out
    count as refcomp.search.cost.DEFAULT_DIM). Without it, every compute node gets its own kernel.
    With `measure` (needs PyCUDA and a GPU) the search's candidate schedules are each built, checked
    against the NumPy reference and timed on the GPU at `dims_hint`, and the fastest is returned
    (`program.measured` lists every candidate's time; see refcomp.search.measure).
    """
    if measure:
        if not search:
            raise RefcompError("compile(measure=True) times the search's candidate schedules, so it needs search=True")
        from ..search.measure import compile_measured
        return compile_measured(outputs, dims_hint)
    tensors, _ = flatten_outputs(outputs)
    if not search:
        output_nodes = materialise_outputs(tensors)
        return Program(outputs, lower_plain(output_nodes), output_nodes)
    from ..search.search import search as run_search
    result = run_search([t.edge for t in tensors], dims_hint)
    return program_for_schedule(outputs, result, result.schedule)


def program_for_schedule(outputs, result, schedule) -> Program:
    """The program a search result's graph gives under `schedule` (the chosen one, or a candidate)."""
    from ..search.fusion import group_params
    from ..search.search import with_schedule
    result = with_schedule(result, schedule)
    groups = result.groups
    fused = lambda node: node.id in schedule.inline
    kernels = [kernel_for_group(kernel_name(k, g.root), g, result.graph.dim_names, fused, group_params(schedule, g))
               for k, g in enumerate(groups)]
    return Program(outputs, kernels, result.graph.output_nodes, search=result)

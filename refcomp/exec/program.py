"""A compiled program: CUDA source, kernels, and a runner that drives any backend.

The driver (`refcomp.compiler.compile`) lowers once; `Program.run(feeds)` binds dims from the
feeds, plans memory for that binding, uploads, launches every kernel with geometry computed from
the bound dims, and downloads the outputs. The same runner serves the host emulator and PyCUDA
through the `codegen.abi.Backend` protocol (and GPU timing, exec.timing, through `prepare` and
`launches`); `backend="numpy"` answers with the reference interpreter instead.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, Optional

import numpy as np

from ..codegen.emit import ProgramNames
from ..codegen.kernels import Kernel, keep_compiled_templates, prelude
from ..codegen.memory import MemoryPlan, plan_memory
from ..errors import FeedError, RefcompError
from ..ops.dtypes import DTYPES, from_storage, storage_numpy_type, to_storage
from ..ops.graph import flatten_outputs, input_nodes, symbols_of, toposort
from ..ops.primitives import INDEXED, SCATTER, Node
from ..reference import limits
from ..reference.bindings import bind_dims, check_binding, check_ids, show_binding
from ..reference.reference import computed_ids, evaluate, read_edge
from ..symbolic.dims import check_dim_values, evaluate_dim, prod
from .backends import get_backend
from .resident import OnDevice, Resident
from .saved import write_program
from .cache import TemplateCache

SIZED_BINDINGS = 64  # memory plans kept per program, the oldest dropped first

if TYPE_CHECKING:  # the profiler, the explorer and nvcc load when a program first asks for them (start-up)
    from .profile import Profile

keep_compiled_templates(TemplateCache())  # every program's source is rendered from the templates


class Program:
    """`kernels[i]` has .name, .source, .launch, .ops (user-level ops) and .cost (the model's
    KernelCost at `cost_bindings`); `cost` totals them.

    A Program is assembled from what the stages before it returned (refcomp.pipeline): kernels
    built by code generation and already priced, the search's result, and `pricing` (the cost
    model's reports, search.pricing.Pricing), through which it shows prices without computing any."""

    def __init__(self, outputs, kernels: list[Kernel], output_nodes: list[Node], pricing,
                 cost_bindings: Mapping[str, int], search=None, schedule=None):
        self.outputs = outputs
        self.tensors, self._rebuild = flatten_outputs(outputs)
        self.kernels = kernels
        self.output_nodes = output_nodes
        self.pricing = pricing
        self.search = search  # the SearchResult (trace, costs) when the program was searched
        self.schedule = (
            schedule  # the search's Schedule of output_nodes' graph (None: one kernel per compute node)
        )
        self.cost_bindings = dict(cost_bindings)
        self.saved_explain: Optional[str] = None  # what explain() said when a loaded program was saved
        self.measured = (
            None  # measured mode: (schedule, median GPU seconds) per candidate, the model's pick first
        )
        nodes = toposort(list(output_nodes))
        self._nodes = nodes
        self._user_nodes = toposort([t.node for t in self.tensors])
        self._accepted: set = set()  # bindings the validator has accepted
        self._at: dict[tuple, tuple] = {}  # binding -> (memory plan, room check), both fixed by the binding
        self._symbols = {s.name for s in symbols_of(self._user_nodes, [t.edge for t in self.tensors])}
        self._inputs = input_nodes(self._user_nodes)  # the reference's inputs: the search may drop some
        self._all_inputs = [n for n in nodes if n.op.name == "Input"]
        self.names = ProgramNames.of(nodes)
        self.dim_symbols = {name: sym for sym, name in self.names.dims.items()}
        self.source = prelude(kernels) + "\n\n" + "\n\n".join(k.source for k in kernels) + "\n"
        self._modules: dict[str, object] = {}

    def __repr__(self) -> str:
        return f"<Program: {len(self.kernels)} kernels ({', '.join(k.name for k in self.kernels)})>"

    @property
    def cost(self):
        """The whole program under the cost model (a KernelCost): its kernels' bytes, flops and times
        summed."""
        return self.pricing.total([k.cost for k in self.kernels])

    @property
    def compiled_nodes(self) -> list[Node]:
        """Every node of the compiled graph, sources first."""
        return self._nodes

    # --- memory ------------------------------------------------------------------------------
    def _node_bytes(self, node: Node, bindings: Mapping[str, int]) -> int:
        return DTYPES[node.dtype].itemsize * evaluate_dim(prod(node.shape), bindings)

    def memory_plan(self, bindings: Mapping[str, int]) -> MemoryPlan:
        return self._sized(bindings)[0]

    def _sized(self, bindings: Mapping[str, int]) -> tuple[MemoryPlan, tuple[int, str, int]]:
        """The memory plan and (total bytes, largest buffer's name, its bytes) at a binding, worked
        out once per binding: a warm run repeats the same binding, and evaluating the symbolic sizes
        again would cost more than a small program's kernels."""
        key = tuple(sorted(bindings.items()))
        known = self._at.get(key)
        if known is None:
            aliases = self._in_place()
            steps = []
            for k in self.kernels:  # a kernel carrying Scatters: its output, then each table handed on
                tables = [aliases[n.id] for n in k.written if n.id in aliases]
                steps.append((k.output.id, [n.id for n in k.reads] + tables))
                steps += [(s.id, [aliases[s.id]]) for s in k.carried]
                steps += [(s.id, [k.output.id] + [n.id for n in k.reads]) for s in k.row_stats + k.tail[-1:]]
            written = [n for k in self.kernels for n in k.written]
            nbytes = {n.id: self._node_bytes(n, bindings) for n in written}
            plan = plan_memory(steps, nbytes, keep=self._kept(), aliases=aliases)
            if len(self._at) >= SIZED_BINDINGS:  # a decode loop binds a new cache length every step
                del self._at[next(iter(self._at))]
            self._at[key] = known = (plan, self._room_needed(bindings, plan))
        return known

    def _in_place(self) -> dict[int, int]:
        """Scatters -> their tables' node ids, in launch order: each writes its rows into its table's
        buffer, which the compiler made one nothing else reads (ops.graph.own_scatter_tables); a
        Scatter kernel's output, or one a matmul kernel carries (search.carry)."""
        scatters = [n for k in self.kernels for n in ((k.output,) if k.kind == "scatter" else k.carried)]
        return {n.id: n.srcs[0].node.id for n in scatters}

    def _kept(self) -> set[int]:
        """Nodes with buffers of their own: the outputs, and the tables (through chains of Scatters)
        whose buffers become outputs."""
        keep, aliases = {n.id for n in self.output_nodes}, self._in_place()
        for written in reversed(list(aliases)):  # launch order reversed: a chain's later Scatter first
            if written in keep:
                keep.add(aliases[written])
        return keep

    def peak_intermediate_bytes(self, dims: Optional[Mapping[str, int]] = None) -> int:
        """Bytes of intermediate buffers one run allocates at this binding (after reuse)."""
        return self.memory_plan(check_dim_values(dims, self._symbols)).peak_bytes

    # --- running -----------------------------------------------------------------------------
    def bind(
        self, feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None
    ) -> tuple[dict, dict]:
        """Checked feeds and the dims' values, refused exactly where the reference refuses them.

        Every backend runs this before any launch: the feeds, the binding validator (on the user's
        graph, whose error is the reference's, and on the compiled graph, whose views the kernels
        read) and the embedding ids (the gather template also guards every lookup)."""
        arrays, bindings = bind_dims(self._inputs, feeds, dims, self._symbols)
        key = tuple(sorted(bindings.items()))
        if key not in self._accepted:
            check_binding(self._user_nodes, [t.edge for t in self.tensors], bindings)
            check_binding(self._nodes, [], bindings)
            limits.require_indexable(self._nodes, [], bindings)
            self._accepted.add(key)
        for node in self._user_nodes:  # in the reference's order, so the first bad lookup is the one it names
            if node.op.kind in INDEXED and node.srcs[1].node.op.name == "Input":
                ids = node.srcs[1]
                check_ids(node, read_edge(arrays[ids.node.attrs["name"]], ids.views, bindings), bindings)
            elif (node.op.kind == SCATTER
                  or node.op.kind in INDEXED and DTYPES[node.srcs[1].node.dtype].is_int):
                # ids the graph computes: a Scatter's must be checked before it writes, and integer
                # ids (arithmetic on fed ones) before a lookup the reference would refuse
                check_ids(node, computed_ids(node.srcs[1], arrays, bindings), bindings)
        return arrays, bindings

    def allocate(
        self, be, arrays: Mapping[str, np.ndarray], bindings: Mapping[str, int],
        resident: Optional[Resident] = None,
    ) -> dict[int, object]:
        """Backend buffers for one run: inputs uploaded (or, named in `resident`, its held buffers),
        intermediates in the memory plan's slots, outputs on their own; everything written by a
        kernel starts as NaN, so a missed write shows."""
        self._check_room(be, arrays, bindings)
        uploaded: dict[str, object] = {}
        for node in self._all_inputs:
            name = node.attrs["name"]
            if name in uploaded:
                continue
            if resident is not None and name in resident:
                uploaded[name] = resident.buffer(name, be.name)
            else:
                uploaded[name] = be.upload(to_storage(arrays[name], node.dtype))
        buffers: dict[int, object] = {node.id: uploaded[node.attrs["name"]] for node in self._all_inputs}
        plan = self.memory_plan(bindings)
        slots = [self._poisoned(be, n) for n in plan.slot_bytes]
        for node_id, slot in plan.slot_of.items():
            buffers[node_id] = slots[slot]
        by_id = {n.id: n for n in self._nodes}
        for node_id in sorted(self._kept(), key=lambda i: self.names.numbers[i]):
            if node_id not in buffers and by_id[node_id].op.name != "Input":
                buffers[node_id] = self._poisoned(be, self._node_bytes(by_id[node_id], bindings))
        for written, table in self._in_place().items():  # launch order: a chain hands one buffer along
            buffers[written] = buffers[table]
        for kernel in self.kernels:  # split K, rows' statistics: partials (poisoned) and tickets (zero)
            for (partials, tickets), names in ((kernel.launch.scratch(bindings), ("ws0", "ws1")),
                                               (kernel.launch.row_scratch(bindings), ("ws2", "ws3"))):
                if tickets:
                    buffers[(names[0], kernel.name)] = self._poisoned(be, 4 * partials)
                    buffers[(names[1], kernel.name)] = be.upload(np.zeros(tickets, np.uint32))
            if kernel.launch.tail:  # a tail's tickets, one per row (codegen.tail)
                tickets = np.zeros(kernel.launch.tail_tickets(bindings), np.uint32)
                buffers[("ws4", kernel.name)] = be.upload(tickets)
        return buffers

    def _check_room(self, be, arrays: Mapping[str, np.ndarray], bindings: Mapping[str, int]) -> None:
        """Refuse a run whose buffers exceed the backend's memory, naming the largest one (the
        inputs' sizes follow from the binding, which bind_dims checked them against)."""
        total, biggest, size = self._sized(bindings)[1]
        limits.require(
            total,
            be.memory_bytes(),
            f"running this program at {show_binding(bindings)} (largest buffer: "
            f"{biggest}, {limits.show_bytes(size)})",
            f"the {be.name} backend",
        )

    def _room_needed(self, bindings: Mapping[str, int], plan: MemoryPlan) -> tuple[int, str, int]:
        itemsize = {n.attrs["name"]: DTYPES[n.dtype].itemsize for n in self._inputs}
        sizes = {
            f"input {n.attrs['name']!r}": itemsize[n.attrs["name"]] * evaluate_dim(prod(n.shape), bindings)
            for n in self._inputs
        }
        sizes.update({f"output {k} ({t.label})": self._node_bytes(n, bindings)
                      for k, (n, t) in enumerate(zip(self.output_nodes, self.tensors))})
        sizes.update({f"scratch of {k.name} (K split across blocks)": 4 * sum(k.launch.scratch(bindings))
                      for k in self.kernels if k.launch.splits > 1})
        sizes.update({f"scratch of {k.name} (its rows' statistics)": 4 * sum(k.launch.row_scratch(bindings))
                      for k in self.kernels if k.launch.row_stats})
        sizes.update({f"scratch of {k.name} (its rows' tickets)": 4 * k.launch.tail_tickets(bindings)
                      for k in self.kernels if k.launch.tail})
        total = sum(sizes.values()) + plan.peak_bytes
        for k in self.kernels:  # intermediates too, to name the largest buffer
            sizes.setdefault(
                f"{self.names.label(k.output)} (written by {k.name})", self._node_bytes(k.output, bindings)
            )
        biggest = max(sizes, key=sizes.get)
        return total, biggest, sizes[biggest]

    @staticmethod
    def _poisoned(be, nbytes: int):
        nbytes = max(4, -(-nbytes // 4) * 4)  # whole words: the poison is written a word at a time
        buffer = be.alloc(nbytes)
        be.fill_nan(buffer, nbytes)
        return buffer

    def prepare(
        self, be, feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None,
        resident: Optional[Resident] = None,
    ) -> tuple[dict, dict]:
        """The bound dims and the backend buffers of one run (checked, uploaded, allocated)."""
        arrays, bindings = self.bind(self._with_resident(feeds, resident), dims)
        return bindings, self.allocate(be, arrays, bindings, resident)

    def _with_resident(self, feeds: Mapping[str, object], resident: Optional[Resident]) -> Mapping:
        """The feeds, with a stand-in of each resident array this program reads (binding reads only
        its shape), after refusing a name both fed and resident, and a resident array that ids are
        computed from (the runner checks ids on the host before any launch)."""
        if resident is None:
            return feeds
        if not isinstance(resident, Resident):
            raise RefcompError(f"resident must be an exec.resident.Resident, got {type(resident).__name__}")
        if not isinstance(feeds, Mapping):
            return feeds  # bind names the fault
        held = {n.attrs["name"]: n for n in self._inputs if n.attrs["name"] in resident}
        both = sorted(set(held).intersection(feeds))
        if both:
            raise FeedError(f"input {both[0]!r} is both fed and resident: feed it or hold it, not both")
        for node in self._user_nodes:
            if node.op.kind in INDEXED:
                sources = {n.attrs["name"] for n in input_nodes(toposort([node.srcs[1].node]))}
                if sources.intersection(held):
                    raise FeedError(
                        f"the ids of {node.op.name} are computed from resident input "
                        f"{sorted(sources.intersection(held))[0]!r}: feed it, so the ids can be checked"
                    )
        return {**feeds, **{name: resident.stand_in(name, n.dtype) for name, n in held.items()}}

    def launches(self, buffers: Mapping[int, object], bindings: Mapping[str, int]):
        """(kernel, grid, block, args) for each kernel that has work at this binding, in order."""
        for kernel in self.kernels:
            grid, block = kernel.launch.geometry(bindings)
            self._check_launch(kernel, bindings)
            if grid[0] != 0:
                yield kernel, grid, block, kernel.args(buffers, bindings, self.dim_symbols)

    def _check_launch(self, kernel: Kernel, bindings: Mapping[str, int]) -> None:
        """Refuse a launch whose work exceeds the buffer it writes: each unit of work (an element, a
        row, a tile's element) stores into the output, so more work than elements is a wrong kernel."""
        launch = kernel.launch
        work = evaluate_dim(launch.work, bindings)
        if launch.mode == "tiles":
            work *= math.prod(evaluate_dim(d, bindings) for d in launch.extra)
        elements = math.prod(evaluate_dim(d, bindings) for d in kernel.output.shape)
        if work > elements and not (
            elements == 0 and launch.mode == "block_per_output"
        ):  # rows of no elements
            raise RefcompError(
                f"kernel {kernel.name}: its launch ({launch}) covers {work:,} elements at "
                f"{show_binding(bindings)}, more than the {kernel.output.shape} buffer it writes"
            )

    def run(
        self,
        feeds: Mapping[str, object],
        backend: Optional[str] = None,
        dims: Optional[Mapping[str, int]] = None,
        resident: Optional[Resident] = None,
    ):
        """The outputs for `feeds`. `resident` (exec.resident): arrays already on the backend, read in
        place of feeds of their names; an output written into one in place comes back as OnDevice."""
        if backend == "numpy":
            if resident is not None:
                raise RefcompError("the numpy backend (the reference) reads no resident arrays: feed them")
            return evaluate(self.outputs, feeds, dims)
        if resident is not None and backend is None:
            backend = getattr(resident, "backend", None)
        be = get_backend(backend)
        bindings, buffers = self.prepare(be, feeds, dims, resident)
        if be.name not in self._modules:
            self._modules[be.name] = be.load(self.source, [k.signature for k in self.kernels])
        module = self._modules[be.name]
        for kernel, grid, block, args in self.launches(buffers, bindings):
            module.launch(kernel.name, grid, block, args)
        be.synchronize()
        return self.download_outputs(be, buffers, bindings, resident)

    def download_outputs(self, be, buffers: Mapping[int, object], bindings: Mapping[str, int],
                         resident: Optional[Resident] = None):
        """The outputs of a run, shaped and nested as the user's outputs were (one whose buffer is a
        resident array's: an OnDevice, left there)."""
        results = []
        for node, tensor in zip(self.output_nodes, self.tensors):  # an identity view may reshape
            held = None if resident is None else resident.holds(buffers[node.id])
            if held is not None:
                results.append(OnDevice(resident, held))
                continue
            shape = tuple(evaluate_dim(n, bindings) for n in tensor.shape)
            stored = be.download(buffers[node.id], shape, np.dtype(storage_numpy_type(node.dtype)))
            results.append(from_storage(stored, node.dtype))
        return self._rebuild(results)

    def profile(self, feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None) -> Profile:
        """Run once in the profile build (the same source, instrumented, on the host) and count, per
        kernel, what Nsight Compute reports for memory: global requests and sectors, shared-memory
        wavefronts and bank conflicts, barriers, flops, beside the cost model (see exec.profile)."""
        from .profile import profile_program
        return profile_program(self, feeds, dims)

    # --- reports -------------------------------------------------------------------------------
    def explain(self) -> str:
        """The graph before and after search, the rules applied with the cost after each, per-kernel costs."""
        return self.saved_explain if self.saved_explain is not None else self.pricing.explain(self)

    def explorer(self, path=None, feeds: Optional[Mapping[str, object]] = None,
                 dims: Optional[Mapping[str, int]] = None) -> str:
        """A self-contained HTML page of both graphs, the kernels (with the profiler's counters when
        `feeds` are given), the rewrite trace and the memory plan; written to `path` when given.
        `dims` bind the profiled run (as in `profile`), so they need `feeds`."""
        if dims is not None and feeds is None:
            raise RefcompError(
                "Program.explorer(dims=...) binds the profiled run: pass feeds too (or no dims)"
            )
        from .explorer import write_explorer
        return write_explorer(self, path, self.profile(feeds, dims) if feeds is not None else None)

    def _repr_html_(self) -> str:
        """Jupyter's view of a program: its kernels and the compiled graph."""
        from .explorer import program_html
        return program_html(self)

    # --- files ---------------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write this program as a versioned, signed JSON file (see exec.saved); rc.load_program reads it."""
        write_program(self, path)

    def cost_summary(self) -> str:
        """Per kernel: modeled bytes, flops and predicted time on the cost model's device profile."""
        binding = show_binding(self.cost_bindings) or "no symbolic dims"
        lines = [
            f"cost model at {binding}"
            + ("" if self.search else " (search=False: one kernel per compute node)")
        ]
        return "\n".join(lines + self.pricing.cost_table(self))

    def report(self) -> str:
        """Per kernel: kind, launch, and nvcc's registers / shared memory / spills for sm_90."""
        from .nvcc import nvcc_check
        resources = nvcc_check(self.source).kernels
        lines = [f"{'kernel':<28}{'kind':<13}{'launch':<18}{'regs':>5}{'smem B':>8}{'spill B':>8}"]
        for k in self.kernels:
            r = resources.get(k.name)
            regs, smem, spills = (
                (r.registers, r.shared_bytes, r.spill_store_bytes + r.spill_load_bytes)
                if r
                else ("?", "?", "?")
            )
            lines.append(f"{k.name:<28}{k.kind:<13}{k.launch.mode:<18}{regs:>5}{smem:>8}{spills:>8}")
        return "\n".join(lines)

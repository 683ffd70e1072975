"""An SPMD program: the local graph cut into stages at its collectives, each stage an ordinary
refcomp Program, run on every device of a simulated mesh with the collectives done on the host.

A node's *stage* is the number of collectives on the longest path to it. Stage s reads the inputs,
the results of collectives that complete at s, and values earlier stages computed (passed along as
inputs named `__v<id>`); its outputs are what a later stage, a collective or the user needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import numpy as np

from ..compiler import compile as compile_program
from ..errors import BindingError, RefcompError
from ..reference.bindings import bind_dims
from ..exec.program import Program
from ..ops.graph import flatten_outputs, input_nodes, symbols_of, toposort
from ..ops.primitives import LEAF, Edge, Node, make_node
from ..ops.tensor import Tensor
from ..search.cost import DEFAULT_DIM
from ..ops.graph import identity_edge
from ..symbolic.dims import evaluate_dim
from .collectives import COLLECTIVES, CollectiveCost, collective_time
from .mesh import Mesh, split_entry
from .propagate import LocalGraph, propagate


@dataclass
class Stage:
    program: Optional[Program]
    outputs: list[str]  # the names of its results, in the program's output order


def _stages(local: LocalGraph) -> list[tuple[dict[str, Edge], int]]:
    """Per stage, the local edges it must produce by name."""
    producers = {c.name: c for c in local.collectives}
    roots = [e.node for e in local.outputs] + [c.src for c in local.collectives]
    nodes = sorted({n.id: n for n in toposort(roots)}.values(), key=lambda n: n.id)  # ids grow with creation
    stage: dict[int, int] = {}
    for n in nodes:
        if n.op.name == "Input" and n.attrs["name"] in producers:
            stage[n.id] = stage[producers[n.attrs["name"]].src.id] + 1
        else:
            stage[n.id] = max((stage[s.node.id] for s in n.srcs), default=0)
    count = max(stage.values(), default=0) + 1
    wanted: list[dict[str, Edge]] = [{} for _ in range(count)]
    for n in nodes:  # values read across a stage boundary
        for s in n.srcs:
            if stage[s.node.id] < stage[n.id] and s.node.op.kind != LEAF:
                wanted[stage[s.node.id]][f"__v{s.node.id}"] = identity_edge(s.node)
    for c in local.collectives:
        if c.src.op.name != "Input":  # an input (or an earlier collective's result) is held by its name
            wanted[stage[c.src.id]][f"__v{c.src.id}"] = identity_edge(c.src)
    for k, e in enumerate(local.outputs):
        wanted[stage[e.node.id]][f"__out{k}"] = e
    return [(w, s) for s, w in enumerate(wanted)], stage


def source_name(c) -> str:
    """Where a device holds a collective's input: an input (or an earlier collective's result) by its
    name, a computed value as the stage output `__v<id>`."""
    return c.src.attrs["name"] if c.src.op.name == "Input" else f"__v{c.src.id}"


def _cut(edges: dict[str, Edge], s: int, stage: dict[int, int]) -> list[Tensor]:
    """Stage s's outputs with every value of an earlier stage read as an input `__v<id>`."""
    mapping: dict[int, Node] = {}
    for node in toposort([e.node for e in edges.values()]):
        if node.op.kind != LEAF and stage.get(node.id, s) < s:
            mapping[node.id] = make_node("Input", dtype=node.dtype, name=f"__v{node.id}", shape=node.shape)
        elif any(e.node.id in mapping for e in node.srcs):
            srcs = tuple(Edge(mapping.get(e.node.id, e.node), e.views) for e in node.srcs)
            mapping[node.id] = Node(node.op, srcs, node.attrs, node.shape, node.dtype, origin=node.origin)
    return [Tensor(Edge(mapping.get(e.node.id, e.node), e.views)) for e in edges.values()]


class SpmdProgram:
    """`run(feeds)`: global feeds in, global outputs out, every device's local program in between."""

    def __init__(self, outputs, mesh: Mesh, local: LocalGraph, shardings: dict, search: bool, dims_hint):
        self.outputs, self.mesh, self.local, self.shardings = outputs, mesh, local, shardings
        self.tensors, self._rebuild = flatten_outputs(outputs)
        self._global_inputs = input_nodes(toposort([t.node for t in self.tensors]))
        self._symbols = {
            s.name
            for s in symbols_of(toposort([t.node for t in self.tensors]), [t.edge for t in self.tensors])
        }
        hint = {**{name: DEFAULT_DIM for name in self._symbols}, **dict(dims_hint or {})}
        local_hint = {
            name: max(1, hint.get(g, DEFAULT_DIM) // mesh.sizes[a])
            for name, (g, a) in local.local_symbols.items()
        }
        self.hint = {**hint, **local_hint}
        parts, self._stage_of = _stages(local)
        self.stages: list[Stage] = []
        for edges, s in parts:
            if not edges:
                self.stages.append(Stage(None, []))
                continue
            tensors = _cut(edges, s, self._stage_of)
            syms = symbols_of(toposort([t.node for t in tensors]), [t.edge for t in tensors])
            prog = compile_program(
                tensors,
                search=search,
                dims_hint={x.name: self.hint[x.name] for x in syms if x.name in self.hint},
            )
            self.stages.append(Stage(prog, list(edges)))

    def __repr__(self) -> str:
        return (
            f"<SpmdProgram on {self.mesh}: {len(self.stages)} stage(s), "
            f"{len(self.local.collectives)} collective(s), "
            f"{sum(len(s.program.kernels) for s in self.stages if s.program)} kernels per device>"
        )

    def explain(self) -> str:
        """Every tensor's sharding (nodes numbered as in `rc.compile(...).explain()`), the stages and
        the collectives between them, priced at the hint binding."""
        names = self._names()
        lines = [
            f"SPMD on {self.mesh} ({self.mesh.devices} devices), priced at "
            + ", ".join(f"{k}={v}" for k, v in sorted(self.hint.items())),
            "",
            "shardings (per dim: a mesh axis, or - for whole):",
        ]
        for node, spec, partial in self.local.node_specs:
            shape = ", ".join(f"{n}{'/' + a if a else ''}" for n, a in zip(node.shape, spec))
            what = f"input {node.attrs['name']!r}" if node.op.name == "Input" else names.label(node)
            pending = f"   partial sums, completed by {partial}" if partial else ""
            lines.append(f"  {what:24s} ({shape}){pending}")
        lines += ["", f"stages: {len(self.stages)}, kernels per device: "
                  + ", ".join(str(len(s.program.kernels)) if s.program else "0" for s in self.stages), "",
                  "collectives (ring model, NVLink 4 at 450 GB/s each way):"]
        lines += [f"  {c}" for c in self.collectives] or ["  none"]
        total = sum(c.bytes_per_device for c in self.collectives)
        lines.append(
            f"  total: {total:,} B per device, {sum(c.time_s for c in self.collectives) * 1e6:.2f} us"
        )
        return "\n".join(lines)

    def explorer(self, path=None) -> str:
        """One self-contained HTML page: the shardings and collectives (as `explain`), then each stage's
        explorer page (the per-device program), each in a frame of its own."""
        import html
        from ..exec.explorer import write_explorer, write_page
        frames = "".join(
            f'<h2>stage {k}: {len(st.program.kernels)} kernel(s) per device</h2><iframe class="rc-stage" '
            f'srcdoc="{html.escape(write_explorer(st.program), quote=True)}"></iframe>'
            for k, st in enumerate(self.stages) if st.program is not None)
        page = (
            f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<title>refcomp SPMD on {html.escape(str(self.mesh))}'
            '</title><style>body{font-family:sans-serif;margin:16px}pre{background:#f6f6f6;padding:8px}'
            'iframe{width:100%;height:900px;border:1px solid #ccc}</style></head><body>'
            f'<h1>refcomp SPMD: one local program, {self.mesh.devices} devices</h1>'
            f'<pre class="rc-shardings">{html.escape(self.explain())}</pre>{frames}</body></html>'
        )
        if path is not None:
            write_page(path, page)
        return page

    @property
    def collectives(self) -> list[CollectiveCost]:
        """Each collective with its mesh axis, bytes per device and ring time at the hint binding."""
        names = self._names()
        out = []
        for c in self.local.collectives:
            nbytes = _nbytes(c.src, self.hint)
            what = f"input {c.of.attrs['name']!r}" if c.of.op.name == "Input" else names.label(c.of)
            out.append(
                CollectiveCost(
                    c.kind, c.axis, what, nbytes, collective_time(c.kind, nbytes, self.mesh.sizes[c.axis])
                )
            )
        return out

    def _names(self):
        """Node numbers as `explain` and rc.compile(...).explain() give them (positions in the graph)."""
        from ..codegen.emit import ProgramNames
        return ProgramNames.of(toposort([t.node for t in self.tensors]))

    # --- running on the simulated mesh ------------------------------------------------------------
    def _bindings(self, feeds, dims) -> tuple[dict, dict]:
        arrays, bindings = bind_dims(self._global_inputs, feeds, dims, self._symbols)
        local = {}
        for name, (g, axis) in self.local.local_symbols.items():
            size = self.mesh.sizes[axis]
            if bindings[g] % size:
                raise BindingError(
                    f"dim {g} = {bindings[g]} is sharded over mesh axis {axis!r} of size {size}, "
                    f"which does not divide it"
                )
            local[name] = bindings[g] // size
        return arrays, {**bindings, **local}

    def _shard(self, array: np.ndarray, spec, coord: dict) -> np.ndarray:
        """This device's block of a global array ("tp:k" entries: its part of each of the k blocks)."""
        out = np.asarray(array)
        for d, entry in enumerate(spec):
            axis, blocks = split_entry(entry)
            if axis is None:
                continue
            moved = np.moveaxis(out, d, -1)
            part = moved.shape[-1] // (blocks * self.mesh.sizes[axis])
            blocked = moved.reshape(moved.shape[:-1] + (blocks, -1))[
                ..., coord[axis] * part : (coord[axis] + 1) * part
            ]
            out = np.moveaxis(blocked.reshape(moved.shape[:-1] + (blocks * part,)), -1, d)
        return np.array(out, order="C")  # a copy, 0-d arrays kept 0-d

    def run(
        self,
        feeds: Mapping[str, object],
        backend: Optional[str] = None,
        dims: Optional[Mapping[str, int]] = None,
        device_backend: str = "emulator",
        collectives: str = "mpi",
    ):
        """backend="mpi": this process is one device of the mesh, its MPI rank (launched by `mpirun -n
        <devices>`), running each stage on `device_backend` (refcomp/spmd/mpi.py), the collectives over
        MPI or, with collectives="nccl" on GPUs, through NCCL (spmd/nccl.py). Any other backend: every
        device, one after another, in this process."""
        if backend == "mpi":
            from .mpi import run as run_mpi
            return run_mpi(self, feeds, dims, device_backend, collectives)
        arrays, bindings = self._bindings(feeds, dims)
        coords = self.mesh.coordinates()
        held = [self._device_feeds(arrays, c, bindings) for c in coords]
        for s, stage in enumerate(self.stages):
            if stage.program is not None:
                wanted = {n.attrs["name"] for n in stage.program._inputs}
                syms = stage.program._symbols
                for device in held:
                    results = stage.program.run({k: device[k] for k in wanted}, backend=backend,
                                                dims={k: v for k, v in bindings.items() if k in syms})
                    device.update(zip(stage.outputs, results))
            for c in self.local.collectives:
                if self._stage_of[c.src.id] == s:
                    self._exchange(c, held)
        return self._rebuild([self._assemble(k, held, bindings) for k in range(len(self.tensors))])

    def _device_feeds(self, arrays, coord: dict, bindings) -> dict:
        """What one device starts with: its block of every global feed, and the positions of its block
        along each dim a replicated value is read in blocks (`__block_<axis>_<n>` ids)."""
        held = {
            name: self._shard(a, self.local.input_specs.get(name, (None,) * a.ndim), coord)
            for name, a in arrays.items()
        }
        for name, (axis, n) in self.local.block_inputs.items():
            part = evaluate_dim(n, bindings) // self.mesh.sizes[axis]
            held[name] = np.arange(coord[axis] * part, (coord[axis] + 1) * part, dtype=np.int32)
        return held

    def _exchange(self, c, held) -> None:
        """Perform one collective on the host, group by group (devices differing only in c.axis)."""
        for group in self.mesh.groups(c.axis):
            inputs = [np.asarray(held[d][source_name(c)]) for d in group]
            for d, result in zip(group, COLLECTIVES[c.kind].numpy(inputs, c.dim, c.dim2)):
                held[d][c.name] = result

    def _assemble(self, k: int, held, bindings) -> np.ndarray:
        t, spec = self.tensors[k], self.local.output_specs[k]
        shape = tuple(evaluate_dim(n, bindings) for n in t.shape)
        first = np.asarray(held[0][f"__out{k}"])
        out = np.empty(shape, dtype=first.dtype)
        for device, coord in zip(held, self.mesh.coordinates()):
            index = []
            for n, entry in zip(shape, spec):
                axis, blocks = split_entry(entry)
                if blocks > 1:
                    raise RefcompError(f"output {k} is split in blocks ({entry}); outputs are split plainly")
                part = n // self.mesh.sizes[axis] if axis else n
                index.append(slice(coord[axis] * part, (coord[axis] + 1) * part) if axis else slice(None))
            out[tuple(index)] = device[f"__out{k}"]
        return out


def _nbytes(node: Node, hint: Mapping[str, int]) -> int:
    from ..ops.dtypes import DTYPES
    count = 1
    for n in node.shape:
        count *= evaluate_dim(n, hint)
    return count * DTYPES[node.dtype].itemsize


def compile(outputs, mesh: Mesh, shardings: Optional[Mapping[str, tuple]] = None, search: bool = True,
            dims_hint: Optional[Mapping[str, int]] = None) -> SpmdProgram:
    """The SPMD program of `outputs` on `mesh`. Inputs are sharded as `rc.input(..., sharding=)` or
    `shardings` ({name: spec}) say; float inputs left unannotated (weights) get the shardings the
    search finds (search=True; else they are replicated). `search` also fuses each stage's kernels."""
    from .search import search_shardings
    if not isinstance(mesh, Mesh):
        raise RefcompError(f"rc.spmd.compile needs an rc.Mesh, got {type(mesh).__name__}")
    tensors, _ = flatten_outputs(outputs)
    edges = [t.edge for t in tensors]
    inputs = input_nodes(toposort([e.node for e in edges]))
    given = dict(shardings or {})
    unknown = sorted(set(given) - {n.attrs["name"] for n in inputs})
    if unknown:
        raise RefcompError(f"shardings name {unknown[0]!r}, which is no input of these outputs")
    specs = {}
    for n in inputs:
        name = n.attrs["name"]
        spec = given.get(name, n.attrs.get("sharding"))
        if spec is not None:
            specs[name] = mesh.check_spec(spec, len(n.shape), f"input {name!r}")
    free = [n for n in inputs if n.attrs["name"] not in specs and n.dtype != "int32"]
    if search and free:
        specs = search_shardings(edges, mesh, specs, free, dims_hint)
    local = propagate(edges, mesh, specs)
    return SpmdProgram(
        outputs,
        mesh,
        local,
        {**{n.attrs["name"]: (None,) * len(n.shape) for n in inputs}, **specs},
        search,
        dims_hint,
    )

"""Running an SPMD program on real processes: one MPI rank per device, launched by `mpirun -n N`.

The script is written SPMD, as MPI programs are: every rank builds the same graph, calls
`rc.spmd.compile` (deterministic, so every rank gets the same stages and collectives) and then
`prog.run(feeds, backend="mpi")` with the same global feeds. Rank r is device r of the mesh: it
takes its own shard of the feeds, runs every stage's program on `device_backend`, and meets the
other ranks only at the collectives, each done over a sub-communicator of its mesh-axis group.

Every collective is an `Allgather` of the group's arrays followed by `COLLECTIVES[kind].numpy` on
the gathered list, the simulated mesh's own definition: MPI's own reductions sum in an order the
implementation picks, so `Allreduce` could differ from the simulated mesh in the last bit. The
price: each device receives the (n-1) other arrays whole and holds n of them, where a ring
all-reduce sends 2(n-1)/n of one array; for the 2-8 device groups here that is at most 4x the bytes.

With `collectives="nccl"` the collectives run on the GPUs through NCCL instead (spmd/nccl.py).

A rank alone cannot fail: the others would wait for it in their next collective forever. So before
the first stage every rank's binding (dims, feed shapes) is gathered and compared, and a mismatch or a
feed that does not bind is a RefcompError on every rank, naming the ranks; an error later, mid-run,
prints itself and aborts the whole job (`MPI.COMM_WORLD.Abort`), so mpirun exits non-zero at once.

mpi4py is imported inside the functions, so refcomp imports without it.
"""
from __future__ import annotations

import os
import sys
import traceback
from typing import Mapping, Optional

import numpy as np

from ..errors import RefcompError
from .collectives import COLLECTIVES
from .program import source_name

# Set by the launchers in every process they start: Open MPI, PMIx (Open MPI 5, Slurm), MPICH/Hydra
# and Intel MPI, MVAPICH. Checked before MPI is initialised, since a plain process would otherwise
# start as a one-rank "singleton" and fail later with a less useful message.
_LAUNCHER_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def world(devices: int):
    """MPI's world communicator, checked to have one rank per device of the mesh."""
    if not any(v in os.environ for v in _LAUNCHER_VARIABLES):
        raise RefcompError(f"backend='mpi' runs one process per device: launch the script with "
                           f"`mpirun -n {devices} python <script>` (this process was not started by mpirun)")
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RefcompError(f"backend='mpi' needs mpi4py: pip install mpi4py ({e})") from e
    except RuntimeError as e:  # mpi4py's wheel found no MPI library to load
        raise RefcompError(
            f"backend='mpi': mpi4py found no MPI library (Debian: apt-get install openmpi-bin): {e}"
        ) from e
    comm = MPI.COMM_WORLD
    if comm.Get_size() != devices:
        raise RefcompError(f"backend='mpi': the mesh has {devices} devices but mpirun started "
                           f"{comm.Get_size()} processes; launch with `mpirun -n {devices}`")
    return comm


def run(
    prog,
    feeds: Mapping[str, object],
    dims: Optional[Mapping[str, int]] = None,
    device_backend: str = "emulator",
    collectives: str = "mpi",
):
    """This rank's part of `prog.run(feeds, backend="mpi")`: global feeds in, global outputs out
    (assembled on every rank). `collectives="nccl"` (with device_backend="pycuda") performs the
    collectives with NCCL on the GPUs (spmd/nccl.py) instead of over MPI."""
    if collectives not in ("mpi", "nccl"):
        raise RefcompError(f"collectives={collectives!r}: use 'mpi' or 'nccl'")
    if collectives == "nccl" and device_backend != "pycuda":
        raise RefcompError("collectives='nccl' moves GPU memory: it needs device_backend='pycuda'")
    comm = world(prog.mesh.devices)
    if device_backend == "pycuda":  # one GPU per process on each node: pycuda.autoinit reads CUDA_DEVICE
        os.environ.setdefault(
            "CUDA_DEVICE", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", str(comm.Get_rank()))
        )
    _same_plan(prog, comm)
    arrays, bindings = _same_binding(prog, comm, feeds, dims)
    try:
        return _run_stages(prog, comm, arrays, bindings, device_backend, collectives)
    except Exception as e:  # noqa: BLE001 - any error: this rank alone stops, and the others would wait forever
        _abort(comm, e)


def _same_plan(prog, comm) -> None:
    """A rank that compiled another plan would deadlock or mix up blocks: a RefcompError on every rank."""
    plan = repr(
        (
            sorted(prog.shardings.items()),
            [(c.kind, c.axis, c.dim, c.dim2) for c in prog.local.collectives],
            len(prog.stages),
        )
    )
    plans = comm.allgather(plan)
    if any(p != plans[0] for p in plans):
        other = next(r for r, p in enumerate(plans) if p != plans[0])
        raise RefcompError(
            f"backend='mpi': rank {other} compiled another program than rank 0 ({plans[other]} vs "
            f"{plans[0]}); every rank must build the same graph and call rc.spmd.compile alike"
        )


def _same_binding(prog, comm, feeds, dims) -> tuple[dict, dict]:
    """This rank's feeds and binding, once every rank has bound its own and all agree: ranks given
    other shapes (another batch size) would each run a program of their own size, return wrong
    outputs and then wait forever in a collective whose sizes disagree, and a rank whose feeds do not
    bind would leave the others waiting. Either is a RefcompError on every rank, naming the ranks."""
    try:
        arrays, bindings = prog._bindings(feeds, dims)
        mine = {**{f"dim {k}": bindings[k] for k in sorted(prog._symbols)},
                **{f"feed {name!r}": f"{tuple(a.shape)} {a.dtype}" for name, a in sorted(arrays.items())}}
        failure, error = None, None
    except Exception as e:  # noqa: BLE001 - whatever it is, the other ranks must hear of it
        mine, failure, error = {}, f"{type(e).__name__}: {e}", e
    everyone = comm.allgather((failure, mine))
    failures = [f for f, _ in everyone]
    if error is not None and all(f == failure for f in failures):
        raise error  # the same error on every rank: as one process would raise it
    if any(failures):
        raise RefcompError("backend='mpi': the feeds do not bind on " + "; on ".join(
            f"{ranks} ({f})" for ranks, f in _by_rank(failures) if f is not None)) from error
    differ = _differences([m for _, m in everyone])
    if differ:
        raise RefcompError("backend='mpi': the ranks were given different feeds (" + "; ".join(differ)
                           + "); every rank must pass the same global feeds and dims")
    return arrays, bindings


def _differences(bindings: list[dict]) -> list[str]:
    """`dim B is 8 on ranks 0, 2, 3 but 6 on rank 1` for each entry on which the ranks disagree."""
    out = []
    for key in sorted(set().union(*bindings)):
        values = [b.get(key, "absent") for b in bindings]
        if any(v != values[0] for v in values):
            out.append(f"{key} is " + " but ".join(f"{v} on {ranks}" for ranks, v in _by_rank(values)))
    return out


def _by_rank(values: list) -> list[tuple[str, object]]:
    """Ranks grouped by their value, in order of first appearance: [("ranks 0, 2", x), ("rank 1", y)]."""
    groups: dict = {}
    for r, v in enumerate(values):
        groups.setdefault(v, []).append(r)
    return [(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}", v) for v, rs in groups.items()]


def _abort(comm, error: BaseException) -> None:
    """An error on one rank mid-run (a stage, a collective): the other ranks are in a collective or
    soon will be, waiting for this one forever, and no exception reaches them. So print the error
    and end the whole job: mpirun then exits non-zero within seconds."""
    print(f"refcomp backend='mpi': rank {comm.Get_rank()} of {comm.Get_size()} failed, aborting the MPI job "
          f"(the other ranks would wait for it forever):\n" + "".join(traceback.format_exception(error)),
          file=sys.stderr, flush=True)
    comm.Abort(1)
    raise error  # Abort does not return; should it, the error is not lost


def _run_stages(prog, comm, arrays, bindings, device_backend: str, collectives: str):
    """Every stage on this rank's blocks, meeting the other ranks at the collectives; the global outputs."""
    mesh, local, rank = prog.mesh, prog.local, comm.Get_rank()
    coord = mesh.coordinates()[rank]
    held = prog._device_feeds(arrays, coord, bindings)
    groups = {axis: _group(comm, mesh, axis, rank) for axis in sorted({c.axis for c in local.collectives})}
    nccl = _nccl_groups(mesh, groups) if collectives == "nccl" else {}
    for s, stage in enumerate(prog.stages):
        if stage.program is not None:
            syms = stage.program._symbols
            results = stage.program.run(
                {n.attrs["name"]: held[n.attrs["name"]] for n in stage.program._inputs},
                backend=device_backend,
                dims={k: v for k, v in bindings.items() if k in syms},
            )
            held.update(zip(stage.outputs, results))
        for c in (c for c in local.collectives if prog._stage_of[c.src.id] == s):
            if c.axis in nccl:
                held[c.name] = nccl[c.axis].perform(c.kind, held[source_name(c)], c.dim, c.dim2)
            else:
                comm_axis, position = groups[c.axis]
                inputs = _allgather(comm_axis, held[source_name(c)])
                held[c.name] = COLLECTIVES[c.kind].numpy(inputs, c.dim, c.dim2)[position]
    shards = [_allgather(comm, held[f"__out{k}"]) for k in range(len(prog.tensors))]
    everyone = [{f"__out{k}": shards[k][d] for k in range(len(shards))} for d in range(mesh.devices)]
    return prog._rebuild([prog._assemble(k, everyone, bindings) for k in range(len(prog.tensors))])


_GROUPS: dict = {}  # (mesh, axis) -> (sub-communicator, position): split once per process


def _group(comm, mesh, axis: str, rank: int):
    """The sub-communicator of this rank's group over `axis` (ranks ordered as in the group) and the
    rank's position in it. `Split` is collective: every rank asks for the same axes in the same
    order (sorted, in `run`), so every rank hits or misses the cache together."""
    if (mesh, axis) not in _GROUPS:
        (color, members), = [(i, g) for i, g in enumerate(mesh.groups(axis)) if rank in g]
        position = members.index(rank)
        _GROUPS[mesh, axis] = comm.Split(color=color, key=position), position
    return _GROUPS[mesh, axis]


_NCCL: dict = {}  # (mesh, axis) -> its NCCL communicator, made once per process


def _nccl_groups(mesh, groups: dict) -> dict:
    """An NCCL communicator for each mesh axis a collective runs over, on this rank's GPU (made in
    the same sorted order on every rank: ncclCommInitRank is collective over the group)."""
    from .nccl import GroupComm
    for axis, (mpi_group, position) in sorted(groups.items()):
        if (mesh, axis) not in _NCCL:
            _NCCL[mesh, axis] = GroupComm(mpi_group, position)
    return {axis: _NCCL[mesh, axis] for axis in groups}


def _allgather(comm, array) -> list[np.ndarray]:
    """Every rank's array, in rank order. SPMD: every rank's local shape and dtype are the same. Sent
    as raw bytes, so any dtype travels (bool, float16) without an MPI datatype for it."""
    array = np.ascontiguousarray(array)
    out = np.empty((comm.Get_size(), array.nbytes), dtype=np.uint8)
    comm.Allgather(array.reshape(-1).view(np.uint8), out)
    return [row.view(array.dtype).reshape(array.shape) for row in out]

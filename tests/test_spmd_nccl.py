"""Collectives through NCCL (refcomp/spmd/nccl.py). NCCL's buffers are flat, so each collective along
a dim is a layout (pack) and its inverse (unpack) around one NCCL call: checked here on the CPU
against NCCL's documented buffer semantics, simulated in NumPy, for every collective. The library
itself loads and makes ids without a GPU where the NCCL wheel is installed; the run on GPUs needs two
of them and skips, saying why, elsewhere."""
from __future__ import annotations

import numpy as np
import pytest

import refcomp as rc
from refcomp import golden
from refcomp.spmd import nccl
from refcomp.spmd.collectives import COLLECTIVES

from test_spmd_mpi import SCRIPT, _gpus, _mpirun, _script, needs_mpi


def nccl_semantics(kind: str, sends: list[np.ndarray]) -> list[np.ndarray]:
    """What NCCL leaves in each rank's receive buffer (NCCL's user guide, "Collective operations"),
    given each rank's send buffer, flat and in rank order."""
    n = len(sends)
    if kind == "AllReduceSum":
        return [sum(sends[1:], sends[0].copy())] * n
    if kind == "AllReduceMax":
        return [np.maximum.reduce(sends)] * n
    if kind == "AllGather":  # rank r's send buffer lands at offset r * count
        return [np.stack(sends)] * n
    if kind == "ReduceScatter":  # the reduced buffer, rank r keeping the r-th contiguous chunk
        total = sum(s.astype(np.float64) for s in sends).astype(sends[0].dtype)
        return [total[r] for r in range(n)]
    if kind == "AllToAll":  # grouped ncclSend / ncclRecv: rank r's chunk j is rank j's chunk r
        return [np.stack([sends[j][r] for j in range(n)]) for r in range(n)]
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", sorted(COLLECTIVES))
@pytest.mark.parametrize("n", [2, 4])
def test_the_layout_around_each_nccl_call_gives_the_collectives_meaning(kind, n):
    rng = np.random.default_rng([n, len(kind)])
    for dim, dim2 in [(0, 1), (1, 0), (2, 1), (1, 2)]:
        arrays = [
            rng.integers(-8, 8, size=(4, 8, 12)).astype(np.float32) for _ in range(n)
        ]  # exact sums in any order
        sends = [nccl.pack(kind, a, n, dim) for a in arrays]
        received = nccl_semantics(kind, sends)
        for r in range(n):
            assert received[r].shape == nccl.received_shape(kind, sends[r], n)
            got = nccl.unpack(kind, received[r], dim, dim2)
            np.testing.assert_array_equal(
                got, COLLECTIVES[kind].numpy(arrays, dim, dim2)[r], err_msg=f"{kind} dim={dim} dim2={dim2}"
            )


def test_a_part_that_does_not_split_is_named():
    with pytest.raises(rc.RefcompError, match="ReduceScatter over 4 devices: axis 1 of size 6"):
        nccl.pack("ReduceScatter", np.zeros((2, 6), np.float32), 4, 1)


def test_nccl_needs_gpu_memory_and_a_known_transport():
    prog = rc.spmd.compile(rc.input("x", (4, 4), sharding=("dp", None)) * 2.0, rc.Mesh({"dp": 2}))
    with pytest.raises(rc.RefcompError, match="needs device_backend='pycuda'"):
        prog.run({"x": np.zeros((4, 4), np.float32)}, backend="mpi", collectives="nccl")
    with pytest.raises(rc.RefcompError, match="collectives='gloo': use 'mpi' or 'nccl'"):
        prog.run({"x": np.zeros((4, 4), np.float32)}, backend="mpi", collectives="gloo")


def _nccl_missing() -> str | None:
    try:
        nccl.library()
    except rc.RefcompError as e:
        return str(e)
    return None


def test_the_library_loads_and_makes_communicator_ids():
    reason = _nccl_missing()
    if reason:
        pytest.skip(reason)
    major, minor, patch = nccl.version()
    assert major == 2 and minor >= 18  # ncclGroupStart-ed send/recv and ReduceScatter as used here
    a, b = nccl.unique_id(), nccl.unique_id()
    assert len(a) == len(b) == 128 and a != b
    with pytest.raises(
        rc.RefcompError, match=r"NCCL ncclCommInitRank failed: unhandled cuda error .*\(ncclResult 1\)"
    ):
        nccl.check(1, "ncclCommInitRank")  # a failing call's result, in NCCL's own words


class _OneRank:
    """An MPI group of one rank (what GroupComm asks of mpi4py's sub-communicator)."""

    def Get_size(self):
        return 1

    def bcast(self, value, root):
        return value


def test_a_one_rank_communicator_runs_every_collective_or_names_what_is_missing():
    """On a GPU: a communicator of one rank performs each collective as its meaning on one device.
    Without one: a RefcompError saying what is missing."""
    reason = _nccl_missing()
    if reason:
        pytest.skip(reason)
    missing = _gpus(1)
    if missing is not None:
        with pytest.raises(
            rc.RefcompError, match="collectives='nccl' runs on this rank's GPU: .*pip install"
        ):
            nccl.GroupComm(_OneRank(), 0)
        return
    comm = nccl.GroupComm(_OneRank(), 0)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for kind in sorted(COLLECTIVES):
        np.testing.assert_array_equal(comm.perform(kind, x, 1, 2), COLLECTIVES[kind].numpy([x], 1, 2)[0])


@needs_mpi
def test_two_processes_on_two_gpus_with_nccl_collectives_agree_with_the_simulated_mesh(tmp_path):
    """mpirun -n 2, one GPU each: the Megatron MLP on tp2 (a reduce-scatter) and the exchange graph
    on tp2 (a reduce-scatter and an all-to-all), collectives through NCCL."""
    reason = _gpus() or _nccl_missing()
    if reason:
        pytest.skip(reason)
    path, script = _script(tmp_path)
    call = 'prog.run(feeds(case), backend="mpi", device_backend=device)'
    assert call in SCRIPT
    path.write_text(SCRIPT.replace(call, call[:-1] + ', collectives="nccl")'))
    cases = ("megatron_tp2", "exchange_tp2")
    done = _mpirun(2, path, tmp_path, *cases, device="pycuda")
    assert done.returncode == 0, done.stdout + done.stderr
    for case in cases:
        y, prog = script.build(case)
        with np.load(tmp_path / f"{case}.npz") as z:
            np.testing.assert_allclose(
                z["y"], prog.run(script.feeds(case), backend="numpy"), **golden.FLOAT32_TOLERANCE
            )

"""Collectives through NCCL: `prog.run(feeds, backend="mpi", device_backend="pycuda", collectives="nccl")`.

One MPI rank per GPU, as with the MPI collectives (spmd/mpi.py); MPI only starts the processes and
hands each mesh-axis group its NCCL id (`ncclGetUniqueId` on the group's first rank, broadcast over
the group's MPI sub-communicator, then `ncclCommInitRank` on every member). Each collective then
copies the rank's array to the GPU, calls NCCL on the default stream, and copies the result back:
the stages' programs take and return host arrays, so nothing is saved over MPI but the transport.

NCCL's buffers are flat, so a collective along a dim needs the array laid out so that each rank's
part is contiguous: `pack` moves the parts to a leading axis, and `unpack` puts what NCCL returns
back along the dims the collective means (spmd/collectives.py). AllToAll is a grouped ncclSend and
ncclRecv to and from every peer. NCCL sums in its own order (a ring), so results agree with the
simulated mesh within float32 rounding, not bit for bit.

The library comes from the NVIDIA NCCL wheel (`pip install -e ".[nccl]"`) or REFCOMP_NCCL_LIB, and
is loaded by ctypes: no NCCL Python binding is needed.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import RefcompError
from ..exec.pycuda_backend import cuda_driver, pycuda_unavailable_reason

NCCL_TYPES = {np.dtype(np.float32): 7, np.dtype(np.float16): 6, np.dtype(np.int32): 2}  # ncclDataType_t
NCCL_OPS = {"AllReduceSum": 0, "AllReduceMax": 2, "ReduceScatter": 0}  # ncclRedOp_t: ncclSum, ncclMax


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]  # NCCL_UNIQUE_ID_BYTES


def library_path() -> Path:
    """libnccl.so.2: REFCOMP_NCCL_LIB, else the one the nvidia-nccl wheel installs."""
    if os.environ.get("REFCOMP_NCCL_LIB"):
        return Path(os.environ["REFCOMP_NCCL_LIB"])
    for package in ("nvidia.nccl",):
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:
            spec = None
        for root in (spec.submodule_search_locations or []) if spec else []:
            found = sorted(Path(root, "lib").glob("libnccl.so*"))
            if found:
                return found[0]
    raise RefcompError("collectives='nccl' needs NCCL: pip install -e '.[nccl]' (the nvidia-nccl wheel), "
                       "or set REFCOMP_NCCL_LIB to a libnccl.so.2")


_LIBRARY: Optional[ctypes.CDLL] = None


def library() -> ctypes.CDLL:
    global _LIBRARY
    if _LIBRARY is None:
        path = library_path()
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            raise RefcompError(f"collectives='nccl': cannot load {path}: {e}") from e
        lib.ncclGetErrorString.restype = ctypes.c_char_p
        _LIBRARY = lib
    return _LIBRARY


def check(result: int, what: str) -> None:
    if result != 0:
        raise RefcompError(
            f"NCCL {what} failed: {library().ncclGetErrorString(result).decode()} (ncclResult {result})"
        )


def version() -> tuple[int, int, int]:
    """NCCL's (major, minor, patch), e.g. (2, 30, 7)."""
    code = ctypes.c_int()
    check(library().ncclGetVersion(ctypes.byref(code)), "ncclGetVersion")
    major, rest = divmod(code.value, 10000)
    return major, rest // 100, rest % 100


def unique_id() -> bytes:
    """A new communicator's id: 128 raw bytes (NUL bytes included, so read by address, not as a C string)."""
    uid = UniqueId()
    check(library().ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid))


# --- layouts: what each rank hands NCCL, and what it makes of NCCL's answer ------------------------
def pack(kind: str, array: np.ndarray, n: int, dim: int) -> np.ndarray:
    """The send buffer: the array itself, or (ReduceScatter, AllToAll) its n parts along `dim`
    stacked on a leading axis, so part i is the i-th contiguous chunk NCCL sends to rank i."""
    if kind in ("ReduceScatter", "AllToAll"):
        if array.shape[dim] % n:
            raise RefcompError(
                f"{kind} over {n} devices: axis {dim} of size {array.shape[dim]} does not split evenly"
            )
        return np.ascontiguousarray(np.stack(np.split(array, n, axis=dim)))
    return np.ascontiguousarray(array)


def received_shape(kind: str, packed: np.ndarray, n: int) -> tuple:
    """The receive buffer's shape: NCCL's flat result as rank-major chunks."""
    if kind == "AllGather":
        return (n,) + packed.shape
    if kind == "ReduceScatter":
        return packed.shape[1:]
    return packed.shape  # AllReduce: the same; AllToAll: one chunk from each rank, in rank order


def unpack(kind: str, received: np.ndarray, dim: int, dim2: int) -> np.ndarray:
    """The collective's meaning (spmd/collectives.py) from NCCL's buffer: AllGather's chunks
    concatenated along `dim`, AllToAll's along `dim2`; the rest as they are."""
    if kind == "AllGather":
        return np.concatenate(list(received), axis=dim)
    if kind == "AllToAll":
        return np.concatenate(list(received), axis=dim2)
    return received


# --- a communicator per mesh-axis group -----------------------------------------------------------
class GroupComm:
    """NCCL's communicator for one group of devices (those differing only in one mesh axis), made
    over the group's MPI sub-communicator `mpi_group`, in which this rank is `position`."""

    def __init__(self, mpi_group, position: int):
        self.size, self.position = mpi_group.Get_size(), position
        missing = pycuda_unavailable_reason()
        if missing:
            raise RefcompError(f"collectives='nccl' runs on this rank's GPU: {missing}")
        cuda_driver()  # NCCL runs in the context the stages' kernels use (the device's primary context)
        uid = UniqueId()
        ctypes.memmove(
            ctypes.addressof(uid),
            mpi_group.bcast(unique_id() if position == 0 else None, root=0),
            ctypes.sizeof(uid),
        )
        self.comm = ctypes.c_void_p()
        check(
            library().ncclCommInitRank(ctypes.byref(self.comm), self.size, uid, position), "ncclCommInitRank"
        )

    def perform(self, kind: str, array: np.ndarray, dim: int, dim2: int) -> np.ndarray:
        """This rank's result of collective `kind` (spmd/collectives.py) over the group."""
        drv = cuda_driver()
        dtype = np.asarray(array).dtype
        if dtype not in NCCL_TYPES:
            raise RefcompError(
                f"collectives='nccl': {kind} of a {dtype} array: NCCL is given float32, float16 or int32"
            )
        packed = pack(kind, np.asarray(array), self.size, dim)
        received = np.empty(received_shape(kind, packed, self.size), dtype=dtype)
        if packed.size == 0:  # an empty binding (B = 0): every rank has nothing to send alike
            return unpack(kind, received, dim, dim2)
        send, recv = drv.to_device(packed), drv.mem_alloc(received.nbytes)
        lib, nccl_type, stream = library(), NCCL_TYPES[dtype], ctypes.c_void_p(0)
        ptr = lambda buf: ctypes.c_void_p(int(buf))  # noqa: E731
        if kind in ("AllReduceSum", "AllReduceMax"):
            check(
                lib.ncclAllReduce(
                    ptr(send),
                    ptr(recv),
                    ctypes.c_size_t(packed.size),
                    nccl_type,
                    NCCL_OPS[kind],
                    self.comm,
                    stream,
                ),
                "ncclAllReduce",
            )
        elif kind == "AllGather":
            check(
                lib.ncclAllGather(
                    ptr(send), ptr(recv), ctypes.c_size_t(packed.size), nccl_type, self.comm, stream
                ),
                "ncclAllGather",
            )
        elif kind == "ReduceScatter":
            check(
                lib.ncclReduceScatter(
                    ptr(send),
                    ptr(recv),
                    ctypes.c_size_t(received.size),
                    nccl_type,
                    NCCL_OPS[kind],
                    self.comm,
                    stream,
                ),
                "ncclReduceScatter",
            )
        elif kind == "AllToAll":
            chunk, nbytes = packed[0].size, packed[0].nbytes
            check(lib.ncclGroupStart(), "ncclGroupStart")
            for peer in range(self.size):
                check(
                    lib.ncclSend(
                        ctypes.c_void_p(int(send) + peer * nbytes),
                        ctypes.c_size_t(chunk),
                        nccl_type,
                        peer,
                        self.comm,
                        stream,
                    ),
                    "ncclSend",
                )
                check(
                    lib.ncclRecv(
                        ctypes.c_void_p(int(recv) + peer * nbytes),
                        ctypes.c_size_t(chunk),
                        nccl_type,
                        peer,
                        self.comm,
                        stream,
                    ),
                    "ncclRecv",
                )
            check(lib.ncclGroupEnd(), "ncclGroupEnd")
        else:
            raise RefcompError(f"collectives='nccl' has no {kind}")
        drv.Context.synchronize()
        drv.memcpy_dtoh(received, recv)
        return unpack(kind, received, dim, dim2)

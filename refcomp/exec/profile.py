"""The profiler: what Nsight Compute would count for a program's memory, from an instrumented host build.

`Program.profile(feeds)` compiles a rewritten copy of the program's own CUDA source with g++, runs
it like the emulator does, and returns a `Profile`: per kernel, `Counters` of global load/store
requests and the 32-byte sectors they touch, shared-memory requests and wavefronts (so bank
conflicts), barriers and floating-point operations, beside the cost model's bytes and time at the
same binding. The normal build never changes: only the profile build goes through `instrument`.

The rewrite (`instrument`) is textual and small: every `float` becomes `rcp_f32` (a float whose
arithmetic and math calls count themselves), each kernel's buffer parameters and `__shared__`
arrays become recording wrappers, and each place the kernel body indexes one of them gets a site
number (`in0[i]` -> `in0(3)[i]`). `emu_profile.h` (prepended to the rewritten source) groups the
k-th execution of a site by the 32 threads of a warp between two barriers into one warp request;
see that header for the exact counting rules.
"""
from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, fields
from pathlib import Path
from types import SimpleNamespace
from typing import Mapping, Optional, Sequence

import numpy as np

from ..codegen.abi import KernelSignature
from ..codegen.access import MemoryCounts
from ..codegen.shared_access import memory_counts
from ..errors import RefcompError
from ..ops.graph import input_nodes, toposort
from ..ops.primitives import GATHER, SCATTER
from ..symbolic.dims import evaluate_dim
from . import cache, emu_build, emulator
from .profile_rewrite import Instrumented, ProfileError, instrument

PROFILE_HEADER = Path(__file__).with_name("emu_profile.h")
# The emulator's flags at -O1: the profile build is compiled once per program and run once, and -O1
# takes about a third less g++ time than -O2 here (IEEE semantics are the same: no fast-math).
PROFILE_FLAGS = tuple("-O1" if f == "-O2" else f for f in emulator.FAST_FLAGS)


# --- counters -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Counters(MemoryCounts):
    """One kernel launch's counts: the memory model's fields (codegen.access.MemoryCounts, which the
    model predicts), then what only a run counts. Nsight Compute's metric for each, where it has one:

    global_load_requests   l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum  (warp-level loads)
    global_load_sectors    l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum   (32-byte sectors)
    global_store_requests  l1tex__t_requests_pipe_lsu_mem_global_op_st.sum
    global_store_sectors   l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum
    shared_load_requests   smsp__inst_executed_op_shared_ld.sum
    shared_load_wavefronts l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
    shared_store_requests  smsp__inst_executed_op_shared_st.sum
    shared_store_wavefronts l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
    barriers               smsp__inst_executed_op_barrier.sum (warp-level: a warp counts a barrier once)
    flops                  thread-level float add, sub, mul, div executed (fma counts 2), as
                           smsp__sass_thread_inst_executed_op_f{add,mul,fma}_pred_on would if each
                           C operator were one instruction (a GPU's IEEE division is several)
    math_calls             thread-level calls of exp2f, log2f, sqrtf, sinf, fmodf, ... (MUFU or library code)
    accesses               thread-level loads and stores of buffers and shared arrays
    """
    flops: int = 0
    math_calls: int = 0
    accesses: int = 0

    @property
    def shared_bank_conflicts(self) -> int:
        """l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum: wavefronts beyond one per request."""
        return (self.shared_load_wavefronts - self.shared_load_requests
                + self.shared_store_wavefronts - self.shared_store_requests)

    @property
    def load_sectors_per_request(self) -> float:
        return self.global_load_sectors / max(self.global_load_requests, 1)

    @property
    def store_sectors_per_request(self) -> float:
        return self.global_store_sectors / max(self.global_store_requests, 1)


@dataclass(frozen=True)
class KernelProfile:
    name: str
    grid: Optional[tuple[int, int, int]]   # None: no work at this binding, not launched
    block: Optional[tuple[int, int, int]]
    counters: Counters
    cost: object                           # the cost model's KernelCost at the profiled binding


@dataclass
class Profile:
    """`kernels[i].counters` per kernel; `total` sums them; `table()` (and str) prints them."""
    kernels: list[KernelProfile]
    bindings: dict[str, int]
    outputs: object          # what the instrumented build computed, shaped as Program.run returns it
    cost_note: str = ""      # where the model's figures were priced, if not at `bindings`

    @property
    def total(self) -> Counters:
        out = Counters()
        for k in self.kernels:
            out = out + k.counters
        return out

    def table(self) -> str:
        return profile_table(self)

    def __str__(self) -> str:
        return self.table()


def profile_table(profile: Profile) -> str:
    def launch(k: KernelProfile) -> str:
        if k.grid is None:
            return "-"
        show = lambda d: "x".join(str(v) for v in (d if d[2] > 1 else d[:2] if d[1] > 1 else d[:1]))
        return f"{show(k.grid)}/{show(k.block)}"

    head = ["kernel", "grid/block", "ld req", "sect/req", "st req", "sect/req", "smem req", "conflicts",
            "barriers", "flops", "math", "sect x 32 B", "model sect B", "model DRAM B", "model us"]
    def row(name: str, where: str, c: Counters, cost) -> list[str]:
        return [name, where, f"{c.global_load_requests:,}", f"{c.load_sectors_per_request:.2f}",
                f"{c.global_store_requests:,}", f"{c.store_sectors_per_request:.2f}",
                f"{c.shared_load_requests + c.shared_store_requests:,}", f"{c.shared_bank_conflicts:,}",
                f"{c.barriers:,}", f"{c.flops:,}", f"{c.math_calls:,}", f"{c.global_bytes:,}",
                f"{cost.l2_bytes:,}", f"{cost.bytes:,}", f"{cost.time_s * 1e6:.2f}"]

    rows = [row(k.name, launch(k), k.counters, k.cost) for k in profile.kernels]
    costs = [k.cost for k in profile.kernels]
    total = SimpleNamespace(bytes=sum(c.bytes for c in costs), time_s=sum(c.time_s for c in costs),
                            l2_bytes=sum(c.l2_bytes for c in costs))
    rows.append(row("total", "", profile.total, total))
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
    binding = ", ".join(f"{k}={v}" for k, v in profile.bindings.items()) or "no symbolic dims"
    title = (
        f"profile at {binding}: {len(profile.kernels)} kernel(s), instrumented host build "
        f"(sect = 32-byte sectors per warp request; model sect B = the cost model's sectors x 32, sampled)"
        f"{profile.cost_note}"
    )
    rule = "-" * len(line(head))
    return "\n".join([title, line(head), rule, *map(line, rows[:-1]), rule, line(rows[-1])])


# --- the instrumented module ----------------------------------------------------------------------
_modules: dict[str, "ProfiledModule"] = {}
_profile_lock = threading.Lock()
_COUNTERS = len(fields(Counters))


class ProfiledModule:
    """The profile build of one translation unit; `launch` runs a kernel and returns its Counters."""

    def __init__(self, library, kernels: Sequence[KernelSignature], instrumented: Instrumented,
                 cache_dir: Optional[str]):
        import ctypes
        self.instrumented = instrumented
        self._runner = emulator.EmulatorModule(library, kernels, sanitize=False, cache_root=cache_dir)
        self._library = library
        library.refcomp_profile_begin.argtypes = [ctypes.c_int]
        library.refcomp_profile_begin.restype = None
        library.refcomp_profile_end.argtypes = [ctypes.POINTER(ctypes.c_longlong)]
        library.refcomp_profile_end.restype = ctypes.c_char_p

    def launch(self, name: str, grid, block, args) -> Counters:
        import ctypes
        if name not in self.instrumented.sites:
            raise ProfileError(f"no kernel named {name!r} in this profile build")
        out = (ctypes.c_longlong * _COUNTERS)()
        with _profile_lock:  # the counters are per library, like the shim's grid state
            self._library.refcomp_profile_begin(self.instrumented.sites[name])
            workers = os.environ.get(emulator.THREADS_ENV)
            os.environ[emulator.THREADS_ENV] = "1"  # the counters gather one block at a time
            try:
                self._runner.launch(name, grid, block, args)
            finally:
                if workers is None:
                    del os.environ[emulator.THREADS_ENV]
                else:
                    os.environ[emulator.THREADS_ENV] = workers
                error = self._library.refcomp_profile_end(out).decode()
        if error:
            raise ProfileError(f"kernel {name}: the profile build could not count its accesses: {error}")
        return Counters(*out)


ALIGN = 256  # cudaMalloc's alignment: sectors are counted from buffers placed as a GPU places them


def aligned_buffer(nbytes: int) -> np.ndarray:
    """A zeroed uint8 buffer whose first byte is ALIGN-aligned (numpy only promises 16)."""
    raw = np.zeros(int(nbytes) + ALIGN, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGN
    return raw[start:start + int(nbytes)]


class ProfileBackend(emulator.EmulatorBackend):
    """The emulator's buffers, aligned as cudaMalloc aligns them; `load` gives the profile build."""

    name = "emulator"

    def __init__(self, cache_dir=None):
        super().__init__(sanitize=False, cache_dir=cache_dir)

    def load(self, source: str, kernels: Sequence[KernelSignature]) -> "ProfiledModule":
        return load_profiled(source, kernels, self._cache_dir)

    def upload(self, array: np.ndarray) -> np.ndarray:
        src = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        buf = aligned_buffer(src.nbytes)
        buf[:] = src
        return buf

    def alloc(self, nbytes: int) -> np.ndarray:
        return aligned_buffer(nbytes)


def load_profiled(
    source: str, kernels: Sequence[KernelSignature], cache_dir: Optional[str] = None
) -> ProfiledModule:
    """Compile (or find in the emulator's disk cache) the profile build of `source`."""
    names = [k.name for k in kernels]
    if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
        raise ProfileError(f"kernel names must be distinct C identifiers, got {names}")
    instrumented = instrument(source, kernels)
    full = (PROFILE_HEADER.read_text() + "\n// ---- the generated source, instrumented ----\n"
            + instrumented.source.rstrip() + "\n" + emulator.callers(kernels))
    flags = PROFILE_FLAGS
    gxx = emulator.gxx_path()
    key = cache.cache_key("emu-profile-v2", emu_build.shim_bytes(), full, *flags, cache.tool_version(gxx))
    if key not in _modules:
        try:
            library = emu_build.load_library(full, flags, key, cache_dir)
        except ProfileError:
            raise
        except RefcompError as exc:
            raise ProfileError(f"the profile build of kernels {', '.join(names)} failed: {exc}") from exc
        _modules[key] = ProfiledModule(library, kernels, instrumented, cache_dir)
    return _modules[key]


# --- programs -------------------------------------------------------------------------------------
def profile_program(program, feeds: Mapping[str, object], dims: Optional[Mapping[str, int]] = None,
                    cache_dir: Optional[str] = None) -> Profile:
    """Run `program` once in the profile build and count every launch (see Program.profile)."""
    be = ProfileBackend(cache_dir)
    bindings, buffers = program.prepare(be, feeds, dims)
    module = be.load(program.source, [k.signature for k in program.kernels])
    launched = {}
    for kernel, grid, block, args in program.launches(buffers, bindings):
        launched[kernel.name] = (tuple(grid), tuple(block), module.launch(kernel.name, grid, block, args))
    costs, note = program.pricing.costs_at(program, bindings)  # the cost model at the profiled binding
    kernels = [KernelProfile(k.name, *launched.get(k.name, (None, None, Counters())), cost)
               for k, cost in zip(program.kernels, costs)]
    return Profile(kernels, dict(bindings), program.download_outputs(be, buffers, bindings), note)


MODEL_FIELDS = tuple(
    f.name for f in fields(MemoryCounts)
)  # what the model predicts and model_disagreements compares


# Counters that follow the ids (data), by the node kind that makes them so: a Gather's table reads
# (in its own kernel or looked up where a kernel fuses it) and a Scatter's row writes
DATA_DEPENDENT = ((GATHER, "global_load_sectors"), (SCATTER, "global_store_sectors"))


def model_disagreements(program, profile: Profile, tolerance: float = 0.0) -> list[str]:
    """Every counter of every launched kernel where the cost model's memory counts (codegen.access)
    and the profile differ by more than `tolerance` (relative): the check that keeps the model honest.
    Counters that depend on the ids (DATA_DEPENDENT) are left out: for those only the requests are
    compared;
    kernels without an access plan (a program loaded from a file) cannot be checked."""
    out = []
    for kernel, got in zip(program.kernels, profile.kernels):
        if got.grid is None or kernel.plan is None:
            continue
        kinds = {n.op.kind for n in kernel.nodes}
        data_dependent = {field for kind, field in DATA_DEPENDENT if kind in kinds}
        model = memory_counts(kernel, profile.bindings)
        for field in MODEL_FIELDS:
            if field in data_dependent:
                continue
            want, have = getattr(got.counters, field), getattr(model, field)
            if abs(have - want) > tolerance * max(want, 1):
                out.append(f"{kernel.name} ({kernel.kind}) {field}: model {have:.0f}, profiler {want}")
    return out


def example_feeds(program, dims: Optional[Mapping[str, int]] = None, seed: int = 0) -> tuple[dict, dict]:
    """Random float feeds (standard normal) and zero ids for the program's inputs at `dims`
    (default: the binding its costs were modeled at), for profiling a program with no data; a
    Scatter's ids are 0, 1, 2, ... instead (they must be distinct)."""
    dims = dict(program.cost_bindings if dims is None else dims)
    rng = np.random.default_rng(seed)
    feeds = {}
    nodes = toposort([t.node for t in program.tensors])
    scattered = {n.srcs[1].node.attrs.get("name") for n in nodes if n.op.name == "Scatter"}
    for node in input_nodes(nodes):
        shape = tuple(evaluate_dim(d, dims) for d in node.shape)
        integer = np.dtype(node.dtype).kind in "iu"
        if integer:
            feeds[node.attrs["name"]] = (
                np.arange(math.prod(shape)).reshape(shape)
                if node.attrs["name"] in scattered
                else np.zeros(shape)
            ).astype(np.int32)
        else:
            feeds[node.attrs["name"]] = rng.standard_normal(shape).astype(np.float32)
    return feeds, dims

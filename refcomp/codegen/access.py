"""The memory model of a kernel: its warp requests and 32-byte sectors, from its own index expressions.

A GPU issues a load or store once per warp (32 consecutive threads of a block) and moves every
32-byte sector the active threads' addresses touch, so what a kernel costs the memory system depends
on how each index expression varies across a warp: stride 1 in the thread is 4 sectors per request
(coalesced), stride 32 is 32, a broadcast is 1. Code generation records every global access it
emits (`emit.Access`: the flat element index, the mask under which a thread performs it, and the
template loop it sits in); this module knows, per template, which index values the 32 lanes of each
warp request hold, evaluates the index expressions on them with NumPy at concrete dims, and counts.

Counting every request is exact (it is what the emulator profiler, exec/profile.py, measures) and
cheap for small programs; for large ones `sample` evaluates that many requests per access, evenly
spread, and scales. The shared-memory traffic and barriers of the templates' block reductions and
matmul tiles are fixed by the templates and counted in closed form (or on the tile's lanes) by
`shared_access.py`, which adds them up with these in `memory_counts`. Buffers are taken 256-byte
aligned, as cudaMalloc places them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from typing import Mapping, Optional

import numpy as np
import sympy

from ..errors import RefcompError
from ..ops.dtypes import DTYPES
from ..symbolic.dims import evaluate_dim, idiv, imod
from .kernels import Kernel

class AccessModelError(RefcompError):
    """An index expression the memory model cannot evaluate; whoever prices falls back to the graph's
    estimate."""


WARP = 32
SECTOR = 32  # bytes


@dataclass(frozen=True)
class MemoryCounts:
    """The model's counts for one launch; the profiler's Counters (exec/profile.py) extend these fields
    with what only a run counts, so model and measurement compare field by field."""

    global_load_requests: float = 0
    global_load_sectors: float = 0
    global_store_requests: float = 0
    global_store_sectors: float = 0
    shared_load_requests: float = 0
    shared_load_wavefronts: float = 0
    shared_store_requests: float = 0
    shared_store_wavefronts: float = 0
    barriers: float = 0

    def __add__(self, other):
        return type(self)(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, factor: float):
        """Every count times `factor` (the same traffic, repeated)."""
        return type(self)(*(getattr(self, f.name) * factor for f in fields(self)))

    @property
    def global_bytes(self) -> float:
        """Bytes the memory system moves for global loads and stores: sectors x 32."""
        return SECTOR * (self.global_load_sectors + self.global_store_sectors)


# --- the lanes of each template loop ------------------------------------------------------------------
@dataclass
class Lanes:
    """Index values of the lanes of `count` warp requests (or of a sample of them): `values[name]` and
    `active` are (rows, 32) arrays; each row stands for `weight` requests."""

    values: dict
    active: np.ndarray
    count: int
    weight: float


@functools.lru_cache(maxsize=1024)
def pick_requests(count: int, sample: Optional[int]) -> tuple[np.ndarray, float]:
    """Which of `count` requests to evaluate (read-only: memoised, the search asks again and again)."""
    if sample is None or count <= sample:
        picked, weight = np.arange(count, dtype=np.int64), 1.0
    else:
        picked = np.sort(np.linspace(0, count - 1, sample).astype(np.int64))
        picked = picked[
            np.concatenate(([True], picked[1:] != picked[:-1]))
        ]  # np.unique's values, without its import of numpy.ma
        weight = count / len(picked)
    picked.setflags(write=False)
    return picked, weight


def digits_of(q: np.ndarray, *radices: int) -> list:
    """The request numbers `q` in mixed radix: one digit per radix, least significant first, then the
    rest (which block, warp and loop step each request is)."""
    digits = []
    for radix in radices:
        digits.append(q % radix)
        q = q // radix
    return digits + [q]


_PER_SPLIT = ("q", "prologue", "a_rows")  # a matmul's row loads every block of a split tile makes


def _lanes_key(kernel: Kernel, scope: str, bindings: Mapping[str, int], sample: Optional[int]) -> tuple:
    """What the lanes of a template loop depend on: the launch and the loop extents, not the index
    expressions (the search prices many kernels of one launch, at one binding)."""
    plan = kernel.plan
    along_k = plan.along_k if scope == "b" else frozenset()  # only B's tile loads follow it
    # K split across blocks shares K's tiles out: only Q's rows, and the prologue's row reductions, are
    # loaded once per split block
    shared_out = scope not in _PER_SPLIT and kernel.launch.splits > 1
    launch = replace(kernel.launch, splits=1) if shared_out else kernel.launch
    return (launch, kernel.kind, plan.extent, plan.prologue_extent, plan.streamed_width, along_k,
            scope, tuple(sorted(bindings.items())), sample)


@functools.lru_cache(maxsize=1024)
def _lanes_of(launch, kind: str, extent, prologue_extent, streamed_width: int, along_k: frozenset, scope: str,
              binding: tuple, sample: Optional[int]) -> Lanes:
    lanes = _new_lanes(
        launch, kind, extent, prologue_extent, streamed_width, along_k, scope, dict(binding), sample
    )
    for array in (lanes.active, *lanes.values.values()):  # shared by every caller: nobody may write to them
        array.setflags(write=False)
    return lanes


def _new_lanes(
    launch,
    kind: str,
    extent,
    prologue_extent,
    streamed_width: int,
    along_k: frozenset,
    scope: str,
    bindings: Mapping[str, int],
    sample: Optional[int],
) -> Lanes:
    work = evaluate_dim(launch.work, bindings)
    extent = evaluate_dim(extent, bindings) if extent is not None else 1
    lane = np.arange(WARP, dtype=np.int64)
    if (
        launch.mode == "grid_stride"
    ):  # i = consecutive 32 per warp; a thread-per-output reduction loops r inside
        warps = -(-work // WARP)
        loops = extent if scope == "loop" else 1
        q, weight = pick_requests(warps * loops, sample)
        i = (q // loops)[:, None] * WARP + lane
        return Lanes(
            {"i": i, "r": np.broadcast_to((q % loops)[:, None], i.shape)}, i < work, warps * loops, weight
        )
    if launch.mode == "columns":  # a block per 32 outputs, i across each warp; warp w takes r = w, w + rows..
        blocks, rows = -(-work // WARP), launch.block // WARP
        if scope == "single":  # the first warp stores
            q, weight = pick_requests(blocks, sample)
            i = q[:, None] * WARP + lane
            return Lanes({"i": i}, i < work, blocks, weight)
        steps = -(-extent // rows)
        q, weight = pick_requests(blocks * rows * steps, sample)
        block, warp, step = q // (rows * steps), (q // steps) % rows, q % steps
        i = block[:, None] * WARP + lane
        r = np.broadcast_to((step * rows + warp)[:, None], i.shape)
        return Lanes({"i": i, "r": r}, (i < work) & (r < extent), blocks * rows * steps, weight)
    if launch.mode == "block_per_output":  # one block per output (row); its warps stride over r
        block_sym = "row" if kind == "row" else "i"
        if scope in ("tail", "tail_loop"):  # per row of `launch.tail` outputs, its last block's thread 0
            rows = work // launch.tail
            loops = launch.tail if scope == "tail_loop" else 1
            q, weight = pick_requests(rows * loops, sample)
            active = np.broadcast_to(lane == 0, (len(q), WARP))
            values = {"trow": np.broadcast_to((q // loops)[:, None], active.shape),
                      "ts": np.broadcast_to((q % loops)[:, None], active.shape)}
            return Lanes(values, active, rows * loops, weight)
        if scope == "single":  # thread 0 alone
            q, weight = pick_requests(work, sample)
            active = np.broadcast_to(lane == 0, (len(q), WARP))
            return Lanes({block_sym: np.broadcast_to(q[:, None], active.shape)}, active, work, weight)
        groups = -(-extent // WARP)
        q, weight = pick_requests(work * groups, sample)
        r = (q % groups)[:, None] * WARP + lane
        return Lanes(
            {block_sym: np.broadcast_to((q // groups)[:, None], r.shape), "r": r},
            r < extent,
            work * groups,
            weight,
        )
    # tiles: blocks (x over N, y over M, z over the batch) of tile x tile threads; warps of 32 linear ids
    t, slices = launch.block, launch.slices  # slices: threadIdx.z = s takes K tiles s, s + slices, ...
    n, batch = (evaluate_dim(d, bindings) for d in launch.extra)
    gx, gy = -(-n // (t * launch.cols)), -(-work // t)  # cols: N tiles a block, B and C per N tile
    if scope in _PER_SPLIT:  # each of a tile's split blocks loads its rows (K's tiles are shared out)
        gx *= launch.splits
    warps_per_block = -(-t * t * slices // WARP)
    if scope == "a_cols":  # each K step, row 0 of each slice (the first t threads of its warps) stages
        steps = -(-extent // (t * slices))
        count = gx * gy * batch * steps * slices
        q, weight = pick_requests(count, sample)
        z, step, bx, by, bz = digits_of(q, slices, steps, gx, gy)
        ka = ((step * slices + z) * t)[:, None] + lane
        return Lanes({"ka": ka, "batch": np.broadcast_to(bz[:, None], ka.shape)},
                     np.broadcast_to(lane < t, ka.shape), count, weight)
    if scope == "prologue":  # threadIdx.x strides over the rows' reduced axis: r = s t + tx
        extent = evaluate_dim(prologue_extent, bindings)
    steps = -(-extent // (t * slices)) if scope in ("a", "b", "kt", "prologue") else 1
    chunks = (streamed_width // t if scope in ("q", "kt")  # streamed Q and K rows: c * t + tx
              else launch.cols if scope in ("b", "epilogue") else 1)
    count = gx * gy * batch * warps_per_block * steps * chunks
    q, weight = pick_requests(count, sample)
    chunk, step, warp, bx, by, bz = digits_of(q, chunks, steps, warps_per_block, gx, gy)
    tid = warp[:, None] * WARP + lane
    z, ty, tx = tid // (t * t), tid % (t * t) // t, tid % t
    k0 = (step[:, None] * slices + z) * t
    if scope in _PER_SPLIT:
        bx = bx // launch.splits
    if scope in ("b", "epilogue"):  # the block's N tile `chunk`
        bx = bx * launch.cols + chunk
    values = {"bm": by[:, None] * t + ty, "bn": bx[:, None] * t + tx, "ka": k0 + tx, "kb": k0 + ty,
              "batch": np.broadcast_to(bz[:, None], tid.shape)}
    if scope == "b" and "b" in along_k:  # B's tile loaded with threadIdx.x walking K
        values.update(bn=bx[:, None] * t + ty, kb=k0 + tx)
    if scope in ("q", "kt"):
        values.update(dq=chunk[:, None] * t + tx, dk=chunk[:, None] * t + tx, kt=k0 + ty)
    if scope == "prologue":
        values["r"] = k0 + tx
        return Lanes(values, (tid < t * t) & (k0 + tx < extent), count, weight)
    if scope in ("a", "b", "a_rows"):  # every slice loads its own tiles (and its rows' values)
        return Lanes(values, tid < t * t * slices, count, weight)
    return Lanes(values, tid < t * t, count, weight)  # slice 0 stores


# --- index expressions evaluated on the lanes --------------------------------------------------------
_COMBINE = {sympy.Add: np.add, sympy.Mul: np.multiply, sympy.Max: np.maximum, sympy.Min: np.minimum,
            sympy.And: np.logical_and, sympy.Or: np.logical_or}
_COMPARE = {sympy.Lt: np.less, sympy.Le: np.less_equal, sympy.Gt: np.greater, sympy.Ge: np.greater_equal,
            sympy.Eq: np.equal, sympy.Ne: np.not_equal}


def _evaluate(
    expr, bindings: Mapping[str, int], lanes: Lanes, definitions: Mapping, values: dict
) -> np.ndarray:
    """The integer (or boolean) value of an index expression on every lane: a walk over the expression
    DAG with NumPy at each node (no code generation, so pricing thousands of kernels stays cheap).
    A bound index variable (uN, o_k) is evaluated from its definition once and shared, as the kernel
    shares it (substituting definitions into one expression would grow it exponentially). `values`
    carries what is known between calls on the same lanes. A dim (a positive symbol) comes from
    `bindings`; any other symbol is 0."""
    stack = [expr]
    while stack:  # post-order, iteratively
        e = stack[-1]
        if e.is_Atom:
            pending = [definitions[e]] if e in definitions and definitions[e] not in values else []
        else:
            pending = [a for a in e.args if a not in values]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        if e in values:
            continue
        if e.is_Integer:
            values[e] = np.int64(int(e))
        elif e is sympy.true or e is sympy.false:
            values[e] = np.bool_(e is sympy.true)
        elif e.is_Symbol:
            values[e] = (values[definitions[e]] if e in definitions
                         else np.int64(bindings[e.name]) if e.is_positive and e.name in bindings
                         else lanes.values.get(e.name, np.int64(0)))
        else:
            args = [values[a] for a in e.args]
            if isinstance(e, idiv):
                values[e] = np.floor_divide(*args)
            elif isinstance(e, imod):
                values[e] = np.mod(*args)
            elif type(e) in _COMPARE:
                values[e] = _COMPARE[type(e)](*args)
            elif isinstance(e, sympy.Not):
                values[e] = np.logical_not(args[0])
            elif isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
                values[e] = args[0] ** int(e.exp)
            else:
                combine = next((fn for kind, fn in _COMBINE.items() if isinstance(e, kind)), None)
                if combine is None:
                    raise AccessModelError(f"the memory model cannot evaluate {e} ({type(e).__name__})")
                out = args[0]
                for a in args[1:]:
                    out = combine(out, a)
                values[e] = out
    return np.broadcast_to(np.asarray(values[expr]), lanes.active.shape)


def distinct_per_row(units: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Per request: how many distinct units (sectors) its active lanes touch."""
    u = np.where(active, units, -1)
    u.sort(axis=1)
    return (u[:, 0] >= 0) + np.count_nonzero((u[:, 1:] != u[:, :-1]) & (u[:, 1:] >= 0), axis=1)


def _access_counts(kernel: Kernel, bindings: Mapping[str, int], sample: Optional[int]):
    """(access, requests, sectors) of each global access of one launch."""
    plan = kernel.plan
    if plan is None:
        raise AccessModelError(f"kernel {kernel.name} has no access plan (a program loaded from a file)")
    lanes_of: dict[str, tuple[tuple, Lanes, dict]] = {}
    itemsize = {f"in{k}": DTYPES[n.dtype].itemsize for k, n in enumerate(kernel.reads)}
    itemsize["out0"] = DTYPES[kernel.output.dtype].itemsize
    itemsize.update({f"out{k + 1}": DTYPES[n.dtype].itemsize for k, n in enumerate(kernel.written[1:])})
    definitions = frozenset(plan.definitions.items())
    for access in plan.accesses:
        if access.scope not in lanes_of:
            key = _lanes_key(kernel, access.scope, bindings, sample)
            lanes_of[access.scope] = (key, _lanes_of(*key), {})
        key, lanes, values = lanes_of[access.scope]
        counted = (key, access, itemsize[access.buffer], definitions)
        if counted not in _COUNTED:
            active = lanes.active & _evaluate(
                sympy.sympify(access.when), bindings, lanes, plan.definitions, values
            ).astype(bool)
            sectors = (
                _evaluate(access.index, bindings, lanes, plan.definitions, values).astype(np.int64)
                * itemsize[access.buffer]
                // SECTOR
            )
            per_row = distinct_per_row(sectors, active)
            if len(_COUNTED) >= MAX_COUNTED:
                _COUNTED.clear()
            _COUNTED[counted] = (
                lanes.weight * float((per_row > 0).sum()),
                lanes.weight * float(per_row.sum()),
            )
        yield (access, *_COUNTED[counted])


def global_counts(kernel: Kernel, bindings: Mapping[str, int], sample: Optional[int] = None) -> MemoryCounts:
    """Global requests and sectors of one launch (every request, or `sample` of each access's)."""
    totals = dict(global_load_requests=0.0, global_load_sectors=0.0, global_store_requests=0.0,
                  global_store_sectors=0.0)
    for access, requests, sectors in _access_counts(kernel, bindings, sample):
        kind = "store" if access.store else "load"
        totals[f"global_{kind}_requests"] += requests
        totals[f"global_{kind}_sectors"] += sectors
    for store, requests, sectors in _partials(kernel.launch, bindings, sample):
        kind = "store" if store else "load"
        totals[f"global_{kind}_requests"] += requests
        totals[f"global_{kind}_sectors"] += sectors
    return MemoryCounts(**totals)


def buffer_bytes(kernel: Kernel, bindings: Mapping[str, int],
                 sample: Optional[int] = None) -> dict[str, float]:
    """Bytes of sectors each buffer parameter ("in0", ..., "out0", a split kernel's "ws0") moves in one
    launch, loads and stores together: the L2 model asks how often each buffer is touched again
    (search.cost.dram_bytes)."""
    moved: dict[str, float] = {}
    for access, _, sectors in _access_counts(kernel, bindings, sample):
        moved[access.buffer] = moved.get(access.buffer, 0.0) + SECTOR * sectors
    for _, _, sectors in _partials(kernel.launch, bindings, sample):
        moved["ws0"] = moved.get("ws0", 0.0) + SECTOR * sectors
    return moved


def _partials(launch, bindings: Mapping[str, int], sample: Optional[int]):
    """(store?, requests, sectors) of each access to the partials (ws0) of a matmul whose K is split
    across blocks: every block stores its accumulators (threads with an output; a sliced block's
    slice 0) and the last block of each tile loads them per split. An online kernel's blocks
    (softmax_matmul.cu.j2, `launch.stats`) also store their rows' m and l (threads of column 0), and
    its last block loads, per split, each row's m (the maximum's pass, threads of a row below M),
    then per N tile m and l beside the accumulator. The tickets (ws1) take atomics only, which are
    neither loads nor stores."""
    if launch.mode != "tiles" or launch.splits == 1:
        return
    t, splits, cols = launch.block, launch.splits, launch.cols
    n, batch = (evaluate_dim(d, bindings) for d in launch.extra)
    m = evaluate_dim(launch.work, bindings)
    gx, gy, warps = -(-n // (t * cols)), -(-m // t), -(-t * t // WARP)
    stats_at = batch * splits * m * n
    lane = np.arange(WARP, dtype=np.int64)
    for stores in (True, False):  # a row per (block of a split, warp, N tile); the combine's likewise
        count = gx * gy * batch * splits * warps * cols
        q, weight = pick_requests(count, sample)
        chunk, warp, split, bx, by, bz = digits_of(q, cols, warps, splits, gx, gy)
        tid = warp[:, None] * WARP + lane
        ty, tx = tid // t, tid % t
        bm, bn = by[:, None] * t + ty, (bx * cols + chunk)[:, None] * t + tx
        part = (bz[:, None] * splits + split[:, None]) * m + bm
        row = (tid < t * t) & (bm < m)
        output = row & (bn < n)
        stat = stats_at + (part * gx + bx[:, None]) * 2
        first = (chunk == 0)[:, None]  # per row, not per N tile: m and l
        if not launch.stats:
            sites = [(part * n + bn, output)]
        elif stores:
            column_0 = row & (tx == 0) & first
            sites = [(part * n + bn, output), (stat, column_0), (stat + 1, column_0)]
        else:  # m once per row (the maximum's pass), then per N tile m, l and the accumulator
            sites = [(stat, row & first), (stat, output), (stat + 1, output), (part * n + bn, output)]
        for index, active in sites:
            per_row = distinct_per_row(index * 4 // SECTOR, active)
            yield stores, weight * float((per_row > 0).sum()), weight * float(per_row.sum())


# Each access's requests and sectors on its lanes, under the index definitions of its kernel: the
# search prices a matmul at every tile and tile-load order, and an access whose lanes do not depend
# on the order (all but B's tile loads) is counted once for both.
_COUNTED: dict = {}
MAX_COUNTED = 1 << 16

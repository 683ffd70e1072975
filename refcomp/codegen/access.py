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
matmul tiles are fixed by the templates and counted here in closed form (or on the tile's lanes).
Buffers are taken 256-byte aligned, as cudaMalloc places them.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields, replace
from typing import Mapping, Optional

import numpy as np
import sympy

from ..errors import RefcompError
from ..ops.dtypes import DTYPES
from ..ops.primitives import REDUCE
from ..symbolic.dims import evaluate_dim, idiv, imod
from .kernels import Kernel

class AccessModelError(RefcompError):
    """An index expression the memory model cannot evaluate; whoever prices falls back to the graph's
    estimate."""


WARP = 32
SECTOR = 32  # bytes
WORD = 4  # bytes per shared-memory element (the templates' tiles are float32) and per bank


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
def _pick(count: int, sample: Optional[int]) -> tuple[np.ndarray, float]:
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


def _lanes_key(kernel: Kernel, scope: str, bindings: Mapping[str, int], sample: Optional[int]) -> tuple:
    """What the lanes of a template loop depend on: the launch and the loop extents, not the index
    expressions (the search prices many kernels of one launch, at one binding)."""
    plan = kernel.plan
    along_k = plan.along_k if scope == "b" else frozenset()  # only B's tile loads follow it
    return (kernel.launch, kernel.kind, plan.extent, plan.prologue_extent, plan.streamed_width, along_k,
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
        q, weight = _pick(warps * loops, sample)
        i = (q // loops)[:, None] * WARP + lane
        return Lanes(
            {"i": i, "r": np.broadcast_to((q % loops)[:, None], i.shape)}, i < work, warps * loops, weight
        )
    if launch.mode == "columns":  # a block per 32 outputs, i across each warp; warp w takes r = w, w + rows..
        blocks, rows = -(-work // WARP), launch.block // WARP
        if scope == "single":  # the first warp stores
            q, weight = _pick(blocks, sample)
            i = q[:, None] * WARP + lane
            return Lanes({"i": i}, i < work, blocks, weight)
        steps = -(-extent // rows)
        q, weight = _pick(blocks * rows * steps, sample)
        block, warp, step = q // (rows * steps), (q // steps) % rows, q % steps
        i = block[:, None] * WARP + lane
        r = np.broadcast_to((step * rows + warp)[:, None], i.shape)
        return Lanes({"i": i, "r": r}, (i < work) & (r < extent), blocks * rows * steps, weight)
    if launch.mode == "block_per_output":  # one block per output (row); its warps stride over r
        block_sym = "row" if kind == "row" else "i"
        if scope == "single":  # thread 0 alone
            q, weight = _pick(work, sample)
            active = np.broadcast_to(lane == 0, (len(q), WARP))
            return Lanes({block_sym: np.broadcast_to(q[:, None], active.shape)}, active, work, weight)
        groups = -(-extent // WARP)
        q, weight = _pick(work * groups, sample)
        r = (q % groups)[:, None] * WARP + lane
        return Lanes(
            {block_sym: np.broadcast_to((q // groups)[:, None], r.shape), "r": r},
            r < extent,
            work * groups,
            weight,
        )
    # tiles: blocks (x over N, y over M, z over the batch) of tile x tile threads; warps of 32 linear ids
    t = launch.block
    n, batch = (evaluate_dim(d, bindings) for d in launch.extra)
    gx, gy = -(-n // t), -(-work // t)
    warps_per_block = -(-t * t // WARP)
    if scope == "prologue":  # threadIdx.x strides over the rows' reduced axis: r = s t + tx
        extent = evaluate_dim(prologue_extent, bindings)
    steps = -(-extent // t) if scope in ("a", "b", "kt", "prologue") else 1
    chunks = streamed_width // t if scope in ("q", "kt") else 1  # streamed Q and K rows: c * t + tx
    count = gx * gy * batch * warps_per_block * steps * chunks
    q, weight = _pick(count, sample)
    chunk, q = q % chunks, q // chunks
    step, q = q % steps, q // steps
    warp, q = q % warps_per_block, q // warps_per_block
    bx, q = q % gx, q // gx
    by, bz = q % gy, q // gy
    tid = warp[:, None] * WARP + lane
    ty, tx = tid // t, tid % t
    k0 = (step * t)[:, None]
    values = {"bm": by[:, None] * t + ty, "bn": bx[:, None] * t + tx, "ka": k0 + tx, "kb": k0 + ty,
              "batch": np.broadcast_to(bz[:, None], tid.shape)}
    if scope == "b" and "b" in along_k:  # B's tile loaded with threadIdx.x walking K
        values.update(bn=bx[:, None] * t + ty, kb=k0 + tx)
    if scope in ("q", "kt"):
        values.update(dq=chunk[:, None] * t + tx, dk=chunk[:, None] * t + tx, kt=k0 + ty)
    if scope == "prologue":
        values["r"] = k0 + tx
        return Lanes(values, (tid < t * t) & (k0 + tx < extent), count, weight)
    return Lanes(values, tid < t * t, count, weight)


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


def _distinct_per_row(units: np.ndarray, active: np.ndarray) -> np.ndarray:
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
            per_row = _distinct_per_row(sectors, active)
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
    return MemoryCounts(**totals)


def buffer_bytes(kernel: Kernel, bindings: Mapping[str, int],
                 sample: Optional[int] = None) -> dict[str, float]:
    """Bytes of sectors each buffer parameter ("in0", ..., "out0") moves in one launch, loads and stores
    together: the L2 model asks how often each buffer is touched again (search.cost.dram_bytes)."""
    moved: dict[str, float] = {}
    for access, _, sectors in _access_counts(kernel, bindings, sample):
        moved[access.buffer] = moved.get(access.buffer, 0.0) + SECTOR * sectors
    return moved


# Each access's requests and sectors on its lanes, under the index definitions of its kernel: the
# search prices a matmul at every tile and tile-load order, and an access whose lanes do not depend
# on the order (all but B's tile loads) is counted once for both.
_COUNTED: dict = {}
MAX_COUNTED = 1 << 16


def shared_counts(kernel: Kernel, bindings: Mapping[str, int]) -> MemoryCounts:
    """Shared memory and barriers of the templates, which the index expressions do not touch."""
    launch = kernel.launch
    work = evaluate_dim(launch.work, bindings)
    if launch.mode == "block_per_output":  # the block-wide tree over partial[block]
        warps, steps = launch.block // WARP, int(math.log2(launch.block))
        tree_warps = sum(
            -(-(launch.block >> (s + 1)) // WARP) for s in range(steps)
        )  # threads below each stride
        phases = kernel.plan.block_reductions
        per_phase_loads = 2 * tree_warps + (
            warps if kernel.kind == "row" else 1
        )  # red = partial[0] / total = partial[0]
        per_phase_stores = warps + tree_warps
        load_waves, store_waves = per_phase_loads, per_phase_stores
        if any(n.op.kind == REDUCE and not DTYPES[n.dtype].is_float for n in kernel.nodes):
            # 8-byte partials (double, long long): a request of more than 16 lanes spans 64 words, two
            # wavefronts; the tree's requests shrink below that as its stride halves
            tree_waves = sum(_eight_byte_waves(launch.block >> (s + 1)) for s in range(steps))
            load_waves, store_waves = 2 * tree_waves + 1, _eight_byte_waves(launch.block) + tree_waves
        barriers = warps * (1 + steps + (1 if kernel.kind == "row" else 0))
        return MemoryCounts(shared_load_requests=work * phases * per_phase_loads,
                            shared_load_wavefronts=work * phases * load_waves,
                            shared_store_requests=work * phases * per_phase_stores,
                            shared_store_wavefronts=work * phases * store_waves,
                            barriers=work * phases * barriers)
    if launch.mode == "columns":  # each warp stores its partials; the tree halves down to one warp
        blocks, warps, steps = -(-work // WARP), launch.block // WARP, int(math.log2(launch.block // WARP))
        tree_warps = sum(warps >> (s + 1) for s in range(steps))
        waves = 2 if any(not DTYPES[n.dtype].is_float for n in kernel.nodes if n.op.kind == REDUCE) else 1
        # the storing warp reads the totals of its outputs (8 bytes each: 16 or fewer are one wavefront)
        last = work - (blocks - 1) * WARP
        totals = (blocks - 1) * waves + (1 if last <= WARP // waves else waves)
        return MemoryCounts(shared_load_requests=blocks * (2 * tree_warps + 1),
                            shared_load_wavefronts=blocks * 2 * tree_warps * waves + totals,
                            shared_store_requests=blocks * (warps + tree_warps),
                            shared_store_wavefronts=blocks * (warps + tree_warps) * waves,
                            barriers=blocks * warps * (1 + steps))
    if launch.mode == "tiles":
        return _matmul_shared(kernel, bindings)
    return MemoryCounts()


def _eight_byte_waves(threads: int) -> int:
    """Wavefronts of `threads` consecutive threads each touching one 8-byte element, warp by warp."""
    full, rest = divmod(threads, WARP)
    return 2 * full + (0 if rest == 0 else 1 if rest <= WARP // 2 else 2)


def _wavefronts(words: np.ndarray) -> int:
    """The most distinct 4-byte words of one request that share a bank (a broadcast counts once)."""
    distinct = np.unique(words)
    return int(np.bincount(distinct % 32, minlength=32).max())


def _matmul_shared(kernel: Kernel, bindings: Mapping[str, int]) -> MemoryCounts:
    """The tiles' shared memory, per K step and warp: As[ty][tx] and Bs stored, As[ty][kk] and Bs[kk][tx]
    read for each kk, two barriers. softmax_matmul.cu.j2 also stores each weight (Ws[ty][tx]), reads its
    score (Ss[ty][tx]) and its row's scores (Ss[ty][kk], for the maximum), behind a third barrier (and,
    streaming q k^T, see _streamed_shared). Each prologue phase stores a partial result (As[ty][tx]),
    reads its row's (As[ty][kk]) and passes two barriers, once per block; a pair (codegen.statistics)
    also stores and reads a second one in Bs, between the same barriers."""
    t = kernel.launch.block
    n, batch = (evaluate_dim(d, bindings) for d in kernel.launch.extra)
    blocks = -(-n // t) * -(-evaluate_dim(kernel.launch.work, bindings) // t) * batch
    steps = -(-evaluate_dim(kernel.plan.extent, bindings) // t)
    pitch = t + 1  # As[t][t + 1]: the padding column keeps a warp's rows on different banks
    tid = np.arange(t * t)
    ty, tx = tid // t, tid % t
    warps = -(-t * t // WARP)
    own = row = column = b_store = (
        0  # wavefronts of every warp: [ty][tx], [ty][kk] for all kk, [kk][tx], Bs's store
    )
    for w in range(warps):
        y, x = ty[w * WARP:(w + 1) * WARP], tx[w * WARP:(w + 1) * WARP]
        own += _wavefronts(y * pitch + x)
        row += sum(_wavefronts(y * pitch + kk) for kk in range(t))
        column += sum(_wavefronts(kk * pitch + x) for kk in range(t))
        b_store += _wavefronts(
            x * pitch + y if "b" in kernel.plan.along_k else y * pitch + x
        )  # Bs[tx][ty] or Bs[ty][tx]
    online = kernel.plan.template == "softmax_matmul.cu.j2"
    per_step = MemoryCounts(
        shared_store_requests=2 * warps,
        shared_store_wavefronts=own + b_store,
        shared_load_requests=2 * t * warps,
        shared_load_wavefronts=row + column,
        barriers=2 * warps,
    )
    if online:
        per_step = per_step + MemoryCounts(
            shared_store_requests=warps,
            shared_store_wavefronts=own,
            shared_load_requests=(t + 1) * warps,
            shared_load_wavefronts=row + own,
            barriers=warps,
        )
    prologue = MemoryCounts(
        shared_store_requests=warps,
        shared_store_wavefronts=own,
        shared_load_requests=t * warps,
        shared_load_wavefronts=row,
        barriers=2 * warps,
    )
    second = replace(prologue, barriers=0)  # a pair's second value: Bs[ty][tx] stored, Bs[ty][kk] read
    streamed = (
        _streamed_shared(kernel, blocks, steps) if online and kernel.plan.streamed_width else MemoryCounts()
    )
    return (streamed + per_step.scaled(blocks * steps) + prologue.scaled(blocks * kernel.plan.prologue_phases)
            + second.scaled(blocks * kernel.plan.prologue_pairs))


def _streamed_shared(kernel: Kernel, blocks: int, steps: int) -> MemoryCounts:
    """Streamed scores: each block stores its rows of Q once (Qs[ty][c t + tx]); each K tile, K's rows
    (Ks[ty][c t + tx]), then every thread reads Qs[ty][d] and Ks[tx][d] for each d of the depth,
    behind a fourth barrier."""
    t, width = kernel.launch.block, kernel.plan.streamed_width
    depth = kernel.plan.streamed_depth
    pitch = width + 1
    tid = np.arange(t * t)
    ty, tx = tid // t, tid % t
    warps = -(-t * t // WARP)
    row_store = dot = 0
    for w in range(warps):
        y, x = ty[w * WARP:(w + 1) * WARP], tx[w * WARP:(w + 1) * WARP]
        row_store += sum(_wavefronts(y * pitch + c * t + x) for c in range(width // t))
        dot += sum(_wavefronts(y * pitch + d) + _wavefronts(x * pitch + d) for d in range(depth))
    chunks = width // t
    return MemoryCounts(shared_store_requests=blocks * warps * chunks * (1 + steps),
                        shared_store_wavefronts=blocks * row_store * (1 + steps),
                        shared_load_requests=blocks * steps * warps * 2 * depth,
                        shared_load_wavefronts=blocks * steps * dot, barriers=blocks * steps * warps)


def memory_counts(kernel: Kernel, bindings: Mapping[str, int], sample: Optional[int] = None) -> MemoryCounts:
    return global_counts(kernel, bindings, sample) + shared_counts(kernel, bindings)

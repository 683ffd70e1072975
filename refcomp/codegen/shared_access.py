"""The shared memory and barriers of a kernel's templates, counted in closed form (or on a matmul
tile's lanes), and a kernel's whole memory model: these beside the global requests and sectors of
`access.py`, field by field as the emulator's profiler (exec/profile.py) measures them.

The block reductions' tree over `partial[block]` is conflict-free; the matmul's `As`/`Bs` tiles are
padded to `tile + 1` columns, and their bank conflicts are counted on the tile's lanes.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Mapping, Optional

import numpy as np

from ..ops.dtypes import DTYPES
from ..ops.primitives import REDUCE
from ..symbolic.dims import evaluate_dim
from .access import WARP, MemoryCounts, global_counts
from .kernels import Kernel
from .row_stats_access import row_stats_counts


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
    t, slices, cols = kernel.launch.block, kernel.launch.slices, kernel.launch.cols
    n, batch = (evaluate_dim(d, bindings) for d in kernel.launch.extra)
    m = evaluate_dim(kernel.launch.work, bindings)
    blocks = -(-n // (t * cols)) * -(-m // t) * batch
    splits = kernel.launch.splits
    steps = _slice_steps(evaluate_dim(kernel.plan.extent, bindings), t, slices, splits)  # of a tile's blocks
    pitch = t + 1  # As[t][t + 1]: the padding column keeps a warp's rows on different banks
    pitch_b = t * cols + 1  # Bs[t][t cols + 1]: cols N tiles side by side (the online template)
    tid = np.arange(t * t)
    ty, tx = tid // t, tid % t
    warps = -(-t * t // WARP)
    own = _tile_store_wavefronts(t)  # wavefronts of every warp: [ty][tx]
    row = column = b_store = 0  # [ty][kk] for all kk, [kk][tx], Bs's store
    for w in range(warps):
        y, x = ty[w * WARP:(w + 1) * WARP], tx[w * WARP:(w + 1) * WARP]
        row += sum(_wavefronts(y * pitch + kk) for kk in range(t))
        for c in range(cols):  # Bs[kk][c t + tx]; Bs[tx][c t + ty] or Bs[ty][c t + tx]
            column += sum(_wavefronts(kk * pitch_b + c * t + x) for kk in range(t))
            along_k = "b" in kernel.plan.along_k
            b_store += _wavefronts(x * pitch_b + c * t + y if along_k else y * pitch_b + c * t + x)
    online = kernel.plan.template == "softmax_matmul.cu.j2"
    per_step = MemoryCounts(
        shared_store_requests=(1 + cols) * warps,
        shared_store_wavefronts=own + b_store,
        shared_load_requests=2 * t * warps,
        shared_load_wavefronts=row + column,
        barriers=2 * warps,
    )
    staged = kernel.plan.staged_columns
    if staged:  # codegen.staged: row 0 stages each load of k alone, a barrier, every thread reads it
        per_step = per_step + MemoryCounts(shared_store_requests=staged, shared_store_wavefronts=staged,
                                           shared_load_requests=staged * warps,
                                           shared_load_wavefronts=staged * warps, barriers=warps)
    accumulated = MemoryCounts()
    if online:  # the accumulation's reads are made by the rows below M only (_padded_rows_skip)
        per_step = per_step + MemoryCounts(
            shared_store_requests=warps,
            shared_store_wavefronts=own,
            shared_load_requests=(t + 1) * warps,
            shared_load_wavefronts=row + own,
            barriers=warps,
        )
        per_step = replace(per_step, shared_load_requests=per_step.shared_load_requests - 2 * t * warps,
                           shared_load_wavefronts=per_step.shared_load_wavefronts - row - column)
        tiles_n = -(-n // (t * cols))
        for valid, tiles in _tile_rows(m, t):
            accumulated = accumulated + _padded_rows_skip(kernel, valid, pitch, pitch_b).scaled(
                tiles * tiles_n * batch * steps)
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
    sliced = MemoryCounts()
    if slices > 1:  # every warp stores its sums in Ps, a barrier, then slice 0's warps with an output read
        rows_per_warp = max(1, WARP // t)  # each slice's sums (its rows of the tile below M)
        reading = -(-n // t) * batch * ((m // t) * warps + -(-(m % t) // rows_per_warp)) * splits
        sliced = MemoryCounts(shared_store_requests=blocks * splits * slices * warps,
                              shared_store_wavefronts=blocks * splits * slices * warps,
                              barriers=blocks * splits * slices * warps,
                              shared_load_requests=reading * slices, shared_load_wavefronts=reading * slices)
    split = MemoryCounts()
    if splits > 1:  # every block: thread 0 stores its ticket in Last[0], every warp reads it, behind two
        split_blocks, all_warps = blocks * splits, warps * slices  # barriers
        split = MemoryCounts(shared_store_requests=split_blocks, shared_store_wavefronts=split_blocks,
                             shared_load_requests=split_blocks * all_warps,
                             shared_load_wavefronts=split_blocks * all_warps,
                             barriers=split_blocks * 2 * all_warps)
    each_block = blocks * splits  # every block of a split tile computes the prologue's row reductions
    return (streamed + per_step.scaled(blocks * steps)
            + prologue.scaled(each_block * kernel.plan.prologue_phases)
            + second.scaled(each_block * kernel.plan.prologue_pairs) + sliced + split + accumulated)


def _slice_steps(k: int, t: int, slices: int, splits: int) -> int:
    """Slice-steps of K's loop over a tile's blocks: each of `splits` blocks walks its share of K's
    tiles (the templates' per_split, whole tiles) in steps of `slices` tiles, every slice stepping."""
    per_split = -(-(-(-k // t)) // splits) * t
    shares = (min(per_split, max(k - s * per_split, 0)) for s in range(splits))
    return sum(-(-share // (t * slices)) for share in shares) * slices


def _tile_rows(m: int, t: int) -> list[tuple[int, int]]:
    """(rows below M in a tile, how many tiles have that many) over M's tiles."""
    full, rest = divmod(m, t)
    return [(t, full)] + ([(rest, 1)] if rest else [])


def _padded_rows_skip(kernel: Kernel, valid: int, pitch: int, pitch_b: int) -> MemoryCounts:
    """One K step's reads that softmax_matmul.cu.j2 makes for the rows below M only, in a tile with
    `valid` such rows: the accumulation's weights Ws[ty][kk] (for l and for each N tile) and B's
    columns Bs[kk][c t + tx]; streaming, also q . k's Qs[ty][d] and Ks[tx][d]. A warp whose rows are
    all padding reads nothing, and its requests' wavefronts are those of its active lanes."""
    t, cols, depth = kernel.launch.block, kernel.launch.cols, kernel.plan.streamed_depth
    w_reads = 1 + cols  # Ws[ty][kk] for l, then for each N tile's column
    q_pitch = kernel.plan.streamed_width + 1
    tid = np.arange(t * t)
    requests = waves = 0
    for w in range(-(-t * t // WARP)):
        y, x = tid[w * WARP:(w + 1) * WARP] // t, tid[w * WARP:(w + 1) * WARP] % t
        y, x = y[y < valid], x[y < valid]
        if len(y) == 0:
            continue
        requests += (w_reads + cols) * t + (2 * depth if kernel.plan.streamed_width else 0)
        waves += w_reads * sum(_wavefronts(y * pitch + kk) for kk in range(t))
        waves += sum(_wavefronts(kk * pitch_b + c * t + x) for c in range(cols) for kk in range(t))
        if kernel.plan.streamed_width:
            waves += sum(_wavefronts(y * q_pitch + d) + _wavefronts(x * q_pitch + d) for d in range(depth))
    return MemoryCounts(shared_load_requests=requests, shared_load_wavefronts=waves)


def _streamed_shared(kernel: Kernel, blocks: int, steps: int) -> MemoryCounts:
    """Streamed scores: each block stores its rows of Q once (Qs[ty][c t + tx]; each of a tile's split
    blocks, when K is split across blocks); each K tile, K's rows (Ks[ty][c t + tx]), then every thread
    of a row below M reads Qs[ty][d] and Ks[tx][d] for each d of the depth (_padded_rows_skip),
    behind a fourth barrier."""
    t, width = kernel.launch.block, kernel.plan.streamed_width
    pitch = width + 1
    tid = np.arange(t * t)
    ty, tx = tid // t, tid % t
    warps = -(-t * t // WARP)
    row_store = 0
    for w in range(warps):
        y, x = ty[w * WARP:(w + 1) * WARP], tx[w * WARP:(w + 1) * WARP]
        row_store += sum(_wavefronts(y * pitch + c * t + x) for c in range(width // t))
    chunks, splits = width // t, kernel.launch.splits
    return MemoryCounts(shared_store_requests=blocks * warps * chunks * (splits + steps),
                        shared_store_wavefronts=blocks * row_store * (splits + steps),
                        barriers=blocks * steps * warps)


def memory_counts(kernel: Kernel, bindings: Mapping[str, int], sample: Optional[int] = None) -> MemoryCounts:
    counts = global_counts(kernel, bindings, sample) + shared_counts(kernel, bindings)
    if kernel.launch.row_stats:
        own = _tile_store_wavefronts(kernel.launch.block)  # the end stores As[ty][tx] as the tile loads do
        counts = counts + row_stats_counts(kernel, bindings, sample, own)
    return counts


def _tile_store_wavefronts(t: int) -> int:
    """Wavefronts of a block's store of As[ty][tx] (pitch t + 1), warp by warp."""
    tid = np.arange(t * t)
    lanes = [tid[w:w + WARP] for w in range(0, t * t, WARP)]
    return sum(_wavefronts((lane // t) * (t + 1) + lane % t) for lane in lanes)

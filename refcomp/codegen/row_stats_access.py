"""The memory model of a matmul kernel's row-statistics end (templates/matmul_row_stats.cu.j2), which
its index expressions do not show: the partial statistics in ws2, the merge's loads of them, the
sum and sum of squared deviations (or the maximum) stored per row, and the shared memory and barriers
of its phases. Counted on lanes (global) or in closed form (shared), field by field as the profiler
measures them.

Per tile, the block that stored it (a split tile's last) puts each thread's stored value in As
(threads of slice 0), then each row's thread of column 0 reads the tile's columns of its row and,
for a row below M, stores its mean and m2; thread 0 draws the row of tiles' ticket into RowLast; the
last tile of each row of tiles has the rows' threads of column 0 load every tile's mean and m2 and
store the row's two results. Three barriers a block; a split kernel's blocks also read Last[0] (the
split ticket) in each phase that asks whether they stored their tile. A maximum's merge has every
thread of a row load every t-th tile's maximum from its column's on and store its maximum in As,
then the row's thread of column 0 read the t of them: one phase and one barrier more.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np

from ..symbolic.dims import evaluate_dim
from .access import SECTOR, WARP, MemoryCounts, digits_of, distinct_per_row, pick_requests
from .access import buffer_bytes as tile_bytes
from .kernels import Kernel


def _shape(launch, bindings):
    t = launch.block
    n, batch = (evaluate_dim(d, bindings) for d in launch.extra)
    m = evaluate_dim(launch.work, bindings)
    return t, n, m, batch, -(-n // t), -(-m // t), -(-t * t // WARP)


def row_stats_traffic(kernel: Kernel, bindings: Mapping[str, int], sample: Optional[int] = None):
    """(buffer, store?, requests, sectors) of each global access of the row-statistics end."""
    launch = kernel.launch
    if not launch.row_stats:
        return
    t, n, m, batch, gx, gy, warps = _shape(launch, bindings)
    per_tile = launch.row_stats  # 2: a mean and m2; 1: a maximum
    results = [f"out{len(kernel.carried) + k}" for k in range(1, per_tile + 1)]
    lane = np.arange(WARP, dtype=np.int64)

    def lanes(count, *radices):
        q, weight = pick_requests(count, sample)
        digits = digits_of(q, warps, *radices)
        tid = digits[0][:, None] * WARP + lane
        ty, tx = tid // t, tid % t
        return weight, digits[1:], tid < t * t, tx, ty

    def counted(buffer, store, weight, index, active):
        per_row = distinct_per_row(index * 4 // SECTOR, active)
        return buffer, store, weight * float((per_row > 0).sum()), weight * float(per_row.sum())

    weight, (bx, by, bz), threads, tx, ty = lanes(gx * gy * batch * warps, gx, gy)  # each tile's partials
    bm = by[:, None] * t + ty
    part = (bz[:, None] * m + bm) * gx + bx[:, None]
    for offset in range(per_tile):
        yield counted("ws2", True, weight, per_tile * part + offset, threads & (tx == 0) & (bm < m))
    if per_tile == 2:  # the merge's loads: the rows' threads of column 0, every tile in order
        weight, (tile, by, bz), threads, tx, ty = lanes(gy * batch * warps * gx, gx, gy)
        bm = by[:, None] * t + ty
        part = (bz[:, None] * m + bm) * gx + tile[:, None]
        for offset in (0, 1):
            yield counted("ws2", False, weight, 2 * part + offset, threads & (tx == 0) & (bm < m))
    else:  # each thread of a row every t-th tile from its column's
        steps = -(-gx // t)
        weight, (step, by, bz), threads, tx, ty = lanes(gy * batch * warps * steps, steps, gy)
        bm = by[:, None] * t + ty
        tile = step[:, None] * t + tx
        part = (bz[:, None] * m + bm) * gx + tile
        yield counted("ws2", False, weight, part, threads & (tile < gx) & (bm < m))
    weight, (by, bz), threads, tx, ty = lanes(gy * batch * warps, gy)  # each row's results
    bm = by[:, None] * t + ty
    for buffer in results:
        yield counted(buffer, True, weight, bz[:, None] * m + bm, threads & (tx == 0) & (bm < m))


def row_stats_counts(kernel: Kernel, bindings: Mapping[str, int], sample: Optional[int] = None,
                     own: int = 0) -> MemoryCounts:
    """Global and shared counts of the row-statistics end; `own`: the wavefronts of one block's store
    of As[ty][tx] (shared_access counts it for the tile loads)."""
    launch = kernel.launch
    if not launch.row_stats:
        return MemoryCounts()
    counts = {"global_load_requests": 0.0, "global_load_sectors": 0.0, "global_store_requests": 0.0,
              "global_store_sectors": 0.0}
    for _, store, requests, sectors in row_stats_traffic(kernel, bindings, sample):
        kind = "store" if store else "load"
        counts[f"global_{kind}_requests"] += requests
        counts[f"global_{kind}_sectors"] += sectors
    t, n, m, batch, gx, gy, warps = _shape(launch, bindings)
    tiles, blocks = gx * gy * batch, gx * gy * batch * launch.splits
    all_warps = warps * launch.slices
    merges = 1 if launch.row_stats == 2 else 2  # phases reading RowLast[0] (a maximum's: two)
    split = launch.splits > 1
    last_reads = ((1 + merges) * blocks * all_warps + blocks) if split else 0  # each phase's, the ticket's
    loads = last_reads + warps * n * gy * batch + merges * tiles * all_warps  # + rows' columns, RowLast[0]
    stores = tiles * warps + tiles  # As[ty][tx], RowLast[0]
    wavefronts = tiles * own + tiles
    if merges == 2:  # the last tile's threads' maxima in As, then each row's t of them
        loads += gy * batch * warps * t
        stores += gy * batch * warps
        wavefronts += gy * batch * own
    return MemoryCounts(**counts, shared_load_requests=loads, shared_load_wavefronts=loads,
                        shared_store_requests=stores, shared_store_wavefronts=wavefronts,
                        barriers=(2 + merges) * blocks * all_warps)


def buffer_bytes(kernel: Kernel, bindings: Mapping[str, int],
                 sample: Optional[int] = None) -> dict[str, float]:
    """access.buffer_bytes, with the row-statistics end's traffic (ws2 and the two results) added."""
    moved = tile_bytes(kernel, bindings, sample)
    for buffer, _, _, sectors in row_stats_traffic(kernel, bindings, sample):
        moved[buffer] = moved.get(buffer, 0.0) + SECTOR * sectors
    return moved

"""How a kernel is launched: its grid and block as functions of the bound dims, and the scratch
buffers a launch whose K is split across blocks needs beside its parameters."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping

from .abi import KernelSignature, Param
from ..symbolic.dims import Dim, evaluate_dim

BLOCK = 256  # threads per block for every template
TILE = 16  # the edge of the matmul template's square tiles (the search may choose 32)
N_TILES = 4  # the most N tiles an online-softmax matmul's block computes (the search may choose 1)
MAX_GRID_STRIDE_BLOCKS = 2048  # grid-stride loops cover any size with at most this many blocks
WARP_OUTPUTS = 32  # outputs of a "columns" block: one warp's lanes


@dataclass(frozen=True)
class Launch:
    """How a kernel is launched, as a function of the bound dims.

    grid_stride: threads loop over `work` elements; block_per_output: one block per element of
    `work`; columns: one block per 32 neighbouring elements of `work`, a warp's lanes across them;
    tiles: a (N/tile, M/tile, batch) grid of tile x tile blocks, with `work` = M and
    `extra` = (N, batch).
    """
    mode: str
    work: Dim
    block: int = BLOCK
    extra: tuple = ()
    slices: int = 1  # tiles: the block's threads split K into this many slices (threadIdx.z)
    splits: int = 1  # tiles: K split across this many blocks per tile, their partials combined (ws0, ws1)
    cols: int = 1  # tiles: N tiles a block computes, each thread one column of each (online softmax)
    stats: bool = False  # tiles split across blocks: each block's partials carry its rows' m and l (online)
    row_stats: int = 0  # tiles: values per row and N tile of its rows' statistics (ws2 partials, ws3 tickets)
    tail: int = 0  # block_per_output: outputs a row, the row's last block reducing them (codegen.tail, ws4)

    def __str__(self) -> str:
        extra = "".join(f" x {d}" for d in self.extra)
        sliced = f", K in {self.slices} slices" if self.slices > 1 else ""
        split = f", K split across {self.splits} blocks" if self.splits > 1 else ""
        wide = f", {self.cols} N tiles a block" if self.cols > 1 else ""
        rows = f", {self.row_end}" if self.row_stats else ""
        tail = f", each row's last of {self.tail} blocks reducing the row" if self.tail else ""
        return f"{self.mode} over {self.work}{extra}, block {self.block}{sliced}{split}{wide}{rows}{tail}"

    def scratch(self, bindings: Mapping[str, int]) -> tuple[int, int]:
        """Elements of the two scratch buffers of a launch whose K is split across blocks: ws0 (float32)
        holds each block's accumulators, then (an online softmax's) its rows' m and l per N tile; ws1
        (uint32) one ticket per tile, zero before the launch and after it. (0, 0) when K is not split."""
        if self.splits == 1:
            return 0, 0
        n, batch = (evaluate_dim(d, bindings) for d in self.extra)
        m, t = evaluate_dim(self.work, bindings), self.block
        tiles_n, tiles_m = -(-n // (t * self.cols)), -(-m // t)
        stats = 2 * tiles_n if self.stats else 0
        return batch * self.splits * m * (n + stats), batch * tiles_m * tiles_n

    @property
    def row_end(self) -> str:
        """What a kernel's row-statistics end computes, in words (its `row_stats` values a tile)."""
        return "its rows' maximum" if self.row_stats == 1 else "its rows' statistics"

    def row_scratch(self, bindings: Mapping[str, int]) -> tuple[int, int]:
        """Elements of the scratch of a kernel that reduces its rows' statistics (search.row_stats): ws2
        (float32) a mean and m2 (or a maximum) per row and N tile, ws3 (uint32) one ticket per row of
        tiles, zero before the launch and after it. (0, 0) for any other kernel."""
        if not self.row_stats:
            return 0, 0
        n, batch = (evaluate_dim(d, bindings) for d in self.extra)
        m, t = evaluate_dim(self.work, bindings), self.block
        return self.row_stats * batch * m * -(-n // t), batch * -(-m // t)

    def tail_tickets(self, bindings: Mapping[str, int]) -> int:
        """Elements of ws4 (uint32), one ticket per row of a kernel with a tail, zero before the launch
        and after it; 0 for any other kernel."""
        return evaluate_dim(self.work, bindings) // self.tail if self.tail else 0

    def geometry(self, bindings: Mapping[str, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        work = evaluate_dim(self.work, bindings)
        if self.mode == "tiles":
            n, batch = (evaluate_dim(d, bindings) for d in self.extra)
            t = self.block
            if work == 0 or n == 0 or batch == 0:
                return (0, 0, 0), (t, t, self.slices)
            grid_x = math.ceil(n / (t * self.cols)) * self.splits
            return (grid_x, math.ceil(work / t), batch), (t, t, self.slices)
        if self.mode == "block_per_output":
            return (work, 1, 1), (self.block, 1, 1)
        if self.mode == "columns":
            return (-(-work // WARP_OUTPUTS), 1, 1), (self.block, 1, 1)
        return (min(math.ceil(work / self.block), MAX_GRID_STRIDE_BLOCKS), 1, 1), (self.block, 1, 1)


SCRATCH = ("ws0", "ws1", "ws2", "ws3", "ws4")


def with_scratch(signature: KernelSignature, launch: Launch) -> KernelSignature:
    """The signature with its launch's scratch buffers after out0: a split launch's ws0 and ws1
    (Launch.scratch), a row-statistics kernel's ws2 and ws3 (Launch.row_scratch), a tail's ws4
    (Launch.tail_tickets); none otherwise."""
    params = tuple(p for p in signature.params if p.ident not in SCRATCH)
    scratch = ((Param("ws0", "float*"), Param("ws1", "unsigned int*")) if launch.splits > 1 else ()) + (
        (Param("ws2", "float*"), Param("ws3", "unsigned int*")) if launch.row_stats else ()) + (
        (Param("ws4", "unsigned int*"),) if launch.tail else ())
    if not scratch:
        return replace(signature, params=params)
    at = next(i for i, p in enumerate(params) if p.ident == "out0") + 1
    return replace(signature, params=params[:at] + scratch + params[at:])

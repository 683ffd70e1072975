"""Long sums: which running sums a thread compensates, and the template fields of one reduction loop.

A thread that adds n float32 values one after another rounds n times, and the errors add up: a block
of 256 threads summing 10**7 copies of 0.1 gave each thread 39,063 of them, and their mean came out
0.1000374 (NumPy's pairwise sum: 0.10000001). Every template already combines its threads' partial
results in a tree (log2 of the block) or in one pass over at most a tile (32) of them, so the long
chains are the per-thread ones. A chain that may be longer than SERIAL_SUM_LIMIT values is
compensated: Kahan's summation (Higham, "Accuracy and Stability of Numerical Algorithms", 4.3) keeps
what each addition rounded off in a second float and feeds it into the next, so the thread's error
is about 2u of the sum of magnitudes plus n u^2 of it, for n values and unit roundoff u = 2**-24:
one rounding for any n up to millions (`rc_sum_add` in the prelude). Not Neumaier's variant, which
adds the roundings up in their own float and applies them once at the end: that float is a plain
sum of n terms itself, and one thread summing 10**7 tenths got 1002001.75 from it (Kahan: 1000000).
It costs COMPENSATION_FLOPS more flops per value. Loops over a tile (the matmul's K loop,
the online softmax's sum and product) sum each tile plainly and add the tile's sum to a compensated
running sum: 3 more flops per tile, not per value. A maximum rounds nothing and is never compensated.

The limit, 128: NumPy's own pairwise sum adds blocks of 128 values (in 8 interleaved accumulators)
before its tree, and the longest chain a template caps (the streamed q . k, codegen.online) is 128.
A plain chain of 128 loses at most 127 units of roundoff, 7.6e-6 of the sum of magnitudes (the
float32 tolerance is 1e-4), and typically about sqrt(128) units: shorter loops stay plain and cost
nothing. A symbolic extent may be long, so it is compensated.

Sound only with IEEE additions done as written: the emulator's g++ flags have no -ffast-math
(exec.emu_build) and nvcc reassociates no float addition without --use_fast_math; the fused
multiply-add it may form only rounds a product into its first addition, which the compensation
tolerates (it corrects what that addition dropped).
"""
from __future__ import annotations

import math

import sympy

from ..ops.dtypes import DTYPES
from ..ops.primitives import Node
from ..symbolic.dims import Dim
from . import render_c

SERIAL_SUM_LIMIT = 128  # a thread adds at most this many values in one plain (uncompensated) chain
COMPENSATION_FLOPS = 3  # rc_sum_add's extra flops per value added (4 in all, against 1)


def long_chain(extent: Dim, stride: int = 1) -> bool:
    """Whether a thread that takes every `stride`-th of `extent` values may add more than
    SERIAL_SUM_LIMIT of them (a symbolic extent may)."""
    value = sympy.sympify(extent, strict=True)  # a dim: an int or an expression, never text
    if not value.is_number:
        return True
    return math.ceil(int(value) / stride) > SERIAL_SUM_LIMIT


def compensated(red: Node, extent: Dim, stride: int = 1) -> bool:
    """Whether the reduction `red`'s per-thread chain, `stride` apart over `extent` values, is compensated."""
    return red.op.name == "SumReduce" and DTYPES[red.dtype].is_float and long_chain(extent, stride)


def loop_fields(
    names, red: Node, statements: list[str], value: str, tree: tuple[str, str], stride: int
) -> dict:
    """One reduction loop of a template (reduce kernels, row kernel phases, matmul prologues): each
    thread takes every `stride`-th value of the row into `acc` (`statements` compute `value`), plainly
    or compensated (the `sums.cu.j2` macros read which), then partial results meet two at a time as
    `tree` names them."""
    extent = red.srcs[0].shape[red.attrs["axis"]]
    kind = DTYPES[red.dtype].kind
    return dict(
        what=names.label(red),
        ctype=render_c.compute_type(red.dtype),
        statements=statements,
        identity=render_c.reduce_identity(red.op, kind),
        value=value,
        combine=render_c.op_expr(red.op, "acc", value, kind=kind),
        tree=render_c.op_expr(red.op, *tree, kind=kind),
        compensated=compensated(red, extent, stride),
    )

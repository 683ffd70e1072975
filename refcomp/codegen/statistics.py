"""Single-pass row statistics: a layer norm's two sums over a row, in one pass by Welford's update.

The graph spells layer norm's statistics from primitives as

    S = SumReduce_k(X)                      the row's sum (mean = S / n)
    D = X + (S * c1 * c2 ...)               the deviations, the constants' product being -1 / n
    V = SumReduce_k(D * D)                  the sum of squared deviations (variance = V / n)

Read plainly that is two passes over each row, the second reading S. Welford's update (Welford,
"Note on a method for calculating corrected sums of squares and products", 1962) keeps a running
count, mean and sum of squared deviations M2 per thread in one pass, `delta = x - mean; mean +=
delta / count; M2 += delta * (x - mean)`, and the threads' summaries merge exactly (in real
arithmetic) by Chan, Golub and LeVeque's formula: with delta = mean_b - mean_a and n = n_a + n_b,
mean = mean_a + delta n_b / n and M2 = M2_a + M2_b + delta^2 n_a n_b / n. Then S = n mean and V = M2.
Unlike the one-pass sum of squares minus the squared sum, it does not cancel catastrophically when
the mean is large against the spread: float32 rounding differs from the two passes by a few ulp of
the row's values, not of their squares.

Soundness, checked here and by the matmul prologue's index analysis (codegen.tiled): S and V reduce
the same extent n along their axis, V's terms are D * D read at the same position, D reads X where S
does and the mean through Mul-by-constant steps from S at the thread's own row, and the constants
multiply to -1 / n.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import sympy

from ..ops.primitives import Edge, Node
from ..symbolic.dims import dims_equal, expand
from ..symbolic.index import index_of, unravel_within
from ..symbolic.view import contiguous_strides

RELATIVE_SLACK = 1e-6  # the constants' product may differ from -1/n by float32 rounding of 1/n


@dataclass(frozen=True)
class RowStatistics:
    """The nodes of a row's sum and sum of squared deviations (see the module)."""

    total: Node  # S
    squares: Node  # V
    square: Node  # D * D
    value: Edge  # D's read of X
    mean: Edge  # D's read of the mean, the first of `mean_steps`
    mean_steps: tuple  # the Mul-by-constant nodes from D's mean operand down to S, outermost first


def _is_minus_reciprocal(product: sympy.Expr, extent) -> bool:
    """product == -1 / extent: exactly for dims, up to float32's rounding of 1 / n for a number."""
    if product.is_number and sympy.sympify(extent).is_number:
        return abs(float(product) * int(extent) + 1.0) <= RELATIVE_SLACK
    return expand(product * extent + 1) == 0


def row_statistics(squares: Node) -> Optional[RowStatistics]:
    """The statistics `squares` (V) is the second of, with its S, or None (node by node: views are
    checked where a kernel reads them, `reads_match`)."""
    if squares.op.name != "SumReduce" or squares.srcs[0].node.op.name != "Mul":
        return None
    square = squares.srcs[0].node
    a, b = square.srcs
    deviation = a.node
    if b.node is not deviation or a.views != b.views or deviation.op.name != "Add":
        return None
    for value, mean in (deviation.srcs, deviation.srcs[::-1]):
        steps, product, node = [], sympy.Integer(1), mean.node
        while node.op.name == "Mul":
            constants = [e for e in node.srcs if e.constant is not None]
            if len(constants) != 1:
                break
            steps.append(node)
            product *= constants[0].constant
            node = next(e.node for e in node.srcs if e is not constants[0])
        total = node
        if total.op.name != "SumReduce" or not steps or total.srcs[0].node is not value.node:
            continue
        extent, axis = total.srcs[0].shape[total.attrs["axis"]], total.attrs["axis"]
        if (axis != squares.attrs["axis"] or not dims_equal(extent, squares.srcs[0].shape[axis])
                or not _is_minus_reciprocal(product, extent)):
            continue
        return RowStatistics(total, squares, square, value, mean, tuple(steps))
    return None


def reads_match(stats: RowStatistics, source_index: Sequence, row_position, ranges) -> bool:
    """Whether, at `source_index` of the row's reduced source (the kernel's (row..., r)), V's term reads
    D twice at one position, D reads X where S reads it, and D's mean reaches S at `row_position`,
    S's flat position for the thread's own row. Pure index arithmetic: nothing is emitted."""
    def same(a, b) -> bool:
        return a is not None and b is not None and expand(sympy.sympify(a) - sympy.sympify(b)) == 0

    def flat_at(edge: Edge, idx):
        flat, valid = index_of(edge.views, tuple(idx), ranges)
        return flat if valid is sympy.true else None

    def node_index(edge: Edge, idx):
        flat = flat_at(edge, idx)
        return None if flat is None else unravel_within(flat, edge.node.shape, ranges)

    square_idx = node_index(stats.squares.srcs[0], source_index)
    if square_idx is None:
        return False
    first, second = (flat_at(e, square_idx) for e in stats.square.srcs)
    if not same(first, second):
        return False
    d_idx = unravel_within(first, stats.square.srcs[0].node.shape, ranges)
    if not same(flat_at(stats.value, d_idx), flat_at(stats.total.srcs[0], source_index)):
        return False
    edge, idx = stats.mean, d_idx
    for step in stats.mean_steps:  # down the constant factors to S
        idx = node_index(edge, idx)
        if idx is None:
            return False
        edge = next(e for e in step.srcs if e.constant is None)
    return same(flat_at(edge, idx), row_position)


def stored_statistics(nodes: Sequence[Node], output: Node, out_index: Sequence, columns: object,
                      row: object, ranges) -> Optional[RowStatistics]:
    """The statistics S and V (`nodes`) of the rows of `output` that a matmul kernel stores, when that
    kernel may compute them as it stores (the matmul template's row-statistics end): S sums `output`
    along its last axis, which is the matmul's N axis alone (`out_index[-1]` is the thread's column,
    `columns` its extent), S's element for the thread's row lies at `row` (the template's batch x M +
    bm), and V is S's sum of squared deviations (row_statistics, reads_match). None otherwise."""
    if len(nodes) != 2 or any(n.dtype != "float32" for n in tuple(nodes) + (output,)):
        return None
    squares = next((n for n in nodes if row_statistics(n) is not None), None)
    stats = None if squares is None else row_statistics(squares)
    if stats is None or stats.total not in nodes or stats.total.srcs[0].node is not output:
        return None
    axis = stats.total.attrs["axis"]
    if axis != len(output.shape) - 1 or not dims_equal(output.shape[axis], columns):
        return None
    r = sympy.Symbol("r_stats", integer=True, nonnegative=True)
    ranges = {**ranges, r: columns}
    source = list(out_index[:-1]) + [r]
    rows = list(out_index[:-1])
    position = sum((i * s for i, s in zip(rows, contiguous_strides(stats.total.shape))), sympy.Integer(0))
    element = sum((i * s for i, s in zip(source, contiguous_strides(output.shape))), sympy.Integer(0))
    flat, valid = index_of(stats.total.srcs[0].views, tuple(source), ranges)
    if valid is not sympy.true or expand(flat - element) != 0:
        return None  # S reads the row of `output` the thread stores, in order
    if expand(position - row) != 0 or not reads_match(stats, source, position, ranges):
        return None
    return stats


"""Online softmax: a softmax over K that feeds a contraction over K, computed in the contraction's pass.

The graph spells softmax(S) @ B from primitives as

    M = MaxReduce_k(S)                      the row's maximum
    E = Exp2(c * (S + M * -1))              the weights, c > 0 (exp is exp2 of x * log2 e)
    L = SumReduce_k(E)                      the row's total
    P = E * R(L)                            R: the normaliser, Recip(L) or any function of L alone
    C = SumReduce_k(P * B)                  the contraction (the matmul template's a = P)

Read plainly that is three passes over S (M, then L, then C) and two stored row vectors. Because
e(s, m) = exp2(c (s - m)) satisfies e(s, m') = e(s, m) * e(m, m'), one pass suffices: keep the running
maximum m, and when a tile of K raises it to m', multiply the running total and the accumulators by
e(m, m') (Milakov and Gimelshein, "Online normalizer calculation for softmax", 2018; the same
recurrence is the heart of FlashAttention). At the end C = R(L) * sum_k E * B, as the reference's
sum of (E * R) * B, with the factor applied once (float32 rounding differs by a few ulp).

Soundness, checked here and by the kernel's index analysis: M and L reduce the same rows along the
contraction's K axis; E is exactly exp2 of a positive constant times (S - M), so the rescaling identity
holds and e(-inf, m) = 0 (a column whose every score so far is -inf adds nothing: the template's guard);
R reads nothing but L; P is E times R, read at the thread's own (row, k) and row.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Callable, Optional

import sympy

from ..ops.dtypes import DTYPES
from ..ops.primitives import ELEMENTWISE, Edge, Node
from ..symbolic.index import conjunction, index_of, less
from ..symbolic.view import ViewStack
from . import render_c
from .emit import Unfusable
from .fused import linear_index, same_edge, matmul_axes
from .kernels import lines_read_by
from .tiled import TiledContraction, sliced_problem
from .kernels import N_TILES, TILE, Kernel, Late, finish_kernel


@dataclass(frozen=True)
class OnlineSoftmax:
    """The nodes of softmax(S) @ B that the online kernel computes without storing (see the module)."""

    maximum: Node  # M
    total: Node  # L
    weight: Node  # E
    difference: tuple  # the nodes between S, M and E: M * -1, S + that, times c (when c != 1)
    normaliser: Node  # R
    probability: Node  # P

    @property
    def statistics(self) -> tuple:
        """M and L: what the kernel keeps per row instead of storing."""
        return self.maximum, self.total

    @property
    def nodes(self) -> tuple:
        return (self.maximum, *self.difference, self.weight, self.total, self.normaliser, self.probability)


def _constant(edge: Edge) -> Optional[float]:
    """A numeric Constant's value (one of the dims, such as 1 / T, is none here)."""
    value = edge.constant
    return float(value) if value is not None and value.is_number else None


def _other(node: Node, test: Callable[[Edge], bool]) -> Optional[tuple[Edge, Edge]]:
    """(the source that passes `test`, the other source) of a binary node, either order."""
    a, b = node.srcs
    return (a, b) if test(a) else (b, a) if test(b) else None


def _scaled_difference(node: Node) -> Optional[tuple[Node, tuple]]:
    """(M, the nodes of c * (S + M * -1)) when `node` is that with c > 0 and M = MaxReduce(S)."""
    chain = ()
    if node.op.name == "Mul":
        split = _other(node, lambda e: (_constant(e) or 0.0) > 0 and math.isfinite(_constant(e)))
        if split is None:
            return None
        chain, node = (node,), split[1].node
    if node.op.name != "Add":
        return None
    for negated, score in (node.srcs, node.srcs[::-1]):
        minus = negated.node
        if minus.op.name != "Mul" or _other(minus, lambda e: _constant(e) == -1.0) is None:
            continue
        maximum = _other(minus, lambda e: _constant(e) == -1.0)[1].node
        if maximum.op.name == "MaxReduce" and maximum.srcs[0].node is score.node:
            return maximum, (minus, node) + chain
    return None


def online_softmax(reduce: Node) -> Optional[OnlineSoftmax]:
    """The online-softmax parts of the contraction `reduce` (its operand a), or None."""
    if reduce.op.name != "SumReduce" or reduce.srcs[0].node.op.name != "Mul":
        return None
    probability = reduce.srcs[0].node.srcs[0].node
    if probability.op.name != "Mul":
        return None
    for weight_edge, norm_edge in (probability.srcs, probability.srcs[::-1]):
        weight, normaliser = weight_edge.node, norm_edge.node
        if weight.op.name != "Exp2" or normaliser.op.kind not in ELEMENTWISE:
            continue
        found = _scaled_difference(weight.srcs[0].node)
        sources = {s.node.id for s in normaliser.srcs if not s.node.op.literal}
        if found is None or len(sources) != 1:
            continue
        total = next(s.node for s in normaliser.srcs if not s.node.op.literal)
        maximum, difference = found
        if (total.op.name == "SumReduce" and total.srcs[0].node is weight
                and total.attrs["axis"] == maximum.attrs["axis"]):
            return OnlineSoftmax(maximum, total, weight, difference, normaliser, probability)
    return None


def streamed_scores(parts: OnlineSoftmax) -> tuple[Optional[Node], tuple]:
    """(S, the elementwise nodes from S to the scores) when the scores the maximum reads are an
    elementwise function of one matmul S = SumReduce_d(Q * K) (attention's q k^T, scaled and masked),
    else (None, ())."""
    found, chain, stack, seen = [], [], [parts.maximum.srcs[0].node], set()
    while stack:
        node = stack.pop()
        if node.id in seen or node.op.literal:
            continue
        seen.add(node.id)
        if node.op.kind in ELEMENTWISE:
            chain.append(node)
            stack.extend(s.node for s in node.srcs)
        elif node.op.name == "SumReduce" and matmul_axes(node) is not None:
            found.append(node)
    return (found[0], tuple(chain)) if len(found) == 1 else (None, ())


def _unit(dim) -> bool:
    return isinstance(dim, int) and dim == 1


def squeezed_index(index: list, shape, to_shape) -> Optional[list]:
    """`index` (a position in `shape`) as the same position in `to_shape`, when the two shapes are
    equal once their axes of extent 1 are dropped (a reshape that only adds or removes unit axes
    moves no element): unit axes of `to_shape` read 0. None when the shapes differ otherwise."""
    kept = [i for i, d in zip(index, shape) if not _unit(d)]
    if not same_edge([d for d in shape if not _unit(d)], [d for d in to_shape if not _unit(d)]):
        return None
    kept.reverse()
    return [sympy.Integer(0) if _unit(d) else kept.pop() for d in to_shape]


def _statistics_rows(parts: OnlineSoftmax, reduce: Node, rows: list, kept: list, axis: int) -> tuple:
    """(the rows of M and L as indices in M's shape, the axis M and L reduce), given the contraction's
    `rows` (the indices of its batch and M axes) and `kept` (their extents, K's at `axis`). M and L
    reduce the same rows along K; the softmax may keep unit axes the contraction drops or the
    reverse (decode attention: scores (B, H, 1, 1, W), one query per head, contracted as (B, H, 1, W)),
    a reshape that moves no element, so a row's index carries over axis by axis (unit axes at 0)."""
    maximum, total = parts.statistics
    source, s_axis = list(maximum.srcs[0].shape), maximum.attrs["axis"]
    if all(st.attrs["axis"] == axis and same_edge(st.srcs[0].shape, kept) for st in (maximum, total)):
        return rows, axis
    ours = [d for d in kept[:axis] if not _unit(d)]
    mapped = squeezed_index(list(rows), kept[:axis] + kept[axis + 1:], source[:s_axis] + source[s_axis + 1:])
    if (_unit(kept[axis]) or mapped is None
            or total.attrs["axis"] != s_axis or not same_edge(total.srcs[0].shape, source)
            or not same_edge([source[s_axis]], [kept[axis]])
            or not same_edge(ours, [d for d in source[:s_axis] if not _unit(d)])):  # K after the same rows
        raise Unfusable(
            f"{maximum.op.name}#{maximum.id} does not reduce the rows of {reduce.op.name}#{reduce.id} along K"
        )
    return mapped, s_axis


def n_tiles_of(n, tile: int, n_tiles: int) -> int:
    """The N tiles a block computes: `n_tiles`, at most N's (a symbolic N: `n_tiles`)."""
    return min(n_tiles, -(-n // tile)) if isinstance(n, int) else n_tiles


_READS_MEMORY = re.compile(r"\bin\d+\[|\bu\d+\b")  # a buffer's element, or an index variable's line


MAX_STREAMED_DEPTH = 128  # Q's rows and K's tile rows, this long, sit in shared memory (<= 33 KB at tile 32)


def _stream(tc: TiledContraction, scores: Node, at: Callable, axis: int, tile: int) -> dict:
    """The template's `qk` field: the streamed product's depth and how to load Q's and K's elements.
    S's keys must be its N axis (K does not vary along the rows) and S must have the scores' shape;
    S is then read as the thread's `qk`."""
    body = tc.body
    depth_axis = scores.attrs["axis"]
    depth = scores.srcs[0].shape[depth_axis]
    if not isinstance(depth, int) or depth > MAX_STREAMED_DEPTH:
        raise Unfusable(
            f"{scores.op.name}#{scores.id} sums {depth} values: at most {MAX_STREAMED_DEPTH} are streamed"
        )
    s_batch, s_m, s_n = matmul_axes(scores)
    key = axis + (1 if axis >= depth_axis else 0)  # the keys' axis in S's source
    if s_n != [key]:
        raise Unfusable(f"{scores.op.name}#{scores.id} does not have the keys as its N axis")
    dq, dk = body.index_var("dq", depth), body.index_var("dk", depth)
    kt = body.index_var("kt", tc.shape[tc.k_axis])

    def operand(which: int, k_sym, d_sym, zero: list, guard) -> tuple[list[str], str]:
        at_k = at(k_sym)
        src = at_k[:depth_axis] + [d_sym] + at_k[depth_axis:]
        src = [sympy.Integer(0) if a in zero else e for a, e in enumerate(src)]
        return tc.read(scores, which, src, "q" if which == 0 else "kt", guard)

    q_statements, q_value = operand(
        0, sympy.Integer(0), dq, s_n, conjunction(tc.tile_bound["bm"], less(dq, depth))
    )
    k_statements, k_value = operand(
        1, kt, dk, s_m, conjunction(less(kt, tc.shape[tc.k_axis]), less(dk, depth))
    )
    body.scalars[scores.id] = ("qk", linear_index(at(tc.ka), scores.shape))
    width = -(-depth // tile) * tile
    return dict(
        depth=depth,
        width=width,
        q_statements=q_statements,
        q_value=q_value,
        k_statements=k_statements,
        k_value=k_value,
    )


def softmax_matmul_kernel(
    name: str,
    output: Node,
    reduce: Node,
    names,
    inline: Callable[[Node], bool],
    online_ids=frozenset(),
    streamed_ids=frozenset(),
    tile: int = TILE,
    render: bool = True,
    b_along_k: bool = False,
    slices: int = 1,
    splits: int = 1,
    n_tiles: int = N_TILES,
) -> Kernel:
    """With S in `streamed_ids` (see streamed_scores), S = Q K^T is computed in the kernel, a tile of
    keys at a time: the scores are never read from memory (FlashAttention). With `splits` > 1, K is
    split across that many blocks per tile, and the last to finish combines their partial maxima, sums
    and accumulators (flash-decoding: a decode step's few rows get splits x the threads). With `n_tiles`
    > 1, a block computes that many neighbouring N tiles (at most N's), so the scores, and the K tiles
    they stream, are computed once for all of them."""
    if slices > 1:
        raise Unfusable(sliced_problem("softmax_matmul.cu.j2", 0, tile, slices))
    parts = online_softmax(reduce)
    if parts is None or not {parts.maximum.id, parts.total.id} <= set(online_ids):
        raise Unfusable(f"{reduce.op.name}#{reduce.id} does not read an online softmax")
    narrow = [n for n in parts.nodes + (reduce, reduce.srcs[0].node) if DTYPES[n.dtype].is_narrow]
    if (
        narrow
    ):  # its running maximum and sum are rescaled as they go: a 16-bit node's rounding has no place to happen
        raise Unfusable(
            f"{narrow[0].op.name}#{narrow[0].id} is {narrow[0].dtype}: "
            f"online softmax keeps float32 statistics"
        )
    scores, chain = streamed_scores(parts)
    if scores is None or scores.id not in set(streamed_ids):
        scores, chain = None, ()
    own = {n.id for n in parts.nodes + chain}
    tc = TiledContraction.of(reduce, names, lambda n: inline(n) or n.id in own)
    body, maximum, total = tc.body, parts.maximum, parts.total
    batch_axes, m_axes, n_axes = tc.axes
    # the rows of M and L are the contraction's batch and M axes; their reduced axis is its K
    kept = [a for a in range(len(tc.shape)) if a not in n_axes]
    rows = [tc.per_axis[a] for a in kept if a != tc.k_axis]
    rows, axis = _statistics_rows(parts, reduce, rows, [tc.shape[a] for a in kept], kept.index(tc.k_axis))
    row = linear_index(rows, maximum.shape)
    at = lambda k: rows[:axis] + [k] + rows[axis:]  # noqa: E731  (a row's element k, in S's shape)
    score_at, valid = index_of(maximum.srcs[0].views, at(tc.ka), body.ranges)
    # P = E * R must be read at this thread's (row, k) and row: then C = R(L) * sum_k E * B
    product = reduce.srcs[0].node
    flat, _ = index_of(reduce.srcs[0].views, tc.index(tc.ka, set(n_axes)), body.ranges)
    body.bind_compound = False
    p_flat, _ = index_of(product.srcs[0].views, body.unravel(flat, product.shape), body.ranges)
    p_idx = body.unravel(p_flat, parts.probability.shape)
    body.bind_compound = True
    w_edge, r_edge = (e for e in sorted(parts.probability.srcs, key=lambda e: e.node is not parts.weight))
    w_read, _ = index_of(w_edge.views, p_idx, body.ranges)
    r_read, _ = index_of(r_edge.views, p_idx, body.ranges)
    summand, _ = index_of(total.srcs[0].views, at(tc.ka), body.ranges)
    if valid is not sympy.true or sympy.expand(w_read - summand) != 0 or sympy.expand(r_read - row) != 0:
        raise Unfusable(
            f"{parts.probability.op.name}#{parts.probability.id} is not read at its own row and column"
        )

    qk = None
    if scores is not None:
        source, keys = list(maximum.srcs[0].shape), sympy.Symbol("keys")  # keys: where K lands in S
        in_s = squeezed_index(at(keys), source, scores.shape)
        if in_s is None or keys not in in_s:
            raise Unfusable(f"{scores.op.name}#{scores.id} does not have the scores' shape")
        if same_edge(scores.shape, source):
            qk = _stream(tc, scores, at, axis, tile)
        else:  # S without the scores' unit axes, or with more (see _statistics_rows)
            in_scores = lambda k: squeezed_index(at(k), source, scores.shape)  # noqa: E731
            qk = _stream(tc, scores, in_scores, in_s.index(keys), tile)
    tc.begin("a", conjunction(tc.tile_bound["bm"], tc.tile_bound["ka"]))
    score = body.value_at(maximum.srcs[0], at(tc.ka))
    score_statements = body.statements
    if scores is not None and scores.id not in body.scalars_read:
        raise Unfusable(
            f"the scores of {maximum.op.name}#{maximum.id} do not read {scores.op.name}#{scores.id} "
            f"at their own position"
        )

    def weight(s_name: str, guard) -> tuple[list[str], str]:
        """e(s, m_new) with S read as the C value `s_name`: the summand of L at this thread's column."""
        tc.begin("a", guard)
        body.scalars[maximum.srcs[0].node.id] = (s_name, score_at)
        body.scalars[maximum.id] = ("m_new", row)
        return body.statements, body.value_at(total.srcs[0], at(tc.ka))

    weight_statements, weight_value = weight("score", conjunction(tc.tile_bound["bm"], tc.tile_bound["ka"]))
    rescale_statements, rescale_value = weight("m_old", sympy.true)
    b_statements, b_value = tc.operand(1, "b")
    body.scalars[total.id] = ("l", row)
    tc.begin("epilogue", conjunction(tc.tile_bound["bm"], tc.tile_bound["bn"]))
    factor = body.value_at(Edge(parts.normaliser, ViewStack.of_buffer(parts.normaliser.shape)),
                           body.unravel(row, parts.normaliser.shape))
    # an empty K sums nothing: 0, as the reference's sum over no keys (not 0 * R(0), which is NaN)
    scaled_statements = body.statements + [render_c.value_decl("scaled", f"K > 0 ? acc * {factor} : 0.0f")]
    epilogue, result, _ = tc.epilogue(output, "scaled")
    epilogue = scaled_statements + epilogue
    streamed = () if scores is None else (scores.srcs[0].node, scores) + chain
    nodes = (reduce.srcs[0].node, reduce) + parts.nodes + streamed + (() if output is reduce else (output,))
    loads = (
        ([qk["k_value"]] + qk["k_statements"] if qk else score_statements + [score])
        + b_statements
        + [b_value]
    )
    fields = tc.fields(output, tile, b_along_k, loads, epilogue, result)
    del fields["load_index_lines"]  # the K (or score) loads and B's, per N tile, take theirs apart
    cols = n_tiles_of(tc.sizes["n"], tile, n_tiles)
    fields["launch"] = replace(fields["launch"], splits=splits, cols=cols, stats=True)
    k_loads = [qk["k_value"]] + qk["k_statements"] if qk else score_statements + [score]
    fields["k_index_lines"] = Late(lambda b: lines_read_by(b.used_index_lines(), k_loads))
    fields["b_index_lines"] = Late(lambda b: [
        line for line in lines_read_by(b.used_index_lines(), b_statements + [b_value])
        if line not in lines_read_by(b.used_index_lines(), k_loads)])
    lines = lambda texts: Late(lambda b: lines_read_by(b.used_index_lines(), texts))  # noqa: E731
    weight_lines = lines(weight_statements + rescale_statements)
    splittable = not _READS_MEMORY.search("\n".join(rescale_statements + [rescale_value]))
    if splits > 1 and not splittable:
        raise Unfusable(f"{maximum.op.name}#{maximum.id}: the combine of split partials rescales with "
                        f"e(m, m') alone, and this softmax's e reads memory")
    return finish_kernel(
        name,
        "matmul",
        "softmax_matmul.cu.j2",
        body,
        output,
        nodes,
        fields.pop("launch"),
        True,
        render=render,
        comment_extra=", softmax computed online"
        + (", scores streamed" if qk else "")
        + f", matmul tile {tile}",
        qk=qk,
        streamed=(qk["depth"], qk["width"]) if qk else (0, 0),
        q_index_lines=lines(qk["q_statements"] + [qk["q_value"]] if qk else []),
        score_index_lines=lines(score_statements + [score]),
        score_statements=score_statements,
        score_value=score,
        weight_statements=weight_statements,
        weight_value=weight_value,
        rescale_statements=rescale_statements,
        rescale_value=rescale_value,
        weight_index_lines=weight_lines,
        b_statements=b_statements,
        b_value=b_value,
        maximum=names.label(maximum),
        total=names.label(total),
        max_identity=render_c.reduce_identity(maximum.op),
        max_combine=render_c.op_expr(maximum.op, "m_new", "Ss[threadIdx.y][kk]"),
        split_max_combine=render_c.op_expr(maximum.op, "m_new", "m_split"),
        splits=splits,
        cols=cols,
        splittable=splittable,
        sum_combine=render_c.op_expr(total.op, "l", "w"),
        **fields,
    )

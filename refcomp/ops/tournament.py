"""The lowest k keys of each row, for a small k, by descending a tournament tree with gathers.

k rounds of row reductions read the whole row k times, and a network of log² n stages rewrites it
at each stage; here the row is read once. Bottom up, each node of a 4-ary tree holds the lowest key
below it: a minimum of 4 values, which code generation unrolls, so a level is one elementwise pass
over the level below (the first level above the elements is not stored: it would be the largest,
and the descent recomputes the few nodes it needs). Top down, the k lowest nodes of a level are found
by *counting*: a candidate's rank is how many candidates come before it in (key, position) order.
The k lowest nodes of a level lie below the k lowest of the level above (a node's key is one of its
leaves' keys, so a node outside those k has k lower nodes above it, hence k lower leaves), so a
level's candidates are the 4 k children of the nodes picked above, read by a Gather at computed
positions. The graph grows with log_4 n, and its largest count compares (4 k)² pairs.

Order: ties go to the lower position (`torch.sort(stable=True)`); `<` compares, so -0.0 ties 0.0.
NaN comes before every key (`nan_first`) or after, NaNs in position order. A node's key is the
minimum of its children's with NaN winning (`nan_first`: MaxReduce propagates NaN) or losing (NaN
only when every child is NaN), so nodes of equal keys rank by position exactly as their best leaves
do (a node covers consecutive positions). Padding comes last: +inf when NaN comes first, else NaN
at the highest positions.

Positions and ranks are exact float32 integers: the caller keeps rows x the padded row below 2^24.
Counting takes a reduction per candidate, a block of threads for at most 256 values each: the
ranks of three candidates share one float (8 bits each), so a third as many reductions count them.
What the m x m comparisons and the k x m picks read is stored once: the pairs are the table of the
gather that reads the picked ones, and the unpacked ranks go through a gather of their own (the
search would recompute them in every comparison, which it prices as free).
"""
from __future__ import annotations

import math

from .core import iota
from .elementwise import fmod, where
from .primitives import SHORT_REDUCE, make_node

ARITY = SHORT_REDUCE  # children per node: a node's minimum is unrolled into its level's pass
MAX_CANDIDATES = 256  # the most candidates counted at once: the top level, or ARITY k children
PACKED, DIGIT = 3, 256.0  # ranks per float and the base they are written in: 3 x 8 of float32's 24 bits


def sizes(n: int) -> list[int]:
    """The node counts of the levels, the top's first, down to the elements padded to a whole tree."""
    top, height = n, 0
    while top > MAX_CANDIDATES:
        top, height = -(-top // ARITY), height + 1
    return [top * ARITY ** level for level in range(height + 1)]


def _ordered(t):
    """1.0 where t is not NaN (NaN is neither below inf nor above -inf)."""
    return (t < math.inf) + (-math.inf < t)


def _parent(key, nan_first: bool):
    """Each node's key from its children's keys (..., n): (..., n / ARITY)."""
    children = key.reshape(tuple(key.shape[:-1]) + (key.shape[-1] // ARITY, ARITY))
    if nan_first:
        return children.amin(-1)  # NaN wins
    ordered = _ordered(children)
    return where(ordered.amax(-1), where(ordered, children, math.inf).amin(-1), math.nan)


def _gather(table, ids, width: int):
    """Rows of `width` of `table` (flattened) at the float ids (rows, m): (rows, m, width)."""
    flat = table.reshape((-1, width))
    return type(table).from_node(make_node("Gather", (flat.edge, ids.edge)))


class _Counting:
    """Ranks by counting, and the nodes every level's count shares: each row's number, the packing
    weights, the slots to fill."""

    def __init__(self, rows: int, count: int, nan_first: bool, size: int):
        self.nan_first, self.size = nan_first, size
        self.row = iota((rows, 1), 0)
        q = iota((PACKED,), 0)
        self.weight = where(q < 0.5, DIGIT * DIGIT, where(q < 1.5, DIGIT, 1.0))  # DIGIT^(PACKED - 1 - q)
        self.slot = iota((count, 1), 0)
        self.spread = {}  # (m, stride) -> ids (rows, m): position + row * stride, shared by the levels

    def ids(self, m: int, stride: int):
        """Flat ids of m positions in each row of a table of `stride` per row (one node for all levels)."""
        if (m, stride) not in self.spread:
            self.spread[m, stride] = iota((self.row.shape[0], m), 1) + self.row * float(stride)
        return self.spread[m, stride]

    def pairs(self, key, position):
        """(rows, m, 2): each candidate's key and index, ordered lexicographically. A NaN's key becomes
        -inf (+inf) and its index moves by -size (+size): before (after) every other key."""
        ordered = _ordered(key)
        key = where(ordered, key, -math.inf if self.nan_first else math.inf)
        index = where(ordered, position, position + float(-self.size if self.nan_first else self.size))
        return where(iota((2,), 0) < 0.5, key.unsqueeze(-1), index.unsqueeze(-1))

    def ranks(self, pairs):
        """(rows, m): how many candidates come before each. Counted PACKED to a float (candidate
        PACKED g + q adds DIGIT^(PACKED - 1 - q) to float g for each), then unpacked and gathered."""
        rows, m, _ = pairs.shape
        groups = -(-m // PACKED)
        mine = pairs
        if groups * PACKED != m:  # filler candidates: nothing comes before them, their ranks go unread
            mine = pairs.pad([(0, 0), (0, groups * PACKED - m), (0, 0)], value=-math.inf)
        mine = mine.reshape((rows, groups, PACKED, 1, 2))
        other = pairs.reshape((rows, 1, 1, m, 2))
        key, index, other_key, other_index = mine[..., 0], mine[..., 1], other[..., 0], other[..., 1]
        weight = self.weight.reshape((PACKED, 1))
        before = where(
            other_key < key, weight, where(key < other_key, 0.0, where(other_index < index, weight, 0.0))
        )
        packed = before.sum(2).sum(-1).unsqueeze(-1)  # (rows, groups, 1)
        ranks = fmod((packed - fmod(packed, self.weight)) * (1.0 / self.weight), DIGIT)
        return _gather(ranks, self.ids(m, groups * PACKED), 1).reshape((rows, m))

    def pick(self, key, position):
        """(key, index) (rows, count) of the candidates of rank 0, 1, ..., count - 1."""
        pairs = self.pairs(key, position)
        m = pairs.shape[1]
        rank = self.ranks(pairs).unsqueeze(-2)  # (rows, 1, m)
        at = where(rank < self.slot + 0.5, self.slot - 0.5 < rank, 0.0)
        chosen = (at * iota((m,), 0)).sum(-1)  # (rows, count): which candidate
        picked = _gather(pairs, chosen + self.row * float(m), 2)
        return picked[..., 0], picked[..., 1]


def lowest(t, sign: float, count: int, nan_first: bool):
    """(indices, values) (rows, count): the `count` lowest keys `sign * t` of each row of t (rows, n),
    in order, and their positions. Needs 1 <= count <= n, and count <= MAX_CANDIDATES / ARITY unless
    n <= MAX_CANDIDATES."""
    rows, n = t.shape
    counts = sizes(n)
    size, height = counts[-1], len(counts) - 1
    past = math.inf if nan_first else math.nan
    padded = t.pad([(0, 0), (0, size - n)]) if size != n else t

    def leaves(values, position):
        return values * sign if size == n else where(position < n - 0.5, values * sign, past)

    keys = [leaves(padded, iota((size,), 0))]  # the elements' keys, then each level's; the top's last
    while len(keys) < len(counts):
        keys.append(_parent(keys[-1], nan_first))
    counting = _Counting(rows, count, nan_first, size)
    ids, above = counting.row, 1  # rows of the table below: every top node (one table row per row)
    for level in range(height, -1, -1):
        nodes = counts[height - level]
        width = nodes // above  # candidates per node picked above
        first = (ids - counting.row * float(above)).unsqueeze(-1) * float(width)  # (rows, picked, 1)
        position = (first + iota((width,), 0)).reshape((rows, -1))
        if level == 1 and height > 1:  # not stored: the keys of its nodes from their leaves
            leaf = (first * float(ARITY) + iota((width * ARITY,), 0)).reshape((rows, -1))
            key = _parent(leaves(_gather(padded, ids, width * ARITY).reshape((rows, -1)), leaf), nan_first)
        elif level == 0:
            key = leaves(_gather(padded, ids, width).reshape((rows, -1)), position)
        else:
            key = _gather(keys[level], ids, width).reshape((rows, -1))
        key, index = counting.pick(key, position)
        nan = index < -0.5 if nan_first else index > size - 0.5  # (padding is never picked)
        position = where(nan, index + float(size if nan_first else -size), index)
        if level == 0:
            return position, where(nan, math.nan, key * sign)
        ids, above = position + counting.row * float(nodes), nodes

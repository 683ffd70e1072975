"""The lowest k elements of each row by k rounds of row maxima: the graph grows with k, not the row.

Keys and distinct indices (rows, n), ordered lexicographically, as the bitonic network orders them. Each round reads the whole row twice, as two reductions that the search can
make row kernels of: with the last element picked (m, q), negated so that the lowest becomes the
highest,

1. `after`: the elements that come after (m, q), key < m or key = m and index < q (negated);
2. `m' = max(where(after, key, -inf))`, the next key;
3. `q' = max(where(after and key = m', index, -inf))`, the first of the elements holding it.

Thirteen nodes a round whatever the row's length (714 in all for k = 50), against O(n log² k) work in
the network's stages; for a small k the row passes cost less than the network's stages (n k work).
"""
from __future__ import annotations

import math

from .core import constant, iota
from .elementwise import where


def lowest_by_rounds(key, index, count: int):
    """The `count` lowest (key, index) pairs of each row of `key` and `index` (rows, n), in order:
    (keys, indices), each (rows, count)."""
    key, index = -key, -index  # the lowest pair is the highest of the negated pair
    minus_inf, one, zero = constant(-math.inf), constant(1.0), constant(0.0)
    slot, other = iota((count, count), 0), iota((count, count), 1)
    eye = (slot < other + 0.5) * (other < slot + 0.5)  # eye[r]: 1.0 at slot r
    m = q = keys = indices = None
    for r in range(count):
        if m is None:
            after, candidates = None, key
        else:
            after = where(key < m, one, where(m < key, zero, index < q))
            candidates = where(after, key, minus_inf)
        m = candidates.amax(-1, keepdim=True)
        holders = index if after is None else where(after, index, minus_inf)
        q = where(key < m, minus_inf, holders).amax(-1, keepdim=True)
        if keys is None:
            shape = key.shape[:-1] + (count,)
            keys, indices = m.broadcast_to(shape), q.broadcast_to(shape)
        else:
            keys, indices = where(eye[r], m, keys), where(eye[r], q, indices)
    return -keys, -indices

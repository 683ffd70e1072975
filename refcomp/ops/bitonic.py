"""A bitonic sorting network over views: four elementwise nodes per compare-exchange stage.

Every element carries a key and its original index, compared lexicographically (key, then index).
The indices are distinct, so no two elements tie and the network's result is the stable order.
Rows live in one tensor of two *fields*, the keys and then the indices: (2, rows, size). A stage
at distance j pairs positions that differ in bit log2(j) only, so it views the row as (above, 2,
below j) with that bit as an axis of two: the partner is a flip of the axis and either half of a
pair an index on it, so every view is a per-axis affine map of a contiguous buffer. (Splitting
every bit of the position at once makes each fused read unravel a dozen axes, which makes code
generation, and the search's legality checks, several times slower.) A stage builds:

1. `below = partner < self`, one LessThan over both fields;
2. `score = where(below[key], 2, below[index])`: of a pair (a, b), a's (key, index) is the larger
   exactly when b's score < a's score, since the index decides only between equal keys;
3. `swap = score[b] < score[a]`, over the pairs;
4. `where(swap, partner, self)` over both fields.

Batcher's network sorts alternate blocks descending before merging them. Here every comparator
ascends: a block meant to descend holds its keys and indices negated (negation reverses the
lexicographic order exactly), and one multiply by a +-1 pattern per merge re-signs the blocks when
their direction changes. Sorting `size` (a power of two) values thus takes log2(size)(log2(size)
+ 1) / 2 stages of four nodes and log2(size) multiplies: 353 nodes for 4,096 with the keys. Keys are
never NaN: the caller maps NaN to an infinity and orders the NaNs among the infinities by their index.

`select` keeps the lowest `block` elements of every row without sorting the rest: sorted blocks of
`block` alternate ascending and descending, so two neighbours form a bitonic sequence whose
element-wise lower half holds the lowest `block` of both (Batcher's half-cleaner, which drops the
bit log2 block); it is bitonic again and log2(block) stages sort it. Each such level halves the
data, so the lowest k of n take O(log² k + log(n / k) log k) stages (the bitonic top-k of Shanbhag,
Pirk and Madden, "Efficient top-k query processing on massively parallel hardware", SIGMOD 2018).
"""
from __future__ import annotations

from typing import Optional

from .core import constant, iota
from .elementwise import where


def _split(fields, bits):
    """The fields (2, rows, size) with the given bits of the position (highest first) split out as
    axes of 2: (2, rows, above, 2, between, ..., 2, below). Returns the view and each bit's axis."""
    _, rows, size = fields.shape
    shape, axes, top = [2, rows], {}, size
    for bit in bits:
        shape += [top // (2 << bit), 2]
        axes[bit] = len(shape) - 1
        top = 1 << bit
    return fields.reshape(tuple(shape) + (top,)), axes


def _pick(t, axis: int, value: int):
    index = [slice(None)] * t.ndim
    index[axis] = value
    return t[tuple(index)]


def stages(n: int, count: int) -> int:
    """How many stages `Network.sorted(count)` runs on rows of n."""
    size, block = (1 << max(m - 1, 0).bit_length() for m in (n, count))
    block = min(block, size)
    sort = block.bit_length() * (block.bit_length() - 1) // 2
    return sort + (size.bit_length() - block.bit_length()) * block.bit_length()


class Network:
    """The stages over fields (2, rows, size). `sign`: the bit whose set positions hold negated
    fields (their blocks descend), or None."""

    def __init__(self, fields):
        self.fields, self.sign = fields, None
        self.two = constant(2.0)
        self.flip_sign = iota((2,), 0) * -2.0 + 1.0  # (1, -1)
        self.flip_signs = self.flip_sign.unsqueeze(1) * self.flip_sign  # (-1) ** (x + y)

    @property
    def size(self) -> int:
        return self.fields.shape[2]

    def resign(self, bit: Optional[int]) -> None:
        """Negate the fields where the sign pattern changes: from bit `self.sign` to bit `bit`."""
        old, self.sign = self.sign, bit
        bits = sorted({b for b in (old, bit) if b is not None}, reverse=True)
        if old == bit or not bits:
            return
        view, axes = _split(self.fields, bits)
        pattern = self.flip_sign if len(bits) == 1 else self.flip_signs
        if len(bits) == 2:
            pattern = pattern.reshape((2, 1, 2))
        self.fields = (view * pattern.reshape(pattern.shape + (1,))).reshape(self.fields.shape)

    def _swaps(self, view, axis: int):
        """(1.0 on each pair (a, b) of positions differing in the bit on `axis` whose a is the larger,
        over the pairs: that axis dropped; the partners' view)."""
        partner = view.flip(axis)
        below = partner < view
        score = where(below[0], self.two, below[1])
        return _pick(score, axis - 1, 1) < _pick(score, axis - 1, 0), partner

    def stage(self, bit: int) -> None:
        """Compare-exchange every pair of positions that differ in `bit`, the lower first."""
        view, axes = _split(self.fields, [bit])
        swap, partner = self._swaps(view, axes[bit])
        self.fields = where(swap.unsqueeze(axes[bit] - 1), partner, view).reshape(self.fields.shape)

    def merge(self, k: int) -> None:
        """Sort each bitonic block of k: ascending where bit log2(k) of the position is 0, else
        descending (ascending when the block is the whole row)."""
        self.resign(k.bit_length() - 1 if k < self.size else None)
        j = k // 2
        while j >= 1:
            self.stage(j.bit_length() - 1)
            j //= 2

    def sort_blocks(self, block: int) -> None:
        """Sort every block of `block` positions (ascending and descending in turn)."""
        k = 2
        while k <= block:
            self.merge(k)
            k *= 2

    def keep_lower(self, block: int) -> None:
        """Of each two neighbouring blocks (ascending, then descending), the lower `block` elements as
        one bitonic block: half the data, the bit log2(block) dropped."""
        self.resign(None)
        bit = block.bit_length() - 1
        view, axes = _split(self.fields, [bit])
        swap, _ = self._swaps(view, axes[bit])
        low, high = _pick(view, axes[bit], 0), _pick(view, axes[bit], 1)
        self.fields = where(swap, high, low).reshape(self.fields.shape[:2] + (self.size // 2,))

    def sorted(self, count: int):
        """The lowest `count` elements of each row in order, as fields (2, rows, count): the whole
        row sorted, or (for a count of at most half the row) selected block by block."""
        block = 1 << max(count - 1, 0).bit_length()
        self.sort_blocks(min(block, self.size))
        while self.size > block:
            self.keep_lower(block)
            self.merge(block)
        self.resign(None)
        return self.fields[:, :, :count]

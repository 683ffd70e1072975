"""einsum and triangles, built from the primitives: views, Mul, SumReduce, Iota and Where.

`einsum` lines every operand up on the equation's letters (a repeated letter within one operand is
its diagonal, a strided view; a letter an operand lacks is a broadcast axis), multiplies them and sums
the letters the output drops — the same SumReduce(Mul(...)) that `matmul` builds, so the search sees
a two-operand contraction over one letter as the matmul it is.
"""
from __future__ import annotations

import string

from ..errors import ShapeError
from ..symbolic.dims import dims_equal
from ..symbolic.view import contiguous_strides
from .core import iota, keep_bool, lift, widened
from .elementwise import where


def _parse(equation: str, ndims: list[int]) -> tuple[list[str], str]:
    """Each operand's letters and the output's, with '...' spelled out as capital letters."""
    if not isinstance(equation, str):
        raise ShapeError(f"einsum: the equation must be a string, got {type(equation).__name__}")
    text = equation.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(ndims):
        raise ShapeError(f"einsum {equation!r}: {len(terms)} operand term(s) for {len(ndims)} operand(s)")
    spare = iter(string.ascii_uppercase)
    ellipsis_rank = max(
        (n - len(t.replace("...", "")) for t, n in zip(terms, ndims) if "..." in t), default=0
    )
    broadcast = "".join(next(spare) for _ in range(ellipsis_rank))
    letters = []
    for term, ndim in zip(terms, ndims):
        named = term.replace("...", "")
        if named and not (named.isalpha() and named.islower()) or term.count("...") > 1:  # '' is a scalar
            raise ShapeError(
                f"einsum {equation!r}: term {term!r} must be lowercase letters and at most one '...'"
            )
        if "..." in term:
            own = ndim - len(named)
            if own < 0:
                raise ShapeError(
                    f"einsum {equation!r}: term {term!r} names more axes than its operand's {ndim}"
                )
            term = term.replace("...", broadcast[ellipsis_rank - own:])
        if len(term) != ndim:
            raise ShapeError(
                f"einsum {equation!r}: term {term!r} names {len(term)} axes, but its operand has {ndim}"
            )
        letters.append(term)
    if not arrow:  # implicit output: the broadcast axes, then the letters used once, alphabetically
        counts = "".join(letters)
        output = broadcast + "".join(sorted(c for c in set(counts) if c.islower() and counts.count(c) == 1))
    else:
        if not output.replace("...", "").isalpha() and output.replace("...", ""):
            raise ShapeError(f"einsum {equation!r}: the output {output!r} must be letters and '...'")
        output = output.replace("...", broadcast)
        if len(set(output)) != len(output) or not set(output) <= set("".join(letters)):
            raise ShapeError(f"einsum {equation!r}: each output letter must appear once, and in some operand")
    return letters, output


def _diagonal(t, term: str):
    """The operand with each repeated letter taken once (its diagonal), and its letters."""
    unique = "".join(dict.fromkeys(term))
    if unique == term:
        return t, term
    for c in unique:
        sizes = [t.shape[i] for i, x in enumerate(term) if x == c]
        if not all(dims_equal(s, sizes[0]) for s in sizes):
            raise ShapeError(f"einsum: letter {c!r} repeats with sizes {sizes} in one operand")
    base = t.contiguous()
    strides = contiguous_strides(t.shape)
    shape = tuple(t.shape[term.index(c)] for c in unique)
    return base.as_strided(
        shape, tuple(sum(s for s, x in zip(strides, term) if x == c) for c in unique)
    ), unique


def einsum(equation: str, *operands):
    """torch.einsum / np.einsum: einsum("bij,bjk->bik", a, b); '...' broadcasts like NumPy."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    tensors = [lift(t) for t in operands]
    if not tensors:
        raise ShapeError(f"einsum {equation!r}: no operands")
    letters, output = _parse(equation, [t.ndim for t in tensors])
    order = "".join(dict.fromkeys("".join(letters)))  # every letter, in order of first use
    sizes: dict = {}
    aligned = []
    for t, term in zip(tensors, letters):
        t, term = _diagonal(t, term)
        for c, n in zip(term, t.shape):  # a letter's size is its one size other than 1 (1 broadcasts)
            if c in sizes and not any(dims_equal(a, b) for a, b in ((sizes[c], n), (n, 1), (sizes[c], 1))):
                raise ShapeError(f"einsum {equation!r}: letter {c!r} has sizes {sizes[c]} and {n}")
            if c not in sizes or dims_equal(sizes[c], 1):
                sizes[c] = n
        mine = [c for c in order if c in term]
        t = t.permute(*[term.index(c) for c in mine]) if mine != list(term) else t
        aligned.append(t.reshape(tuple(t.shape[mine.index(c)] if c in mine else 1 for c in order)))
    aligned, dtype = widened(*aligned)
    product = aligned[0]
    for t in aligned[1:]:
        product = product * t
    product = product.broadcast_to(tuple(sizes[c] for c in order))
    dropped = [i for i, c in enumerate(order) if c not in output]
    kept = [c for c in order if c in output]
    out = (product.sum(tuple(dropped)) if dropped else product).to(dtype)
    return out.permute(*[kept.index(c) for c in output]) if kept != list(output) else out


class LinalgMixin:
    __slots__ = ()

    def _triangle(self, keep_upper: bool, diagonal: int):
        if self.ndim < 2:
            raise ShapeError(
                f"{'triu' if keep_upper else 'tril'} of {self.label}: needs at least 2 axes, has {self.ndim}"
            )
        if not isinstance(diagonal, int) or isinstance(diagonal, bool):
            raise ShapeError(f"the diagonal offset must be an int, got {diagonal!r}")
        square = self.shape[-2:]
        offset = iota(square, 1) - iota(square, 0)  # column - row
        keep = offset >= float(diagonal) if keep_upper else offset <= float(diagonal)
        return keep_bool(where(keep, self, 0.0), self)

    def tril(self, diagonal: int = 0):
        """torch.tril: the lower triangle of the last two axes (column - row <= diagonal), zeros above."""
        return self._triangle(False, diagonal)

    def triu(self, diagonal: int = 0):
        """torch.triu: the upper triangle of the last two axes (column - row >= diagonal), zeros below."""
        return self._triangle(True, diagonal)

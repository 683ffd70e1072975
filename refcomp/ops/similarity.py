"""torch.nn.functional's cosine_similarity and pairwise_distance, with PyTorch's epsilons."""
from __future__ import annotations

from ..errors import ShapeError
from .core import broadcast, computed_in_float32, lift
from .provenance import user_op


@user_op
@computed_in_float32
def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """The sum along `dim` (the operands broadcast) of x1 / |x1| times x2 / |x2|, each norm at least
    eps, as PyTorch computes it (a norm whose square underflows is eps, not the product's)."""
    a, b = broadcast(lift(x1), lift(x2), "cosine_similarity")
    axis = a._axis(dim)

    def unit(v):
        return v / (v * v).sum(axis, keepdim=True).maximum(eps * eps).sqrt()

    return (unit(a) * unit(b)).sum(axis)


@user_op
@computed_in_float32
def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """The p-norm of x1 - x2 + eps along the last axis, as PyTorch adds eps to the difference."""
    a, b = broadcast(lift(x1), lift(x2), "pairwise_distance")
    if a.ndim == 0:
        raise ShapeError(f"pairwise_distance of {a.label}: the operands need an axis")
    return (a - b + eps).norm(p, -1, keepdim)

"""torch.* functions that refcomp has as Tensor methods: `rc.exp(x)` is `x.exp()`, and every argument
after the tensor is the method's (PyTorch's signatures agree). One table, so each meaning stays in its
method; `mm` and `bmm` add PyTorch's rank checks to matmul. The dtype names PyTorch users write
(`rc.float32`, `rc.int64`, `rc.bool`) are strings: one refcomp does not support is refused where it
is used, with the types it does.
"""
from __future__ import annotations

from ..errors import ShapeError
from ..symbolic.dims import dims_equal
from . import names
from .core import lift
from .provenance import user_op

METHODS = names.METHODS
DTYPES = {name: name for name in names.DTYPES}


def _function(name: str):
    def call(input, *args, **kwargs):
        return getattr(lift(input), name)(*args, **kwargs)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"torch.{name}(input, ...): `input.{name}(...)`, the Tensor method."
    return call


FUNCTIONS = {name: _function(name) for name in METHODS}


@user_op
def mm(input, mat2):
    """torch.mm: the product of two 2-D matrices (matmul without broadcasting)."""
    a, b = lift(input), lift(mat2)
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"mm takes two 2-D matrices, got {a.label} and {b.label} (matmul broadcasts)")
    return a @ b


@user_op
def bmm(input, mat2):
    """torch.bmm: a batch of matrix products, both operands 3-D with the same batch."""
    a, b = lift(input), lift(mat2)
    if a.ndim != 3 or b.ndim != 3 or not dims_equal(a.shape[0], b.shape[0]):
        raise ShapeError(
            f"bmm takes two 3-D batches of matrices of one batch size, got {a.label} and {b.label} "
            f"(matmul broadcasts)"
        )
    return a @ b


FUNCTIONS.update(mm=mm, bmm=bmm)

"""Activation functions with torch.nn.functional's names, signatures and edge behaviour.

gelu, relu, silu and the softmax family are the Tensor methods of the same names called as functions
(dropout draws a random mask: ops.random_tensors).

The exponential ones take expm1 of min(x, 0) only (elu, selu, celu), so the branch not taken never
overflows; softplus is relu(x) + log1p(exp(-|x|)), which neither overflows nor loses its small
tail; the hard ones are clips. The ONNX importer builds its operators of the same names from these.
"""
from __future__ import annotations


from ..errors import ShapeError
from .core import computed_in_float32, lift
from .elementwise import where
from .provenance import user_op

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _negative_part_expm1(x):
    return x.minimum(0.0).expm1()


@user_op
@computed_in_float32
def leaky_relu(x, negative_slope: float = 0.01):
    x = lift(x)
    return x.relu() + negative_slope * x.minimum(0.0)


@user_op
@computed_in_float32
def elu(x, alpha: float = 1.0):
    x = lift(x)
    return x.relu() + alpha * _negative_part_expm1(x)


@user_op
@computed_in_float32
def selu(x):
    x = lift(x)
    return SELU_SCALE * (x.relu() + SELU_ALPHA * _negative_part_expm1(x))


@user_op
@computed_in_float32
def celu(x, alpha: float = 1.0):
    if alpha == 0.0:
        raise ShapeError("celu: alpha must be non-zero (it divides x)")
    x = lift(x)
    return x.relu() + alpha * _negative_part_expm1(x * (1.0 / alpha))


@user_op
@computed_in_float32
def softplus(x, beta: float = 1.0, threshold: float = 20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (PyTorch's linear tail)."""
    x = lift(x)
    bx = x * beta if beta != 1.0 else x
    smooth = bx.relu() + (-bx.abs()).exp().log1p()
    return where(bx > threshold, x, smooth * (1.0 / beta) if beta != 1.0 else smooth)


@user_op
@computed_in_float32
def mish(x):
    x = lift(x)
    return x * softplus(x).tanh()


@user_op
def relu6(x):
    return lift(x).clip(0.0, 6.0)


@user_op
def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    return lift(x).clip(min_val, max_val)


@user_op
@computed_in_float32
def hardsigmoid(x):
    return relu6(lift(x) + 3.0) * (1.0 / 6.0)


@user_op
@computed_in_float32
def hardswish(x):
    x = lift(x)
    return x * hardsigmoid(x)


@user_op
@computed_in_float32
def logsigmoid(x):
    """log(sigmoid(x)) = -softplus(-x), finite for every finite x."""
    return -softplus(-lift(x))


@user_op
@computed_in_float32
def softsign(x):
    x = lift(x)
    return x / (1.0 + x.abs())


@user_op
def tanh(input):
    return lift(input).tanh()


@user_op
def sigmoid(input):
    return lift(input).sigmoid()


@user_op
@computed_in_float32
def glu(input, dim: int = -1):
    """The gated linear unit: the first half of `dim` times the sigmoid of the second."""
    x = lift(input)
    axis = x._axis(dim)
    n = x.shape[axis]
    if not isinstance(n, int) or n % 2:
        raise ShapeError(f"glu of {x.label}: axis {axis} must have an even length, not {n}")
    first, second = x.split(n // 2, axis)
    return first * second.sigmoid()


@user_op
def gelu(input, *, approximate: str = "none"):
    return lift(input).gelu(approximate)


@user_op
def relu(input, inplace: bool = False):
    return lift(input).relu()


@user_op
def silu(input, inplace: bool = False):
    return lift(input).silu()


def _softmax_dim(x, dim, who: str):
    if dim is None:
        raise ShapeError(
            f"{who} of {x.label}: give dim (PyTorch's choice without one, 0 or 1 by the number of axes, "
            f"is deprecated)"
        )
    return dim


@user_op
def softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    x = lift(input)
    return x.softmax(_softmax_dim(x, dim, "softmax"), dtype)


@user_op
def log_softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    x = lift(input)
    return x.log_softmax(_softmax_dim(x, dim, "log_softmax"), dtype)


@user_op
def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    x = lift(input)
    return x.softmin(_softmax_dim(x, dim, "softmin"), dtype)

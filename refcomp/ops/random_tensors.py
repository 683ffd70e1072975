"""Random tensors under PyTorch's names: rand, randn, randint, normal, bernoulli, multinomial, dropout.

Each draw is a graph of primitives over `philox.random_bits`, so the reference, the emulator and CUDA
give bit-identical values for the same generator, seed and shape (a seed tensor fed at run time
included). The values are not torch's: torch's own CPU and CUDA streams differ from each other too;
what matches torch is each distribution, its dtype and its edge behaviour (tests/test_random.py).
Integers (randint, multinomial's indices) are exact float32 values, as everywhere in refcomp.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import ShapeError
from . import names
from .core import TensorCore, broadcast_shape, dtype_name, is_bool_dtype, lift
from .creation import size_of, is_integer_dtype
from .elementwise import fmod, minimum, where
from .philox import MAX_ELEMENTS, random_bits
from .portable_math import cos_turns, log_unit
from .provenance import user_op

UNIT = 2.0 ** -24  # one step of a 24-bit draw in [0, 1)
MANTISSA_BITS = {"float32": 24, "float16": 11, "bfloat16": 8}


def _float_dtype(dtype, who: str) -> str:
    name = "float32" if dtype is None else dtype_name(dtype, who)
    if name not in MANTISSA_BITS:
        raise ShapeError(f"{who}: dtype {name} is not a floating type (PyTorch refuses it too)")
    return name


def _uniform(bits, dtype: str):
    """A 24-bit integer as a uniform value in [0, 1) of `dtype`: its top mantissa bits, so rounding to a
    16-bit type never reaches 1.0 (as torch's uniform keeps [0, 1))."""
    drop = 2.0 ** (24 - MANTISSA_BITS[dtype])
    kept = bits if drop == 1.0 else bits - fmod(bits, drop)
    value = kept * UNIT
    return value if dtype == "float32" else value.to(dtype)


def _floor(x):
    """floor of a non-negative value, exactly."""
    return x - fmod(x, 1.0)


@user_op
def rand(*size, generator=None, dtype=None):
    """torch.rand: uniform in [0, 1) on a grid of 2**-24 (2**-11 in float16, 2**-8 in bfloat16)."""
    dtype = _float_dtype(dtype, "rand")
    bits, _ = random_bits(size_of(size), generator)
    return _uniform(bits, dtype)


@user_op
def randn(*size, generator=None, dtype=None):
    """torch.randn: standard normal by Box-Muller, sqrt(-2 ln u1) cos(2 pi u2), from one draw's two
    24-bit halves (u1 in (0, 1], so the logarithm is finite: |z| <= 5.8)."""
    dtype = _float_dtype(dtype, "randn")
    first, second = random_bits(size_of(size), generator)
    radius = (log_unit((first + 1.0) * UNIT) * -2.0).sqrt()
    value = radius * cos_turns(second * UNIT)
    return value if dtype == "float32" else value.to(dtype)


@user_op
def randint(*args, generator=None, dtype=None, size=None):
    """torch.randint(high, size) or (low, high, size): integers uniform in [low, high), exact float32 values
    (refcomp's integers; a float dtype rounds them to it). low + floor(u (high - low)) with u on the
    2**-24 grid, so a range of n integers is uniform to within n 2**-24."""
    if size is not None:
        args = (*args, size)
    if len(args) == 2:
        low, (high, shape) = 0, args
    elif len(args) == 3:
        low, high, shape = args
    else:
        raise ShapeError(f"randint takes (high, size) or (low, high, size), got {len(args)} arguments")
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (low, high)):
        raise ShapeError(f"randint: low and high must be ints, got {low!r} and {high!r}")
    if not isinstance(shape, (tuple, list)):
        raise ShapeError(f"randint: size must be a tuple of dims, got {shape!r}")
    return _integers(int(low), int(high), size_of((shape,)), generator, dtype, "randint")


def _integers(low: int, high: int, shape, generator, dtype, who: str):
    if high <= low:
        raise ShapeError(f"{who}: the range [{low}, {high}) is empty (PyTorch refuses it too)")
    if high - low > MAX_ELEMENTS or max(abs(low), abs(high)) > MAX_ELEMENTS:
        raise ShapeError(
            f"{who}: [{low}, {high}) reaches past 2**24, where float32 no longer holds every integer"
        )
    bits, _ = random_bits(shape, generator)
    count = high - low
    value = minimum(_floor(bits * UNIT * float(count)), float(count - 1)) + float(low)
    if dtype is None or is_integer_dtype(dtype):
        return value
    if is_bool_dtype(dtype):
        return value.bool()
    return value.to(dtype_name(dtype, who))


@user_op
def rand_like(input, *, generator=None, dtype=None):
    x = lift(input)
    return rand(x.shape, generator=generator, dtype=x.dtype if dtype is None else dtype)


@user_op
def randn_like(input, *, generator=None, dtype=None):
    x = lift(input)
    return randn(x.shape, generator=generator, dtype=x.dtype if dtype is None else dtype)


@user_op
def randint_like(input, low=0, high=None, *, generator=None, dtype=None):
    """torch.randint_like(input, high) or (input, low, high)."""
    if high is None:
        low, high = 0, low
    x = lift(input)
    return _integers(
        int(low), int(high), x.shape, generator, x.dtype if dtype is None else dtype, "randint_like"
    )


@user_op
def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None):
    """torch.normal: mean + std * randn, the shape broadcast from tensor means and stds, or `size` with
    number ones. PyTorch refuses a negative std; so does refcomp where it is a number."""
    if isinstance(std, numbers.Real) and std < 0:
        raise ShapeError(f"normal: std must be >= 0, got {std}")
    tensors = [lift(v) for v in (mean, std) if isinstance(v, TensorCore)]
    if tensors and size is not None:
        raise ShapeError("normal: give size only with a number mean and std")
    if not tensors and size is None:
        raise ShapeError("normal: give size with a number mean and std")
    shape = broadcast_shape(tensors, "normal") if tensors else size_of((size,))
    dtype = tensors[0].dtype if tensors and dtype is None else dtype
    return randn(shape, generator=generator, dtype=dtype) * std + mean


@user_op
def bernoulli(input, p=None, *, generator=None):
    """torch.bernoulli: 1 where a uniform draw falls below the probability (input's values, or p)."""
    x = lift(input)
    chance = x if p is None else lift(p)
    drawn = rand(x.shape, generator=generator) < chance.to("float32")
    return drawn.to(x.dtype) if x.dtype != "float32" else drawn * 1.0


@user_op
def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, generator=None):
    """torch.nn.functional.dropout: in training each value is kept with probability 1 - p and scaled by
    1/(1 - p), as PyTorch scales; outside training, or with p = 0, the input itself; p = 1 zeroes
    (x * 0, so NaN stays NaN, as PyTorch)."""
    x = lift(input)
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
        raise ShapeError(f"dropout of {x.label}: p must be a probability in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    keep = rand(x.shape, generator=generator) >= float(p)
    return x * where(keep, _kept_scale(p, x.dtype), 0.0).to(x.dtype)


def _kept_scale(p: float, dtype: str) -> float:
    """1 / (1 - p) as PyTorch's dropout divides its mask: in the input's type (bfloat16: in float32)."""
    kind = np.float16 if dtype == "float16" else np.float32
    return float(np.divide(kind(1.0), kind(1.0 - p)))


class RandomMixin:
    __slots__ = ()

    def bernoulli(self, p=None, *, generator=None):
        return bernoulli(self, p, generator=generator)

    def multinomial(self, num_samples: int, replacement: bool = False, *, generator=None):
        """torch.multinomial over the last axis's weights (a row or a batch of rows). Without replacement, an
        exponential race (Efraimidis and Spirakis): the num_samples largest ln(u)/w, distinct categories;
        with it, each sample inverts the cumulative weights. PyTorch raises on negative or NaN weights
        and on too few positive ones; refcomp cannot raise inside a kernel, so it is for the caller
        to keep weights valid (zero-weight categories come last without replacement)."""
        w = lift(self)
        if w.ndim not in (1, 2):
            raise ShapeError(f"multinomial: {w.label} must be 1-D or 2-D (PyTorch's rule)")
        n = w.shape[-1]
        if not isinstance(num_samples, numbers.Integral) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ShapeError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
        if not replacement and isinstance(n, int) and num_samples > n:
            raise ShapeError(f"multinomial: {num_samples} samples without replacement from {n} categories")
        w = w.to("float32")
        if not replacement:
            bits, _ = random_bits(w.shape, generator)
            keys = (
                log_unit((bits + 0.5) * UNIT) / w
            )  # -Exp(1)/w, never 0/0: the largest wins, w = 0 gives -inf
            return keys.topk(num_samples, -1)[1]
        rows = w.shape[:-1]
        bits, _ = random_bits((*rows, num_samples), generator)
        cumulative = w.cumsum(-1)
        target = (bits * UNIT).unsqueeze(-1) * cumulative[..., -1:].unsqueeze(-2)
        below = (cumulative.unsqueeze(-2) <= target).sum(-1)
        return minimum(below, float(n - 1) if isinstance(n, int) else lift(n) - 1.0)


def multinomial(input, num_samples: int, replacement: bool = False, *, generator=None):
    return RandomMixin.multinomial(lift(input), num_samples, replacement, generator=generator)


FUNCTIONS = {
    name: globals()[name] for name in names.RANDOM
}  # the names are listed there for `import refcomp`

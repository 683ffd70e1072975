"""The Tensor methods a PyTorch user reaches for, under PyTorch's names and signatures.

Each is a few primitives (or the operators of elementwise.py) with PyTorch's meaning: `div` with a
`rounding_mode`, `//` as floor division, `sign`/`trunc`/`round` (half to even) from floor and
comparisons, `copysign`, `logaddexp` without overflow, `lerp` in PyTorch's two-sided form, the
logical operations and `masked_fill` on 0/1 floats (refcomp's booleans), and PyTorch's questions
about a tensor (`size`, `numel`, `dim`) and its copies (`clone`, `new_zeros`, `type_as`).
"""
from __future__ import annotations

import math

from ..errors import ShapeError
from ..symbolic.dims import prod
from .core import computed_in_float32, is_boolean, is_integer, lift
from .creation import size_of, full
from .elementwise import fmod, where

LOG10_2 = math.log10(2.0)
FINITE_MAX = {"float32": 3.4028234663852886e38, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}


def negative_sign_bit(x):
    """1.0 where x < 0 or x is -0.0 (1/x is -inf there); NaN counts as positive."""
    return (x < 0.0) + x.eq(0.0) * (1.0 / x < 0.0)


def _floor_divide(a, b):
    """PyTorch's (and Python's) float floor division: from fmod, so 1 // -inf is -1 and inf // 1 NaN;
    a zero divisor gives a / b."""
    mod = fmod(a, b)
    div = (a - mod) / b
    div = div - mod.ne(0.0) * (b < 0.0).ne(mod < 0.0)
    low = div.floor()
    rounded = low + (div - low > 0.5)
    zero = where(negative_sign_bit(a / b), -0.0, 0.0)
    return where(b.eq(0.0), a / b, where(div.eq(0.0), zero, rounded))


def _integer_quotient(a, b, rounding_mode: str):
    """PyTorch's integer division, exact at any magnitude: the Div primitive rounds toward zero, and
    floor division steps down once where a remainder is left with the other sign (x // 0 is 0 here,
    where PyTorch raises)."""
    q = a._binary("Div", b)
    if rounding_mode == "trunc":
        return q
    r = a - q * b
    return where(r.ne(0) * (r < 0).ne(b < 0), q - 1, q)


class TorchMethodsMixin:
    __slots__ = ()

    # --- arithmetic under PyTorch's names ---------------------------------------------------------
    def add(self, other, alpha=1):
        return self + (lift(other, like=self) * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (lift(other, like=self) * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other, rounding_mode=None):
        """x / y; rounding_mode "trunc" rounds toward zero, "floor" toward -inf (PyTorch's)."""
        other = lift(other, like=self)
        if rounding_mode in ("trunc", "floor") and is_integer(self) and is_integer(other):
            return _integer_quotient(self, other, rounding_mode)
        quotient = self / other
        if rounding_mode is None:
            return quotient
        if rounding_mode == "trunc":
            return quotient.trunc()
        if rounding_mode == "floor":
            return _floor_divide(self, other)
        raise ShapeError(
            f"div of {self.label}: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}"
        )

    def __floordiv__(self, other):
        return self.div(other, rounding_mode="floor")

    def __rfloordiv__(self, other):
        return lift(other, like=self).div(self, rounding_mode="floor")

    def pow(self, exponent):
        return self ** exponent

    def neg(self):
        return -self

    @computed_in_float32
    def log10(self):
        return self.log2() * LOG10_2

    # --- rounding -------------------------------------------------------------------------------
    def sign(self):
        """-1, 0 or 1 (of an integer tensor's own type); NaN gives 0, as in PyTorch (NumPy gives NaN)."""
        if is_integer(self):
            return (self > 0).to(self.dtype) - (self < 0).to(self.dtype)
        return (self > 0.0) - (self < 0.0)

    def trunc(self):
        """Toward zero: ceil below 0, floor above (-0.5 gives -0.0, as in NumPy); integers stay."""
        return self if is_integer(self) else where(self < 0.0, self.ceil(), self.floor())

    @computed_in_float32
    def round(self, decimals: int = 0):
        """Half to even, as torch.round and np.round; `decimals` scales by 10^decimals first."""
        if is_integer(self) and not decimals:
            return self
        if decimals:
            scale = 10.0 ** decimals
            return (self * scale).round() / scale
        low = self.floor()
        fraction = self - low  # exact: x and floor(x) are within 1 of each other
        up = (fraction > 0.5) + fraction.eq(0.5) * fmod(low, 2.0).abs()  # a tie goes up from an odd floor
        return where(self.isfinite(), low + up, self)

    # --- two operands -----------------------------------------------------------------------------
    def copysign(self, other):
        """|x| with the sign of `other` (-0.0 counts as negative); a float result, as PyTorch's."""
        magnitude = (self.float() if is_integer(self) else self).abs()
        return where(negative_sign_bit(lift(other)), -magnitude, magnitude)

    @computed_in_float32
    def logaddexp(self, other):
        """log(exp(a) + exp(b)) = max + log1p(exp(-|a - b|)); equal infinities give themselves."""
        other = lift(other)
        top = self.maximum(other)
        return where(self.eq(other), self + math.log(2.0), top + (-(self - other).abs()).exp().log1p())

    @computed_in_float32
    def lerp(self, end, weight):
        """start + weight (end - start), computed from the nearer end as PyTorch does (exact at both ends)."""
        end, weight = lift(end), lift(weight)
        difference = end - self
        return where(weight.abs() < 0.5, self + weight * difference, end - difference * (1.0 - weight))

    def lt(self, other):
        return self < other

    def le(self, other):
        return self <= other

    def gt(self, other):
        return self > other

    def ge(self, other):
        return self >= other

    def logical_not(self):
        return self.eq(0.0)

    def logical_and(self, other):
        return (self.ne(0.0) * lift(other).ne(0.0))._as_bool()

    def logical_or(self, other):
        return self.ne(0.0).maximum(lift(other).ne(0.0))._as_bool()

    def logical_xor(self, other):
        return self.ne(0.0).ne(lift(other).ne(0.0))

    def masked_fill(self, mask, value):
        """`value` where mask is nonzero (True), else x; the result has the broadcast shape (a boolean x
        stays boolean, the value read as PyTorch casts it: nonzero is True)."""
        if is_boolean(self) and isinstance(value, (int, float)):
            return where(lift(mask), float(value != 0), self)._as_bool()
        return where(lift(mask), value, self)


    # --- more of PyTorch's methods: each from the ones above ----------------------------------------
    def frac(self):
        """x - trunc(x): the fractional part with the sign of x (an infinity gives NaN, as PyTorch)."""
        return self - self.trunc()

    def fmod(self, other):
        """The C remainder: the sign of the dividend (rc.fmod)."""
        return fmod(self, other)

    def remainder(self, other):
        """Python's and PyTorch's modulus: the sign of the divisor, as `%`."""
        return self % other

    def where(self, condition, other):
        """torch.Tensor.where: this tensor where `condition` holds, else `other`."""
        return where(condition, self, other)

    @computed_in_float32
    def logit(self, eps=None):
        """log(p / (1 - p)); with `eps`, p is first clamped to [eps, 1 - eps], as PyTorch does."""
        p = self if eps is None else self.clamp(eps, 1.0 - eps)
        return (p / (1.0 - p)).log()

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        """NaN, inf and -inf replaced: by 0 and the dtype's largest and lowest finite values unless
        given (integers and booleans are returned as they are, as PyTorch does)."""
        if is_integer(self) or is_boolean(self):
            return self
        big = FINITE_MAX[self.dtype]
        out = where(self.isnan(), float(nan), self)
        out = where(out.eq(math.inf), big if posinf is None else float(posinf), out)
        return where(out.eq(-math.inf), -big if neginf is None else float(neginf), out)

    def nansum(self, dim=None, keepdim=False, *, dtype=None):
        """The sum with NaNs counted as 0."""
        kept = self if is_integer(self) or is_boolean(self) else where(self.isnan(), 0.0, self)
        return kept.sum(dim, keepdim, dtype=dtype)

    def count_nonzero(self, dim=None):
        """How many elements are not 0 (NaN is not 0), over `dim` (every axis when None): int64."""
        return self.ne(0.0).sum(dim).long()

    def norm(self, p="fro", dim=None, keepdim=False):
        """torch.Tensor.norm, the vector p-norm over `dim` (every element when None): 2 or "fro",
        1, inf (the largest magnitude), -inf (the smallest), 0 (the count of non-zeros) and any other
        real p, as (sum |x|^p)^(1/p). The nuclear norm ("nuc") is not here."""
        axes = tuple(range(self.ndim)) if dim is None else dim
        if p in ("fro", 2):
            return (self * self).sum(axes, keepdim).sqrt()
        if isinstance(p, str) or not isinstance(p, (int, float)) or isinstance(p, bool) or math.isnan(p):
            raise ShapeError(f"norm of {self.label}: p must be a number or 'fro', got {p!r}")
        magnitude = self.abs()
        if p == math.inf:
            return magnitude.amax(axes, keepdim)
        if p == -math.inf:
            return magnitude.amin(axes, keepdim)
        if p == 0:
            return self.ne(0.0).sum(axes, keepdim).float()
        if p == 1:
            return magnitude.sum(axes, keepdim)
        return (magnitude ** float(p)).sum(axes, keepdim) ** (1.0 / p)

    def mm(self, mat2):
        """A matrix product of two matrices (2-D); `matmul` takes batches and vectors."""
        mat2 = lift(mat2)
        if self.ndim != 2 or mat2.ndim != 2:
            raise ShapeError(f"mm of {self.label} and {mat2.label}: both must be 2-D (matmul takes batches)")
        return self @ mat2

    def narrow(self, dim, start, length):
        """torch.narrow: `length` elements of axis `dim` from `start` (a negative start counts from the
        end of an axis of known length)."""
        axis = self._axis(dim)
        n = self.shape[axis]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, length)):
            raise ShapeError(
                f"narrow of {self.label}: start and length must be ints, got {start!r}, {length!r}"
            )
        if start < 0 and isinstance(n, int):
            start += n
        if length < 0 or start < 0 or (isinstance(n, int) and start + length > n):
            raise ShapeError(f"narrow of {self.label}: {length} elements from {start} do not fit axis {axis} "
                             f"of length {n}")
        return self[(slice(None),) * axis + (slice(start, start + length),)]

    def tile(self, dims):
        """torch.tile: `repeat` with `dims` given leading 1s up to this tensor's rank."""
        dims = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
        return self.repeat(*((1,) * (self.ndim - len(dims)) + dims))

    # --- about the tensor, and copies ---------------------------------------------------------------
    def size(self, dim=None):
        """torch.Tensor.size: the shape (dims may be symbolic), or one axis's length."""
        return tuple(self.shape) if dim is None else self.shape[self._axis(dim)]

    def numel(self):
        return prod(self.shape)

    def dim(self):
        return self.ndim

    def clone(self, *, memory_format=None):
        """The same values (a lazy graph never changes a tensor in place, so no copy is needed)."""
        return type(self)(self.edge)

    def detach(self):
        return type(self)(self.edge)

    def type_as(self, other):
        return self.to("bool" if is_boolean(other) else lift(other).dtype)

    def new_full(self, size, fill_value, *, dtype=None):
        """A tensor of `size` filled with `fill_value`, of this tensor's dtype unless `dtype` says
        otherwise."""
        return full(size, fill_value, dtype=self._dtype_or_own(dtype))

    def new_zeros(self, *size, dtype=None):
        return full(size_of(size), 0.0, dtype=self._dtype_or_own(dtype))

    def new_ones(self, *size, dtype=None):
        return full(size_of(size), 1.0, dtype=self._dtype_or_own(dtype))

    def _dtype_or_own(self, dtype):
        return dtype if dtype is not None else "bool" if is_boolean(self) else self.dtype

"""Elementwise math built from the primitives (Log2 Exp2 Sin Sqrt Recip Add Mul Mod LessThan Where).

Formulas are chosen to be exact where a cheap exact form exists: `maximum` is a MaxReduce over a
stacked pair (so infinities and NaN behave as in NumPy), and `abs`, `relu`, `clip` and `minimum` are
built from it. `where` is the Where primitive, a true select: an infinite or NaN value in the branch
not taken never reaches the result, so masks may use -inf. `x ** y` follows C's powf, as NumPy does,
at every edge (negative bases with integral exponents, 0 ** 0, infinities, -0.0).
"""
from __future__ import annotations

import math
import numbers

from ..errors import ShapeError
from .provenance import user_op
from .core import (TensorCore, broadcast, broadcast_shape, computed_in_float32, is_boolean, is_integer,
                   keep_bool, lift)
from .joining import stack
from .primitives import make_node

LOG2_E = 1.4426950408889634
LN_2 = 0.6931471805599453


class ElementwiseMixin:
    __slots__ = ()

    # --- arithmetic ------------------------------------------------------------------------
    def __add__(self, other):
        return self._binary("Add", other)

    def __radd__(self, other):
        return lift(other, like=self)._binary("Add", self)

    def __mul__(self, other):
        return self._binary("Mul", other)

    def __rmul__(self, other):
        return lift(other, like=self)._binary("Mul", self)

    def __neg__(self):
        return self * -1

    def __sub__(self, other):
        _check_broadcast(self, other, "Sub")
        return self + (-lift(other, like=self))

    def __rsub__(self, other):
        return lift(other, like=self) + (-self)

    def __truediv__(self, other):
        _check_broadcast(self, other, "Div")
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return self * (1.0 / other) if other != 0 else self * lift(other).reciprocal()
        return self * lift(other).reciprocal()

    def __rtruediv__(self, other):
        return lift(other) * self.reciprocal()

    def __mod__(self, other):
        """NumPy's (and Python's) `%`: the remainder takes the sign of the divisor.

        fmod's remainder has the dividend's sign; where the signs differ (and it is not 0) the divisor
        is added once, exactly as np.remainder does. `rc.fmod` is C's fmodf.
        """
        divisor = lift(other, like=self)
        r = self._binary("Mod", divisor)
        signs_differ = (r < 0.0) * (divisor > 0.0) + (r > 0.0) * (divisor < 0.0)
        return where(signs_differ, r + divisor, r)

    def __rmod__(self, other):
        return lift(other, like=self) % self

    @computed_in_float32
    def __pow__(self, exponent):
        return power(self, exponent)

    @computed_in_float32
    def __rpow__(self, base):
        return power(base, self)

    # --- comparisons: 1.0 where true, else 0.0 ------------------------------------------------
    # Only `<` is a primitive. `<=`, `>=` and `==` are "not the opposite strict comparison", which
    # is wrong when an operand is NaN (every comparison with NaN is false), so they are multiplied
    # by `_ordered`, which is 0 exactly where an operand is NaN.
    def __lt__(self, other):
        return self._binary("LessThan", other)._as_bool()

    def __gt__(self, other):
        _check_broadcast(self, other, "GreaterThan")
        return lift(other, like=self)._binary("LessThan", self)._as_bool()

    def __le__(self, other):
        return ((1.0 - (self > other)) * _ordered(self, other))._as_bool()

    def __ge__(self, other):
        return ((1.0 - (self < other)) * _ordered(self, other))._as_bool()

    def eq(self, other):
        return ((1.0 - (self < other)) * (1.0 - (self > other)) * _ordered(self, other))._as_bool()

    def ne(self, other):
        return (1.0 - self.eq(other))._as_bool()

    def isnan(self):
        """1.0 where NaN: NaN is the only value neither below inf nor above -inf."""
        return (1.0 - (((self < math.inf) + (self > -math.inf)) > 0.5))._as_bool()

    def isinf(self):
        return ((self < -FLOAT32_MAX) + (self > FLOAT32_MAX))._as_bool()

    def isfinite(self):
        """1.0 where neither infinite nor NaN (every comparison with NaN is false)."""
        return ((self < math.inf) * (self > -math.inf))._as_bool()

    __eq__ = eq
    __ne__ = ne
    __hash__ = object.__hash__

    # --- PyTorch's operators on booleans: & | ^ ~ (refcomp's integers do arithmetic, not bits) ---
    def _boolean_operands(self, other, op: str):
        other = lift(other) if not isinstance(other, bool) else other
        if not is_boolean(self) or not (isinstance(other, bool) or is_boolean(other)):
            raise ShapeError(
                f"{op} of {self.label}: PyTorch's bitwise operators need booleans (comparisons, .bool()) "
                f"here; refcomp's integer tensors do arithmetic, not bitwise operations"
            )
        return float(other) if isinstance(other, bool) else other

    def _shift(self, other):
        raise ShapeError(
            f"a bit shift of {self.label}: refcomp's integer tensors do arithmetic, not bitwise operations "
            f"(multiply or floor-divide by a power of two instead)"
        )

    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = _shift

    def __and__(self, other):
        return self.logical_and(self._boolean_operands(other, "&"))

    def __or__(self, other):
        return self.logical_or(self._boolean_operands(other, "|"))

    def __xor__(self, other):
        return self.logical_xor(self._boolean_operands(other, "^"))

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self):
        self._boolean_operands(True, "~")
        return self.logical_not()

    def __abs__(self):
        return self.abs()

    # --- unary math ---------------------------------------------------------------------------
    def log2(self):
        return self._unary("Log2")

    def exp2(self):
        return self._unary("Exp2")

    def sin(self):
        return self._unary("Sin")

    def sqrt(self):
        return self._unary("Sqrt")

    def reciprocal(self):
        return self._unary("Recip")

    @computed_in_float32
    def exp(self):
        return (self * LOG2_E).exp2()

    @computed_in_float32
    def log(self):
        return self.log2() * LN_2

    @computed_in_float32
    def cos(self):
        return (self + math.pi / 2).sin()

    @computed_in_float32
    def rsqrt(self):
        return self.sqrt().reciprocal()

    def maximum(self, other):
        a, b = broadcast(self, lift(other, like=self), "maximum")
        return stack([a, b], axis=-1)._reduce("MaxReduce", a.ndim)

    def minimum(self, other):
        _check_broadcast(self, other, "minimum")
        return -((-self).maximum(-lift(other, like=self)))

    def abs(self):
        return self.maximum(-self)

    def relu(self):
        return self.maximum(0 if is_integer(self) else 0.0)  # an integer tensor stays one

    def clamp(self, min=None, max=None):
        """torch.clamp: maximum with min, then minimum with max (numbers or tensors), so min > max gives
        max and a NaN (in x or a bound) propagates, as PyTorch."""
        if min is None and max is None:
            raise ShapeError(f"clamp of {self.label}: give min or max (PyTorch refuses neither)")
        out = self if min is None else self.maximum(min)
        return out if max is None else out.minimum(max)

    clip = clamp

    @computed_in_float32
    def sigmoid(self):
        return 1.0 / (1.0 + (-self).exp())

    @computed_in_float32
    def gelu(self, approximate: str = "none"):
        """GELU, x * Phi(x). `approximate="none"` (PyTorch's default) is the exact x/2 * erfc(-x/sqrt 2),
        which keeps erfc's relative accuracy in the negative tail where 1 + erf(x/sqrt 2) would cancel;
        `approximate="tanh"` is PyTorch's tanh form, GPT-2's (`tanh` and `erfc` live in ops/special.py)."""
        if approximate == "tanh":
            inner = math.sqrt(2.0 / math.pi) * (self + 0.044715 * self * self * self)
            return 0.5 * self * (1.0 + inner.tanh())
        if approximate == "none":
            return 0.5 * self * (self * (-1.0 / math.sqrt(2.0))).erfc()
        raise ShapeError(f"gelu of {self.label}: approximate must be 'tanh' or 'none', got {approximate!r}")

    @computed_in_float32
    def silu(self):
        return self * self.sigmoid()


# Integer powers up to this size are exact-sign repeated squaring (at most ~128 multiplies); every
# float beyond it is an even integer, so |x| ** n through exp2/log2 is right there.
MAX_SQUARING_EXPONENT = 2 ** 64
FLOAT32_MAX = 3.4028234663852886e38


@user_op
def power(x, y):
    """x ** y as NumPy computes it in float32: C's powf, except that a scalar 0.5 is sqrt (as in NumPy,
    so (-inf) ** 0.5 is NaN there, and inf elementwise).

    The magnitude is exp2(y * log2|x|); the edges are selected explicitly: y == 0 or x == 1 give 1
    (NaN included), |x| == 1 with an infinite y gives 1, a negative base (-0.0 included) takes the
    sign of an odd integral y, and a finite negative base with a finite non-integral y is NaN. A
    Python-number exponent or positive base decides its case when the graph is built.
    """
    if isinstance(y, numbers.Real) and not isinstance(y, bool):
        return _power_by_number(x, float(y))
    if isinstance(x, numbers.Real) and not isinstance(x, bool) and 0.0 < x < math.inf:  # b ** y, b > 0
        y = lift(y)
        return 1.0 - (y < y) if x == 1.0 else (y * math.log2(x)).exp2()
    x = lift(x)
    _check_broadcast(x, y, "Pow")
    y = lift(y)
    magnitude = (y * x.abs().log2()).exp2()
    integral = _equals(fmod(y, 1.0), 0.0)  # 0 for infinities and NaN
    halves = fmod(y, 2.0)  # -1, 0 or 1 where y is integral
    odd = integral * ((halves < 0.0) + (0.0 < halves))
    sign_bit = (x < 0.0) + (x.reciprocal() < 0.0)  # non-zero for negatives and -0.0 (1 / -0.0 is -inf)
    signed = where(odd * sign_bit, -magnitude, magnitude)
    undefined = (x < 0.0) * x.isfinite() * y.isfinite() * (1.0 - integral)
    one = _equals(y, 0.0) + _equals(x, 1.0) + _equals(x.abs(), 1.0) * y.isinf()
    return where(one, 1.0, where(undefined, math.nan, signed))


def _equals(x, c: float):
    """1.0 where x == c exactly, else 0.0 (NaN included), for a finite number c: five nodes, where the
    NaN-aware `eq` of two tensors takes more."""
    return where((x < c) + (c < x), 0.0, x < math.inf)


def _power_by_number(x, y: float):
    if y.is_integer() and abs(y) <= MAX_SQUARING_EXPONENT:
        return _integer_power(x, int(y))
    if y == 0.5:
        return x.sqrt()
    if math.isnan(y):
        return where(_equals(x, 1.0), 1.0, math.nan)
    magnitude = (y * x.abs().log2()).exp2()
    if math.isinf(y):
        return where(_equals(x.abs(), 1.0), 1.0, magnitude)
    if y.is_integer():  # beyond MAX_SQUARING_EXPONENT every float is even: the sign is +
        return magnitude
    return where((x < 0.0) * x.isfinite(), math.nan, magnitude)


def _integer_power(x, n: int):
    if n == 0:  # 1 everywhere, NaN and inf included (as NumPy); x < x is 0 for every x
        return 1.0 - (x < x)
    result, base, k = None, x, abs(n)
    while k:
        if k & 1:
            result = base if result is None else result * base
        k >>= 1
        if k:
            base = base * base
    return result if n > 0 else result.reciprocal()


def _check_broadcast(a, b, what: str) -> None:
    """Shapes are checked before any operand is transformed (negated, inverted), so that an error
    names the user's tensors rather than an intermediate node."""
    broadcast_shape([a, lift(b)], what)


def _ordered(a, b):
    """1.0 where neither a nor b is NaN; a Python number that is not NaN needs no check."""
    b_is_number = isinstance(b, numbers.Real) and not isinstance(b, bool)
    a_ok = 1.0 - lift(a).isnan()
    if b_is_number and not math.isnan(b):
        return a_ok
    return a_ok * (1.0 - lift(b).isnan())


_MISSING = object()  # where(condition) alone: PyTorch's nonzero form


@user_op
def where(cond, a=_MISSING, b=_MISSING):
    """a where `cond` is non-zero, else b (np.where): the Where primitive after broadcasting."""
    if a is _MISSING or b is _MISSING:
        raise ShapeError(
            "where(condition) alone is torch.nonzero's tuple of indices, whose length depends on the data: "
            "a graph is built before its data, so give where(condition, input, other)"
        )
    cond = lift(cond)
    a = lift(a, like=b if isinstance(b, TensorCore) else None)
    b = lift(b, like=a)
    shape = broadcast_shape([cond, a, b], "where")
    operands = [t.broadcast_to(shape) for t in (cond, a, b)]
    return keep_bool(type(cond).from_node(make_node("Where", tuple(t.edge for t in operands))), a, b)


@user_op
def maximum(a, b):
    return lift(a).maximum(b)


@user_op
def minimum(a, b):
    return lift(a).minimum(b)


@user_op
def fmod(a, b):
    return lift(a)._binary("Mod", b)


"""Elementwise math built from the primitives (Log2 Exp2 Sin Sqrt Recip Add Mul Mod LessThan).

Formulas are chosen to be exact where a cheap exact form exists: `maximum` is a MaxReduce over a
stacked pair (so infinities and NaN behave as in NumPy), and `abs`, `relu`, `clip` and `minimum` are
built from it. `where` is the arithmetic blend `c*a + (1-c)*b`: exact for finite values, but an
infinite or NaN value in the branch *not* selected still poisons the result (0 * inf = NaN), so masks
in `rc.nn` use a large finite negative number instead of -inf.
"""
from __future__ import annotations

import math
import numbers

LOG2_E = 1.4426950408889634
LN_2 = 0.6931471805599453


class ElementwiseMixin:
    __slots__ = ()

    # --- arithmetic ------------------------------------------------------------------------
    def __add__(self, other):
        return self._binary("Add", other)

    def __radd__(self, other):
        return _lift(other)._binary("Add", self)

    def __mul__(self, other):
        return self._binary("Mul", other)

    def __rmul__(self, other):
        return _lift(other)._binary("Mul", self)

    def __neg__(self):
        return self * -1.0

    def __sub__(self, other):
        _check_broadcast(self, other, "Sub")
        return self + (-_lift(other))

    def __rsub__(self, other):
        return _lift(other) + (-self)

    def __truediv__(self, other):
        _check_broadcast(self, other, "Div")
        if isinstance(other, numbers.Real) and not isinstance(other, bool):
            return self * (1.0 / other) if other != 0 else self * _lift(other).reciprocal()
        return self * _lift(other).reciprocal()

    def __rtruediv__(self, other):
        return _lift(other) * self.reciprocal()

    def __mod__(self, other):
        """NumPy's (and Python's) `%`: the remainder takes the sign of the divisor.

        fmod's remainder has the dividend's sign; where the signs differ (and it is not 0) the divisor
        is added once, exactly as np.remainder does. `rc.fmod` is C's fmodf. (One edge differs:
        an infinite divisor with the dividend's sign gives 0 * inf = NaN, where NumPy gives the dividend.)
        """
        divisor = _lift(other)
        r = self._binary("Mod", divisor)
        signs_differ = (r < 0.0) * (divisor > 0.0) + (r > 0.0) * (divisor < 0.0)
        return r + signs_differ * divisor

    def __rmod__(self, other):
        return _lift(other) % self

    def __pow__(self, exponent):
        if isinstance(exponent, numbers.Real) and not isinstance(exponent, bool):
            if float(exponent).is_integer() and abs(exponent) <= MAX_SQUARING_EXPONENT:
                return _integer_power(self, int(exponent))
            if exponent == 0.5:
                return self.sqrt()
            if exponent == -0.5:
                return self.rsqrt()
            if float(exponent).is_integer():  # beyond MAX_SQUARING_EXPONENT every float is even
                return (float(exponent) * self.abs().log2()).exp2()
        # general case, as exp2(b * log2(a)): NaN for a < 0 (as NumPy gives for fractional b)
        _check_broadcast(self, exponent, "Pow")
        return (_lift(exponent) * self.log2()).exp2()

    def __rpow__(self, base):
        if isinstance(base, numbers.Real) and not isinstance(base, bool) and base == 0:
            # 0 ** x is 0, 1 or inf by the sign of x; exp2(x * log2(0)) would give 0 * -inf = NaN at x = 0
            return (self <= 0.0) / (self >= 0.0)
        return (self * _lift(base).log2()).exp2()

    # --- comparisons: 1.0 where true, else 0.0 ------------------------------------------------
    # Only `<` is a primitive. `<=`, `>=` and `==` are "not the opposite strict comparison", which
    # is wrong when an operand is NaN (every comparison with NaN is false), so they are multiplied
    # by `_ordered`, which is 0 exactly where an operand is NaN.
    def __lt__(self, other):
        return self._binary("LessThan", other)

    def __gt__(self, other):
        _check_broadcast(self, other, "GreaterThan")
        return _lift(other)._binary("LessThan", self)

    def __le__(self, other):
        return (1.0 - (self > other)) * _ordered(self, other)

    def __ge__(self, other):
        return (1.0 - (self < other)) * _ordered(self, other)

    def eq(self, other):
        return (1.0 - (self < other)) * (1.0 - (self > other)) * _ordered(self, other)

    def ne(self, other):
        return 1.0 - self.eq(other)

    def isnan(self):
        """1.0 where NaN: NaN is the only value neither below inf nor above -inf."""
        return 1.0 - (((self < math.inf) + (self > -math.inf)) > 0.5)

    __eq__ = eq
    __ne__ = ne
    __hash__ = object.__hash__

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

    def exp(self):
        return (self * LOG2_E).exp2()

    def log(self):
        return self.log2() * LN_2

    def cos(self):
        return (self + math.pi / 2).sin()

    def rsqrt(self):
        return self.sqrt().reciprocal()

    def maximum(self, other):
        from .movement import stack
        from .tensor import broadcast
        a, b = broadcast(self, _lift(other), "maximum")
        return stack([a, b], axis=-1)._reduce("MaxReduce", a.ndim)

    def minimum(self, other):
        _check_broadcast(self, other, "minimum")
        return -((-self).maximum(-_lift(other)))

    def abs(self):
        return self.maximum(-self)

    def relu(self):
        return self.maximum(0.0)

    def clip(self, min=None, max=None):
        out = self if min is None else self.maximum(min)
        return out if max is None else out.minimum(max)

    def sigmoid(self):
        return 1.0 / (1.0 + (-self).exp())

    def tanh(self):
        return 2.0 * (2.0 * self).sigmoid() - 1.0

    def gelu(self):
        """The tanh approximation (PyTorch's gelu(approximate='tanh'))."""
        inner = math.sqrt(2.0 / math.pi) * (self + 0.044715 * self * self * self)
        return 0.5 * self * (1.0 + inner.tanh())

    def silu(self):
        return self * self.sigmoid()


# Integer powers up to this size are exact-sign repeated squaring (at most ~128 multiplies); every
# float beyond it is an even integer, so |x| ** n through exp2/log2 is right there.
MAX_SQUARING_EXPONENT = 2 ** 64


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


def _lift(value):
    from .tensor import lift
    return lift(value)


def _check_broadcast(a, b, what: str) -> None:
    """Shapes are checked before any operand is transformed (negated, inverted), so that an error
    names the user's tensors rather than an intermediate node."""
    from .tensor import broadcast_shape
    broadcast_shape([a, _lift(b)], what)


def _ordered(a, b):
    """1.0 where neither a nor b is NaN; a Python number that is not NaN needs no check."""
    b_is_number = isinstance(b, numbers.Real) and not isinstance(b, bool)
    a_ok = 1.0 - _lift(a).isnan()
    if b_is_number and not math.isnan(b):
        return a_ok
    return a_ok * (1.0 - _lift(b).isnan())


def where(cond, a, b):
    """c*a + (1-c)*b for a 0/1 condition; see the module docstring about non-finite branches."""
    from .tensor import broadcast_shape, lift
    cond, a, b = lift(cond), lift(a), lift(b)
    broadcast_shape([cond, a, b], "where")
    return cond * a + (1.0 - cond) * b


def maximum(a, b):
    return _lift(a).maximum(b)


def minimum(a, b):
    return _lift(a).minimum(b)


def fmod(a, b):
    return _lift(a)._binary("Mod", b)

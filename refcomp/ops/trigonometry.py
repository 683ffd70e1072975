"""tan, the inverse trigonometric functions and the hyperbolic ones, built from the primitives.

atan is Cephes' single-precision `atanf`: the argument is reduced to |x| <= tan(pi/8) by
atan(x) = pi/2 + atan(-1/x) above tan(3pi/8) and pi/4 + atan((x - 1)/(x + 1)) between, then a
degree-9 odd polynomial (error about 1 ulp). The others are written so that nothing nearly equal is
subtracted: asin(x) = atan(x / sqrt((1 - x)(1 + x))), acos(x) = 2 atan(sqrt((1 - x)/(1 + x))) (not
pi/2 - asin(x), which cancels near 1), sinh from expm1, asinh/acosh/atanh from log1p, with
log(x) + log 2 past 1e8 where x^2 would overflow. Each edge (+-0, +-inf, NaN, |x| > 1) is a `where`
or falls out of the formula as NumPy's answer; tests/test_torch_api.py checks them against PyTorch.
"""
from __future__ import annotations

import math

from .core import computed_in_float32, lift
from .elementwise import where
from .torch_methods import negative_sign_bit

ATAN_POLY = (8.05374449538e-2, -1.38776856032e-1, 1.99777106478e-1, -3.33329491539e-1)  # Cephes atanf
TAN_3PI_8, TAN_PI_8 = 2.414213562373095, 0.4142135623730950
LN_2 = math.log(2.0)
HUGE = 1e8  # past this, x^2 + 1 is x^2 in float32 and log(2x) is the inverse hyperbolic functions' value


def _atan_of_magnitude(a):
    """atan(a) for a >= 0 (a = inf gives pi/2; NaN stays NaN)."""
    big, mid = a > TAN_3PI_8, a > TAN_PI_8
    x = where(big, -1.0 / a, where(mid, (a - 1.0) / (a + 1.0), a))
    offset = where(big, math.pi / 2, where(mid, math.pi / 4, 0.0))
    z = x * x
    poly = ATAN_POLY[0]
    for c in ATAN_POLY[1:]:
        poly = poly * z + c
    return offset + (poly * z * x + x)


def atan2(y, x):
    """torch.atan2 / np.arctan2: the angle of (x, y), signs of zero and infinities included."""
    y, x = lift(y), lift(x)
    ay, ax = y.abs(), x.abs()
    both_inf, both_zero = ay.isinf() * ax.isinf(), ay.eq(0.0) * ax.eq(0.0)
    r = where(both_inf, math.pi / 4, where(both_zero, 0.0, _atan_of_magnitude(ay / ax)))
    return where(negative_sign_bit(x), math.pi - r, r).copysign(y)


class TrigonometryMixin:
    __slots__ = ()

    @computed_in_float32
    def tan(self):
        return self.sin() / self.cos()

    @computed_in_float32
    def atan(self):
        return _atan_of_magnitude(self.abs()).copysign(self)

    @computed_in_float32
    def asin(self):
        """atan(x / sqrt((1 - x)(1 + x))): +-pi/2 at +-1, NaN beyond."""
        return (self / ((1.0 - self) * (1.0 + self)).sqrt()).atan()

    @computed_in_float32
    def acos(self):
        """2 atan(sqrt((1 - x) / (1 + x))): accurate near 1 (0 there), pi at -1, NaN beyond."""
        return 2.0 * _atan_of_magnitude(((1.0 - self) / (1.0 + self)).sqrt())

    @computed_in_float32
    def arctan2(self, other):
        return atan2(self, other)

    @computed_in_float32
    def sinh(self):
        """(e + e / (e + 1)) / 2 with e = expm1(|x|), signed; exp(|x| - log 2) where that would overflow."""
        a = self.abs()
        e = a.expm1()
        return where(a > 20.0, (a - LN_2).exp(), 0.5 * (e + e / (e + 1.0))).copysign(self)

    @computed_in_float32
    def cosh(self):
        a = self.abs()
        return where(a > 20.0, (a - LN_2).exp(), 0.5 * (a.exp() + (-a).exp()))

    @computed_in_float32
    def asinh(self):
        """log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), signed; log(|x|) + log 2 past 1e8."""
        a = self.abs()
        small = (a + a * a / (1.0 + (1.0 + a * a).sqrt())).log1p()
        return where(a > HUGE, a.log() + LN_2, small).copysign(self)

    @computed_in_float32
    def acosh(self):
        """log1p((x - 1) + sqrt((x - 1)(x + 1))); log(x) + log 2 past 1e8; NaN below 1."""
        t = self - 1.0
        inside = where(self > HUGE, self.log() + LN_2, (t + (t * (self + 1.0)).sqrt()).log1p())
        return where(self < 1.0, math.nan, inside)

    @computed_in_float32
    def atanh(self):
        """log1p(2|x| / (1 - |x|)) / 2, signed (log1p's argument is never near -1): +-inf at +-1, NaN
        beyond."""
        a = self.abs()
        return (0.5 * (2.0 * a / (1.0 - a)).log1p()).copysign(self)

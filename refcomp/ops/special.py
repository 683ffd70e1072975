"""Special functions built from the primitives: tanh, erf, erfc, expm1, log1p, floor and ceil.

refcomp has no primitive for any of them, so each is a formula over Exp2, Log2, Recip, Mod,
LessThan and Where, chosen to keep a small *relative* error over the whole float32 range (near 0
too, where the textbook forms cancel: there they are series, which no exact rewrite rule can
spoil) and to give NumPy's answer at the edges (+-0.0, +-inf, NaN). Every edge is a `where`, a
true select, so the branch not taken never leaks an inf or NaN.

Measured over dense float32 grids (200,001 points) plus tiny (1e-30 up) and huge |x| against
np.tanh / math.erf / math.erfc / np.expm1 / np.log1p in float64, on the reference interpreter;
tests/test_math.py checks each bound there and on the emulator:

* tanh: max relative error 2.9e-7 (TANH_MAX_REL_ERROR 5e-7), 1.7e-7 for |x| < 1e-3.
* erf: max absolute error 1.4e-7 (ERF_MAX_ABS_ERROR 2e-7, at |x| ~ 0.98, where the series ends);
  relative below 2e-7 for |x| < 1e-3.
* erfc: max relative error 1.6e-6 for x <= 3 (ERFC_MAX_REL_ERROR 2e-6); further right the
  exponent -x^2 carries the rounding of x^2, about 1.5e-7 x^2 (1.1e-5 at x = 8); absolute error
  below 2e-7 everywhere.
* expm1: max relative error 2.8e-7 for x <= 1 (EXPM1_MAX_REL_ERROR 5e-7); above, exp's own
  error from rounding its argument, about 6e-8 |x| (5.6e-7 at x = 10).
* log1p: max relative error 2.4e-7 on (-1, 1e30] (LOG1P_MAX_REL_ERROR 5e-7).
* floor, ceil: exact for every float32, the signs of zero and the infinities included.
"""
from __future__ import annotations

import math

from .core import computed_in_float32, constant, is_integer, lift
from .elementwise import fmod, where

TANH_MAX_REL_ERROR = 5e-7
ERF_MAX_ABS_ERROR = 2e-7
ERFC_MAX_REL_ERROR = 2e-6
EXPM1_MAX_REL_ERROR = 5e-7
LOG1P_MAX_REL_ERROR = 5e-7

# erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)): 13 terms reach float32 precision on |x| <= 1.
ERF_TAYLOR = [2.0 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(13)]
# expm1(x) = x * sum x^n / (n + 1)!, and atanh(s) = s * sum s^(2n) / (2n + 1), on |x| < 0.5 and
# |s| <= 1/3: enough terms for float64 too (the first left out is below 1e-16 relative), since the
# float64 reference must agree with NumPy to 1e-12 (golden.FLOAT64_TOLERANCE).
EXPM1_TAYLOR = [1.0 / math.factorial(n + 1) for n in range(15)]
ATANH_TAYLOR = [1.0 / (2 * n + 1) for n in range(17)]
# erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), for z >= 0: the Chebyshev fit of Numerical Recipes
# (`erfcc`), fractional error below 1.2e-7 everywhere.
ERFC_CHEBYSHEV = [-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
                  1.48851587, -0.82215223, 0.17087277]


class SpecialMixin:
    __slots__ = ()

    @computed_in_float32
    def expm1(self):
        """exp(x) - 1, accurate near 0: a Taylor series on |x| < 0.5, exp(x) - 1 elsewhere.

        Beyond 0.5, |exp(x) - 1| >= 0.39, so the subtraction loses at most two bits. (Kahan's
        (u - 1) * x / log(u) would need fewer nodes, but the search's exact rewrite
        log2(exp2(y)) = y cancels the very rounding it relies on.) -0.0 stays -0.0, -inf gives -1.
        """
        return where(self.abs() < 0.5, self * _horner(self, EXPM1_TAYLOR), self.exp() - 1.0)

    @computed_in_float32
    def log1p(self):
        """log(1 + x), accurate near 0: 2 atanh(s) with s = x / (2 + x) on |x| < 0.5, log(1 + x) elsewhere.

        On |x| < 0.5, |s| <= 1/3 and the odd series of atanh converges fast; elsewhere log(1 + x)
        loses nothing (for x <= -0.5, 1 + x is exact). -0.0 stays -0.0, -1 gives -inf, x < -1 NaN.
        """
        s = self / (2.0 + self)
        return where(self.abs() < 0.5, 2.0 * s * _horner(s * s, ATANH_TAYLOR), (1.0 + self).log())

    @computed_in_float32
    def tanh(self):
        """tanh with a small relative error everywhere: -expm1(-2|x|) / (2 + expm1(-2|x|)), signed.

        2 sigmoid(2x) - 1 loses all relative accuracy near 0; this form never subtracts nearly equal
        numbers, and expm1 of a value <= 0 never overflows (+-inf give +-1). +-0.0 and NaN are x.
        """
        em = (-2.0 * self.abs()).expm1()
        magnitude = -em / (2.0 + em)
        nonzero = (self < 0.0) + (self > 0.0)
        return where(nonzero, where(self < 0.0, -magnitude, magnitude), self)

    @computed_in_float32
    def erf(self):
        """The error function: a 13-term Taylor series on |x| <= 1, 1 - erfc(|x|) (signed) above."""
        a = self.abs()
        tail = _erfc_tail(a)
        return where(a > 1.0, where(self < 0.0, tail - 1.0, 1.0 - tail), _erf_series(self))

    @computed_in_float32
    def erfc(self):
        """1 - erf(x), with a small relative error in the right tail (erfc(9) is 4e-37, not 0).

        On |x| <= 1, 1 - series (erfc lies in [0.15, 1.85] there, so nothing cancels); above, the
        Chebyshev fit; below -1, 2 - the fit of |x|.
        """
        tail = _erfc_tail(self.abs())
        return where(self > 1.0, tail, where(self < -1.0, 2.0 - tail, 1.0 - _erf_series(self)))

    def floor(self):
        """The largest integer <= x: x - fmod(x, 1), less 1 where that remainder is negative.

        fmod and the subtraction are exact in float32, so this is exact; where the remainder is 0
        (integers, every |x| >= 2^23, +-0.0) or NaN (+-inf, NaN) the answer is x itself.
        """
        if is_integer(self):
            return self  # an integer tensor is its own floor, of its own type (PyTorch's)
        frac = fmod(self, 1.0)
        return where((frac < 0.0) + (frac > 0.0), (self - frac) - (frac < 0.0), self)

    def ceil(self):
        """The smallest integer >= x: -floor(-x) (so ceil(-0.5) is -0.0, as in NumPy)."""
        return self if is_integer(self) else -((-self).floor())


def _erf_series(x):
    """erf on [-1, 1]; a larger |x| (whose answer the caller takes from the tail) is replaced by 1,
    so the series never overflows. A select, not `clip`, so that -0.0 keeps its sign."""
    xc = where(x.abs() > 1.0, 1.0, x)
    return xc * _horner(xc * xc, ERF_TAYLOR)


def _erfc_tail(z):
    """erfc(z) for z >= 1 (z below 1 is clamped, so a branch not taken stays finite): +inf gives 0."""
    zc = z.maximum(1.0)
    t = 1.0 / (1.0 + 0.5 * zc)
    return t * (_horner(t, ERFC_CHEBYSHEV) - zc * zc).exp()


def _horner(z, coeffs):
    """c0 + z (c1 + z (c2 + ...)), the polynomial with coefficients `coeffs` from the constant term up."""
    acc = constant(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * z + c
    return acc


def erf(x):
    return lift(x).erf()


def erfc(x):
    return lift(x).erfc()


def tanh(x):
    return lift(x).tanh()


def expm1(x):
    return lift(x).expm1()


def log1p(x):
    return lift(x).log1p()


def floor(x):
    return lift(x).floor()


def ceil(x):
    return lift(x).ceil()

"""The logarithm and cosine that random draws need, built so every backend rounds them alike.

log2f, sinf and friends differ by an ulp or two between NumPy, glibc and CUDA, so a normal draw made
with them would differ between backends. These are built only from steps IEEE rounds one way (+, -,
x, /, sqrt, comparisons, scaling by powers of two), and products never fuse into a following sum
(Mul is `__fmul_rn` in CUDA; the emulator compiles with -ffp-contract=off): the same bits everywhere.
They cover the domains the draws use, no more, and are accurate to a few ulps there.
"""
from __future__ import annotations

import math

from .elementwise import where

LN2 = math.log(2.0)
TWO_PI = 2.0 * math.pi
SQRT_HALF = math.sqrt(0.5)


def _horner(s, coefficients):
    """c0 + s c1 + s^2 c2 + ...: each product rounded, then each sum."""
    acc = coefficients[-1]
    for c in reversed(coefficients[:-1]):
        acc = s * acc + c
    return acc


def _odd_series(t, coefficients):
    """t (c0 + t^2 c1 + t^4 c2 + ...)."""
    return t * _horner(t * t, coefficients)


def log_unit(u):
    """ln(u) for u in [2**-31, 1]: u = m 2**e with m in [sqrt(1/2), sqrt(2)) by exact halvings, then
    ln m = 2 atanh((m - 1) / (m + 1)), whose series in t**2 <= 0.0295 needs six terms."""
    exponent = 0.0
    for step in (16, 8, 4, 2, 1):
        small = u < 2.0 ** -step
        u = where(small, u * 2.0 ** step, u)
        exponent = exponent - small * float(step)
    small = u < SQRT_HALF
    u = where(small, u * 2.0, u)
    exponent = exponent - small
    t = (u - 1.0) / (u + 1.0)
    return _odd_series(t, [2.0, 2.0 / 3, 2.0 / 5, 2.0 / 7, 2.0 / 9, 2.0 / 11]) + exponent * LN2


def cos_turns(u):
    """cos(2 pi u) for u in [0, 1) on the 2**-24 grid: reflections that are exact on that grid bring the
    angle into [0, pi/4], where six terms of the sine or cosine series are within float32's reach."""
    v = where(u < 0.5, u, 1.0 - u)  # cos(2 pi u) = cos(2 pi (1 - u))
    flip = v > 0.25
    w = where(flip, 0.5 - v, v)  # cos(2 pi v) = -cos(2 pi (1/2 - v))
    use_sine = w > 0.125
    x = where(use_sine, 0.25 - w, w) * TWO_PI  # cos(2 pi w) = sin(2 pi (1/4 - w))
    s = x * x
    cosine = 1.0 + s * _horner(s, [-1 / 2, 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800])
    sine = _odd_series(x, [1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880])
    value = where(use_sine, sine, cosine)
    return where(flip, -value, value)

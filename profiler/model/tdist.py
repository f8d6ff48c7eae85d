"""Student's t distribution: its CDF and quantile, the two numbers netprof's intervals and t-tests need.

Hand-written on purpose (scipy.special.stdtr/stdtrit compute the same): importing scipy.special costs ~0.25 s of
CPU and scipy.stats ~0.9 s, a quarter of a `netprof report` and most of a `netprof compare`, for one number. The
CDF is the regularized incomplete beta function (continued fraction, modified Lentz; Numerical Recipes §6.4);
the quantile inverts it by bisection. tests/test_tdist.py holds both to scipy's within 1e-9.
"""

from __future__ import annotations

import functools
import math

_EPS = 1e-15
_TINY = 1e-300
_MAX_TERMS = 100_000  # the fraction needs ~√max(a, b) terms: ~700 at a billion degrees of freedom


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), for x < (a + 1) / (a + b + 2), where it converges fast."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_TERMS):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """The regularized incomplete beta function I_x(a, b); y = 1 - x, given apart for its precision near 1."""
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, y) / b


def sf(t: float, dof: float) -> float:
    """P(T > t) for Student's t with `dof` degrees of freedom (any positive real)."""
    if math.isnan(t) or not dof > 0:
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tt = t * t
    tail = 0.5 * _betainc(dof / 2.0, 0.5, dof / (dof + tt), tt / (dof + tt))  # P(T > |t|)
    return tail if t >= 0 else 1.0 - tail


def cdf(t: float, dof: float) -> float:
    """P(T ≤ t) (scipy.special.stdtr(dof, t))."""
    return sf(-t, dof)


@functools.lru_cache(maxsize=512)  # a run's cells share a few (q, dof): the bisection runs once for each
def quantile(q: float, dof: float) -> float:
    """The t with P(T ≤ t) = q (scipy.special.stdtrit(dof, q)), to ~1e-13 relative."""
    if not 0.0 < q < 1.0 or not dof > 0:
        return math.inf if q == 1.0 and dof > 0 else -math.inf if q == 0.0 and dof > 0 else math.nan
    if q == 0.5:
        return 0.0
    if q < 0.5:
        return -quantile(1.0 - q, dof)
    p = 1.0 - q  # the upper tail wanted; sf falls as t grows
    lo, hi = 0.0, 1.0
    while sf(hi, dof) > p:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-13 * hi:
        mid = 0.5 * (lo + hi)
        if sf(mid, dof) > p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)

"""The statistics of paired cells (`netprof ab`): per-pair differences, their mean with a t interval, the
same adjusted for the host's speed (the canary), the filter for pairs the host disturbed, and the
sequential stopping rule. Pure functions on numbers; docs/ab.md has the formulas and what they assume.

A pair is two cells run back to back on warm servers, one of the base variant and one of the other, their
order alternating (ABBA). Each judged figure becomes one difference per pair: d = log(new) − log(base)
for positive figures (msgs/s, latency, CPU per message: the ratio is exp of the mean), new − base for
counts that may be 0 (syscalls per message).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from netprof.profiler.model import tdist

ALPHA = 0.05
CONFIDENCE = 0.95
# A cell whose backend CPU ran this much slower than the median cell of the run (the canary's loop time over
# the cell's headline spans) caught the host taking that CPU away, beyond what the canary adjustment models.
# Judged on the canary alone, which neither variant can slow, so dropping such pairs favours neither. Not
# lower: this host runs the CPU in two regimes about 1.7x apart (canary median 54 µs, upper quartile 81 µs)
# and the per-pair difference tracks them (r = -0.64 to -0.79), so the adjustment uses those pairs; dropping
# at 5% (or 50%) threw away 35-60% of the pairs and widened the interval by up to 1.6x
# (bench/ab_acceptance.py, RESULTS.md "netprof ab").
SLOW = 1.0
MIN_PAIRS = 6  # no stop before this many kept pairs: a t interval from fewer rests on a spread barely known
# Pairs before the covariate-adjusted estimate replaces the plain paired mean: the regression spends a degree
# of freedom on the slope, which pays only once the pairs pin it down.
MIN_ADJUSTED = 8
PAIRED, ADJUSTED = "paired", "adjusted"
Values = Sequence[float] | np.ndarray


def disturbed(loops: Sequence[float], slow: float = SLOW) -> list[bool]:
    """For each cell's canary loop time: ran at least `slow` slower than the median cell. A cell without a
    canary figure (NaN) while other cells have one was disturbed too: the canary, awake every 10 ms, could not
    run once in it. With no figure anywhere (no canary) nothing is judged."""
    logs = np.log(np.asarray(loops, dtype=float))
    known = logs[~np.isnan(logs)]
    if not known.size:
        return [False] * len(logs)
    usual = float(np.median(known))
    return [bool(math.isnan(v) or v - usual > math.log1p(slow)) for v in logs]


def dropped_pairs(loops: Sequence[tuple[float, float]], slow: float = SLOW) -> list[bool]:
    """For each pair (its two cells' canary loop times): True when either cell caught the host disturbed.
    The median is over every cell of the run, so a pair's fate can change as the run goes on."""
    flags = disturbed([v for pair in loops for v in pair], slow)
    return [flags[2 * i] or flags[2 * i + 1] for i in range(len(loops))]


@dataclass(frozen=True)
class Estimate:
    """The mean difference per pair (at equal canary, for `adjusted`), its standard error and degrees of
    freedom; `slope`: the adjustment's change of d per unit of Δlog(canary)."""

    value: float
    se: float
    dof: int
    n: int
    method: str
    slope: float | None = None

    def half(self, confidence: float = CONFIDENCE) -> float:
        """Half-width of the two-sided interval (NaN below 1 degree of freedom)."""
        if self.dof < 1:
            return math.nan
        return tdist.quantile(0.5 + confidence / 2, self.dof) * self.se

    def p(self) -> float:
        """Two-sided p of value = 0 (Student's t). Zero spread: 1 when the value is 0, else 0."""
        if self.dof < 1:
            return math.nan
        if self.se == 0:
            return 1.0 if self.value == 0 else 0.0
        return 2 * tdist.cdf(-abs(self.value) / self.se, self.dof)


def paired_mean(d: Values) -> Estimate:
    """mean(d) with se = sd(d)/√n, n − 1 degrees of freedom."""
    x = np.asarray(d, dtype=float)
    n = int(x.size)
    if n == 0:
        return Estimate(math.nan, math.nan, 0, 0, PAIRED)
    se = float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return Estimate(float(x.mean()), se, n - 1, n, PAIRED)


def adjusted(d: Values, x: Values) -> Estimate:
    """OLS of d on Δlog(canary) with an intercept: d_i = a + b·x_i + e_i. The intercept a is the difference
    at equal host speed in both halves of a pair; its se from s²·(XᵀX)⁻¹, n − 2 degrees of freedom."""
    y, xs = np.asarray(d, dtype=float), np.asarray(x, dtype=float)
    n = int(y.size)
    design = np.column_stack([np.ones(n), xs])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    resid = y - design @ coef
    dof = n - 2
    cov = (float(resid @ resid) / dof) * np.linalg.inv(design.T @ design)
    return Estimate(float(coef[0]), math.sqrt(max(float(cov[0, 0]), 0.0)), dof, n, ADJUSTED, float(coef[1]))


def estimate(d: Values, x: Values | None = None, min_adjusted: int = MIN_ADJUSTED) -> Estimate:
    """The adjusted estimate when there are `min_adjusted` pairs with a canary figure that varies, else the
    paired mean."""
    if x is not None and len(d) >= min_adjusted:
        xs = np.asarray(x, dtype=float)
        if not np.isnan(xs).any() and float(np.ptp(xs)) > 0:
            return adjusted(d, xs)
    return paired_mean(d)


def converged(est: Estimate, precision: float, min_pairs: int = MIN_PAIRS,
              confidence: float = CONFIDENCE) -> bool:
    """The stopping rule, on a log-scale estimate: at least `min_pairs` pairs and the interval of the ratio
    within ±`precision` of it (half-width ≤ log(1 + precision)). It reads the spread only, never the value."""
    half = est.half(confidence)
    return est.n >= min_pairs and not math.isnan(half) and half <= math.log1p(precision)


def judge(base: Values, new: Values, x: Values | None = None, log: bool = True,
          alpha: float = ALPHA, confidence: float = CONFIDENCE, min_adjusted: int = MIN_ADJUSTED) -> dict:
    """One figure over the kept pairs (base[i], new[i]; x[i] = the pair's Δlog canary), in the fields of
    `stats.compare_samples` (ratio NEW/BASE, interval, p, significant, direction, delta, means, n) plus the
    estimator. `log`: judged on log ratios (every value must be > 0; the caller falls back otherwise)."""
    b, n = np.asarray(base, dtype=float), np.asarray(new, dtype=float)
    out: dict = {"n_base": int(b.size), "n_new": int(n.size),
                 "mean_base": float(b.mean()) if b.size else math.nan,
                 "mean_new": float(n.mean()) if n.size else math.nan,
                 "delta": math.nan, "ratio": math.nan, "ratio_lo": None, "ratio_hi": None, "p": math.nan,
                 "significant": False, "direction": 0, "scale": "log" if log else "linear", "estimator": None}
    if not b.size:
        return out
    d = np.log(n) - np.log(b) if log else n - b
    est = estimate(d, x, min_adjusted)
    half = est.half(confidence)
    mb = out["mean_base"]
    out["estimator"] = est.method
    if log:
        out["delta"] = out["mean_new"] - mb
        out["ratio"] = math.exp(est.value)
        if not math.isnan(half):
            out["ratio_lo"], out["ratio_hi"] = math.exp(est.value - half), math.exp(est.value + half)
    else:
        out["delta"] = est.value
        out["ratio"] = (mb + est.value) / mb if mb else math.nan
        if mb and not math.isnan(half):
            lo, hi = sorted(((mb + est.value - half) / mb, (mb + est.value + half) / mb))
            out["ratio_lo"], out["ratio_hi"] = lo, hi
    out["p"] = est.p()
    out["significant"] = bool(out["p"] < alpha)
    sign = np.sign(est.value) if not math.isnan(est.value) else 0
    out["direction"] = int(sign)
    return out

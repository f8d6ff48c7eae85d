"""The statistics of `netprof ab` (profiler/model/paired.py) on constructed data: known ratios come back, the
canary adjustment removes what the host's speed did, the stopping rule triggers at the width it states,
disturbed pairs are dropped and counted."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netprof.profiler.model import paired


def _pairs(ratio: float, sd: float, n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = 50_000 * np.exp(rng.normal(0, 0.1, n))  # the host's level moves a lot between pairs ...
    new = base * ratio * np.exp(rng.normal(0, sd, n))  # ... and both halves of a pair move with it
    return base, new


def test_a_known_ratio_is_recovered_with_a_t_interval(sps):
    base, new = _pairs(0.95, 0.02, 40)
    c = paired.judge(base, new)
    assert c["ratio_lo"] < 0.95 < c["ratio_hi"] < 1
    assert c["significant"] and c["direction"] == -1 and c["estimator"] == paired.PAIRED
    d = np.log(new) - np.log(base)
    # the interval and p are the one-sample t of the log ratios
    lo, hi = sps.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=sps.sem(d))
    assert c["ratio_lo"] == pytest.approx(math.exp(lo)) and c["ratio_hi"] == pytest.approx(math.exp(hi))
    assert c["p"] == pytest.approx(sps.ttest_1samp(d, 0).pvalue)
    assert c["mean_base"] == pytest.approx(base.mean()) and c["n_base"] == c["n_new"] == 40


def test_no_change_gives_an_interval_holding_1():
    base, new = _pairs(1.0, 0.02, 30, seed=7)
    c = paired.judge(base, new)
    assert c["ratio_lo"] < 1 < c["ratio_hi"] and not c["significant"]


def test_the_canary_adjustment_takes_out_what_the_host_did():
    rng = np.random.default_rng(3)
    n = 30
    x = rng.normal(0, 0.05, n)  # Δlog canary: the new cell ran on a slower or faster host
    d = math.log(0.97) - 0.9 * x + rng.normal(0, 0.003, n)  # a slower host (x > 0) lowers the new cell's rate
    plain, adj = paired.paired_mean(d), paired.estimate(d, x)
    assert adj.method == paired.ADJUSTED and adj.dof == n - 2
    assert math.exp(adj.value) == pytest.approx(0.97, abs=0.003)
    assert adj.slope == pytest.approx(-0.9, abs=0.05)
    assert adj.half() < plain.half() / 5  # the host's spread is gone from the interval
    # the intercept's se is OLS's: statsmodels-free check against the textbook formula
    design = np.column_stack([np.ones(n), x])
    resid = d - design @ np.linalg.lstsq(design, d, rcond=None)[0]
    se = math.sqrt(resid @ resid / (n - 2) * np.linalg.inv(design.T @ design)[0, 0])
    assert adj.se == pytest.approx(se)


def test_the_adjustment_waits_for_enough_pairs_and_a_canary_that_varies():
    d = [0.01, -0.02, 0.0, 0.03]
    assert paired.estimate(d, [0.1, 0.0, -0.1, 0.2]).method == paired.PAIRED  # too few pairs
    many = list(np.linspace(-0.02, 0.02, paired.MIN_ADJUSTED))
    assert paired.estimate(many, [0.0] * len(many)).method == paired.PAIRED  # the canary never moved
    assert paired.estimate(many, [0.1, math.nan] + [0.0] * (len(many) - 2)).method == paired.PAIRED
    assert paired.estimate(many, list(np.linspace(0, 1, len(many)))).method == paired.ADJUSTED


def test_stopping_triggers_at_the_stated_width(sps):
    d = np.array([0.01, -0.01] * 5)  # n = 10, sd known
    est = paired.paired_mean(d)
    half = est.half()
    assert half == pytest.approx(sps.t.ppf(0.975, 9) * d.std(ddof=1) / math.sqrt(10))
    width = math.expm1(half)  # the precision this interval meets exactly
    assert paired.converged(est, width * 1.001)
    assert not paired.converged(est, width * 0.999)
    assert not paired.converged(est, 1.0, min_pairs=11)  # never before the minimum number of pairs
    assert not paired.converged(paired.paired_mean([0.0]), 1.0)  # one pair: no interval


def test_stopping_reads_the_spread_not_the_estimate():
    d = np.array([0.01, -0.01] * 5)
    for shift in (0.0, 0.05, -0.3):  # the same spread around any effect stops alike
        assert paired.converged(paired.paired_mean(d + shift), 0.01) == paired.converged(paired.paired_mean(d), 0.01)


def test_disturbed_pairs_are_dropped_and_counted():
    loops = [(60_000, 60_500), (60_200, 125_000), (59_800, 95_000), (61_000, 60_000), (math.nan, 60_100)]
    # median cell 60,200 ns: 125,000 is +108% (dropped), 95,000 is +58% (kept: a speed regime, which the
    # adjustment models); no canary sample in a cell while the others have one: the canary could not run there
    # (dropped)
    assert paired.dropped_pairs(loops) == [False, True, False, False, True]
    assert paired.disturbed([100.0, 100.0, 100.0, 199.9, 200.1]) == [False, False, False, False, True]
    assert paired.disturbed([math.nan, math.nan]) == [False, False]  # no canary at all: nothing to judge by


def test_counts_that_can_be_zero_are_judged_on_differences():
    base = [2.0, 2.0, 2.0, 2.0, 2.0]
    new = [0.0, 0.1, 0.0, 0.0, 0.1]
    c = paired.judge(base, new, log=False)
    assert c["scale"] == "linear" and c["delta"] == pytest.approx(-1.96)
    assert c["ratio"] == pytest.approx(0.02) and c["ratio_lo"] < 0.02 < c["ratio_hi"]
    same = paired.judge([1.0] * 4, [1.0] * 4, log=False)  # a deterministic count that did not change
    assert same["p"] == 1.0 and not same["significant"] and same["direction"] == 0

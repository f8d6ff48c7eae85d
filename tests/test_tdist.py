"""profiler/model/tdist.py, Student's t written out so that no run, report or comparison imports scipy, against
scipy itself (the independent truth: scipy.special and scipy.stats, which the tests may import)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netprof.profiler.model import paired, stats, tdist

# netprof's degrees of freedom are rounds or pairs less one or two, or Welch's between those: a few to a few
# thousand. The grid goes past them (to 1e5, and to half a degree).
DOFS = (0.5, 1, 1.5, 2, 3, 4.7, 5, 9, 28.25, 100, 1e3, 1e5)


@pytest.mark.parametrize("dof", DOFS)
def test_quantile_and_cdf_agree_with_scipy(dof):
    from scipy.special import stdtr, stdtrit

    for q in (1e-6, 0.001, 0.025, 0.05, 0.3, 0.5, 0.9, 0.95, 0.975, 0.995, 0.9995, 0.999999):
        assert tdist.quantile(q, dof) == pytest.approx(float(stdtrit(dof, q)), rel=1e-9, abs=1e-12), q
    for t in (-50, -10, -3, -2, -0.1, 0, 0.1, 1, 2.5, 10, 50):
        assert tdist.cdf(t, dof) == pytest.approx(float(stdtr(dof, t)), rel=1e-9, abs=1e-300), t
        assert tdist.sf(t, dof) == pytest.approx(float(stdtr(dof, -t)), rel=1e-9, abs=1e-300), t


def test_edges():
    assert tdist.quantile(0.5, 3) == 0.0 and tdist.quantile(0.025, 3) == -tdist.quantile(0.975, 3)
    assert tdist.quantile(1.0, 3) == math.inf and tdist.quantile(0.0, 3) == -math.inf
    assert math.isnan(tdist.quantile(0.975, 0)) and math.isnan(tdist.cdf(1.0, -1))
    assert math.isnan(tdist.cdf(math.nan, 3))
    assert tdist.cdf(math.inf, 3) == 1.0 and tdist.cdf(-math.inf, 3) == 0.0


def test_summarize_interval_is_scipys(sps):
    s = stats.summarize([1.0, 2.0, 3.0])
    assert s["ci"] == pytest.approx(float(sps.t.ppf(0.975, 2)) / np.sqrt(3), rel=1e-12)
    assert s["ci"] == pytest.approx(2.4841377, abs=1e-7)
    assert np.isnan(stats.summarize([5.0])["ci"])  # one round: no interval


@pytest.mark.parametrize("base,new", [
    ([41e3, 44e3, 39e3], [38e3, 37.5e3, 40e3]),
    ([1.0, 1.1, 0.9, 1.05, 0.97, 1.02], [1.3, 1.2]),  # unequal sizes and spreads: Welch's dof is not an integer
    ([5.0, 5.0, 5.1], [5.0, 5.2, 5.0, 5.1]),
])
@pytest.mark.parametrize("log", [False, True])
def test_welch_p_is_scipys_ttest(base, new, log, sps):
    c = stats.compare_samples(base, new, log=log)
    b, n = (np.log(base), np.log(new)) if log else (np.asarray(base), np.asarray(new))
    assert c["p"] == pytest.approx(float(sps.ttest_ind(n, b, equal_var=False).pvalue), rel=1e-9)


def test_paired_estimate_is_scipys(sps):
    d = [0.012, -0.004, 0.02, 0.008, 0.015]
    est = paired.estimate(d)
    assert est.p() == pytest.approx(float(sps.ttest_1samp(d, 0).pvalue), rel=1e-9)
    lo, hi = sps.t.interval(0.95, len(d) - 1, loc=np.mean(d), scale=sps.sem(d))
    assert est.half() == pytest.approx((hi - lo) / 2, rel=1e-9)

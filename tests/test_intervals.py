"""Intervals across runs (`idealized.metrics`): inside the statistic's range, and covering."""

import math

import numpy as np
import pytest
from scipy import stats

from weakspots.idealized.metrics import (
    mean_interval,
    proportion_interval,
    student_t_quantile,
    wilson_interval,
)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 7, 10, 31, 200])
@pytest.mark.parametrize("probability", [0.975, 0.995, 0.6, 0.025])
def test_t_quantile_matches_scipy(df, probability):
    # deterministic numerics: bisection to 1e-13 relative on a closed-form CDF
    assert student_t_quantile(probability, df) == pytest.approx(
        stats.t.ppf(probability, df), rel=1e-10
    )


@pytest.mark.parametrize(
    "values",
    [
        [0.273 + 0.7, 0.273, 1.0],  # the bimodal spread that gave [0.273, 1.012] with mean +- z sd
        [1.0, 1.0, 0.98],
        [0.0, 0.0, 0.01],
        [1.0, 0.0],
        [0.5],
    ],
)
def test_proportion_interval_stays_in_unit_interval(values):
    mean, lo, hi = proportion_interval(values, samples=2048)
    assert 0.0 <= lo <= mean <= hi <= 1.0


def test_agreeing_runs_give_the_pooled_wilson_interval():
    # no spread between runs: only the needles' binomial noise, pooled over 3 runs
    mean, lo, hi = proportion_interval([0.25, 0.25, 0.25], samples=400)
    t = stats.t.ppf(0.975, 2)
    np.testing.assert_allclose([lo, hi], wilson_interval(0.25, 1200, z=t), rtol=1e-12)


def test_one_run_is_its_wilson_interval():
    _, lo, hi = proportion_interval([0.3], samples=500)
    np.testing.assert_allclose([lo, hi], wilson_interval(0.3, 500), rtol=1e-12)


def test_proportion_interval_covers_the_mean_of_bounded_runs():
    """Coverage over repeated experiments of 5 runs whose accuracies spread as Beta(2, 5)."""
    rng = np.random.default_rng(0)
    trials, true = 2000, 2 / 7
    hits = 0
    for _ in range(trials):
        _, lo, hi = proportion_interval(rng.beta(2, 5, 5), samples=2048)
        hits += lo <= true <= hi
    # nominal 0.95; measured 0.94 here (n = 5 is small): 0.925 is 3 binomial sd below that
    assert hits / trials >= 0.925


def test_mean_interval_is_cut_to_the_range():
    mean, lo, hi = mean_interval([0.05, 0.9, 0.95], 0.0, 1.0)
    assert lo == 0.0 and hi == 1.0  # the t interval runs past both ends here
    expected = stats.t.interval(0.95, 2, loc=np.mean([1.0, 2.0, 4.0]), scale=stats.sem([1, 2, 4]))
    np.testing.assert_allclose(mean_interval([1.0, 2.0, 4.0])[1:], expected, rtol=1e-10)
    assert all(math.isnan(v) for v in mean_interval([0.3])[1:])

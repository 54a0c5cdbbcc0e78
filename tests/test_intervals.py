"""Intervals across runs (`idealized.metrics`): inside the statistic's range, and covering."""

import math

import numpy as np
import pytest
from scipy import stats

from weakspots.idealized.metrics import (
    cluster_interval,
    cluster_range_floor,
    mean_interval,
    proportion_interval,
    student_t_quantile,
    studentized_range_quantile,
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


# ----------------------------------------------------------------------------- seeds as clusters

LEVEL, SIMULATIONS = 0.95, 2000
MC_SE = math.sqrt(LEVEL * (1 - LEVEL) / SIMULATIONS)  # sd of a coverage estimate at nominal


def _expit(x):
    return 1.0 / (1.0 + np.exp(-x))


def _population_accuracy(mu, sd):
    """E expit(mu + sd Z), Z standard normal (Gauss-Hermite, 80 nodes)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    return float(np.sum(weights * _expit(mu + sd * nodes)) / np.sqrt(2 * np.pi))


def _clustered_coverage(seeds, samples, seed_sd, item_sd, shared, rng):
    """Coverage of the pooled Wilson and of `cluster_interval` for the population accuracy when
    seed r answers item i with probability expit(mu + u_r + v_i): u_r seed random effects,
    v_i item effects, the items shared by every seed or drawn for each seed."""
    mu = math.log(0.8 / 0.2)
    truth = _population_accuracy(mu, math.hypot(seed_sd, item_sd))
    wilson = cluster = 0
    for _ in range(SIMULATIONS):
        u = seed_sd * rng.standard_normal((seeds, 1))
        v = item_sd * rng.standard_normal((1 if shared else seeds, samples))
        per_seed = (rng.random((seeds, samples)) < _expit(mu + u + v)).mean(axis=1)
        lo, hi = wilson_interval(per_seed.mean(), seeds * samples)
        wilson += lo <= truth <= hi
        _, lo, hi = cluster_interval(per_seed, samples)
        cluster += lo <= truth <= hi
    return wilson / SIMULATIONS, cluster / SIMULATIONS


def test_cluster_interval_covers_seeds_with_random_effects():
    """Four seeds with random effects (sd 0.4 on the logit), each scored on its own 200
    sequences (item effects sd 1): the pooled Wilson interval counts 800 independent trials
    and covers about 0.6; the interval over seeds covers near nominal (3 Monte Carlo sd)."""
    wilson, cluster = _clustered_coverage(4, 200, 0.4, 1.0, False, np.random.default_rng(1))
    assert wilson < LEVEL - 10 * MC_SE
    assert abs(cluster - LEVEL) < 3 * MC_SE


def test_seeds_sharing_their_sequences_are_not_independent_clusters():
    """The same seeds scored on one shared set whose items dominate (sd 3 against seeds' 0.2):
    every seed sees the same hard items, the seeds' spread leaves the items' share out, and
    the interval over seeds under-covers, which is why each seed has its own sequences."""
    wilson, cluster = _clustered_coverage(4, 200, 0.2, 3.0, True, np.random.default_rng(2))
    assert cluster < LEVEL - 5 * MC_SE
    assert wilson < LEVEL - 5 * MC_SE


def test_cluster_interval_of_agreeing_or_single_seeds_is_the_pooled_wilson():
    _, lo, hi = cluster_interval([1.0, 1.0, 1.0, 1.0], samples=500)  # at the ceiling
    np.testing.assert_allclose([lo, hi], wilson_interval(1.0, 2000), rtol=1e-12)
    _, lo, hi = cluster_interval([0.3], samples=500)
    np.testing.assert_allclose([lo, hi], wilson_interval(0.3, 500), rtol=1e-12)
    values = [0.78, 0.80, 0.82]  # seeds apart beyond their sampling noise: t with 2 df
    mean, lo, hi = cluster_interval(values, samples=1000)
    half = student_t_quantile(0.975, 2) * np.std(values, ddof=1) / math.sqrt(3)
    assert (mean, lo, hi) == pytest.approx((0.8, 0.8 - half, 0.8 + half), rel=1e-12)
    assert hi - lo > np.ptp(wilson_interval(0.8, 3000))


@pytest.mark.parametrize("groups, df", [(4, 3), (8, 7), (8, 21)])
def test_studentized_range_quantile_against_monte_carlo(groups, df):
    """P(range of `groups` standard normals / sqrt(chi2_df / df) <= q) at Tukey's q is 0.95."""
    rng = np.random.default_rng(groups * 100 + df)
    draws = 200_000
    z = rng.standard_normal((draws, groups))
    studentized = np.ptp(z, axis=1) / np.sqrt(rng.chisquare(df, draws) / df)
    below = np.mean(studentized <= studentized_range_quantile(0.95, groups, df))
    assert abs(below - 0.95) < 4 * math.sqrt(0.95 * 0.05 / draws)


def test_cluster_range_floor_holds_its_level_with_seed_effects():
    """No phase effect; each seed shifted (sd 0.4) and each seed x phase cell shifted (sd 0.3,
    a seed's own weak phases) on the logit, 8 phases of 200 own sequences per seed. The range
    of the seed-mean profile exceeds the floor in about 5% of experiments (3 Monte Carlo sd),
    and the floor ignores the seeds' shifts (adding a constant per seed changes nothing)."""
    rng = np.random.default_rng(3)
    seeds, phases, samples, trials = 4, 8, 200, 1000
    mu, exceed = math.log(0.8 / 0.2), 0
    for _ in range(trials):
        shifts = 0.4 * rng.standard_normal((seeds, 1))
        logit = mu + shifts + 0.3 * rng.standard_normal((seeds, phases))
        acc = rng.binomial(samples, _expit(logit)) / samples
        exceed += np.ptp(acc.mean(axis=0)) > cluster_range_floor(acc)
    assert abs(exceed / trials - 0.05) < 3 * math.sqrt(0.05 * 0.95 / trials)
    assert cluster_range_floor(acc + np.arange(seeds)[:, None] * 0.01) == pytest.approx(
        cluster_range_floor(acc), rel=1e-9
    )
    assert math.isnan(cluster_range_floor(acc[:1]))

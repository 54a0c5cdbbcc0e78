"""theory.sgd_onset: SGD's time to specialise with gradient noise, against the noisy linear
recursion it is derived from and against SGD at the reduced flow's init scales."""

import math

import numpy as np
import pytest

from weakspots.theory.sgd_onset import effective_init_scale, sgd_specialization_time


def _crossing_steps(growth, noise, lr, batch, init, stride, level, chains, rng, steps):
    """First step at which |u| >= level for u <- (1 + lr lambda) u - lr xi on s - 1 modes."""
    u = init * rng.standard_normal((chains, stride - 1))
    hit = np.full(chains, np.inf)
    for n in range(steps + 1):
        reached = (np.linalg.norm(u, axis=-1) >= level) & np.isinf(hit)
        hit[reached] = n
        u = (1 + lr * growth) * u - lr * math.sqrt(noise / batch) * rng.standard_normal(u.shape)
    return hit


@pytest.mark.parametrize("init", [1e-6, 1e-3])
def test_median_crossing_of_the_noisy_linear_recursion(init):
    """The recursion the derivation starts from, with d = inf's lambda and c at s=8 N=64
    gain 16 and SGD's lr 2, B 256 (tau = 0 here: no nonlinear stage). 4000 chains: the
    median step is known to ~1%; the formula's own error is the discreteness of a crossing
    (under one step) and the growth of chi while the noise still accumulates."""
    from weakspots.theory import growth_rate, uniform_moments

    s, lr, batch, level = 8, 2.0, 256, 0.25
    lam = float(growth_rate(s, 64, 16.0))
    _, c = uniform_moments(s, 64, math.inf, 16.0)
    rng = np.random.default_rng(0)
    hits = _crossing_steps(lam, c, lr, batch, init, s, level, 4000, rng, 400)
    predicted = sgd_specialization_time(s, 64, 16.0, init, math.inf, lr, batch, moments=(0, c))
    linear = predicted["time"] - predicted["offset"]
    assert lr * np.median(hits) == pytest.approx(linear, abs=2 * lr)


def test_noise_sets_the_start_below_its_floor():
    """Below the accumulated noise sigma_N the init scale no longer matters."""
    kwargs = {"moments": (0.0, 0.0169), "quantile": 0.5}
    small = sgd_specialization_time(8, 64, 16.0, 1e-5, 64, 2.0, 256, **kwargs)["time"]
    tiny = sgd_specialization_time(8, 64, 16.0, 1e-8, 64, 2.0, 256, **kwargs)["time"]
    assert tiny == pytest.approx(small, rel=1e-3)
    quiet = sgd_specialization_time(8, 64, 16.0, 1e-5, 64, 2.0, 1e12, **kwargs)["time"]
    assert quiet > 5 * small
    assert effective_init_scale(0.3, 0.04, 0.0169, 2.0, 256) == pytest.approx(0.3, rel=0.01)


# The reduced flow's init scales (sims.experiments.toy.specialization_time): geomspace(1e-5, 0.3, 7)
SGD_SCALES = np.geomspace(1e-5, 0.3, 7)
SGD_SEEDS = 16


@pytest.mark.slow  # about 3 min on 2 cores
def test_median_time_to_specialise_matches_sgd():
    """s=8 N=64 gain 16 d=64, lr 2, B 256, 16 seeds per init scale: the predicted median t*
    inside the distribution-free 98% interval of the SGD median (4th to 13th of 16 sorted
    crossing times; binomial(16, 1/2) puts 98% between them)."""
    from weakspots.idealized.toy.config import TrainConfig
    from weakspots.sims.toy.train import train_many
    from weakspots.theory import uniform_moments

    configs = [
        TrainConfig(init_scale=float(a), steps=120, eval_every=1, eval_samples=16, seed=i)
        for a in SGD_SCALES
        for i in range(SGD_SEEDS)
    ]
    results = train_many(configs)
    moments = uniform_moments(8, 64, 64, 16.0)
    for j, scale in enumerate(SGD_SCALES):
        times = []
        for r in results[j * SGD_SEEDS : (j + 1) * SGD_SEEDS]:
            logw = np.log(np.asarray(r.history.pooling_weights, float))
            delta = np.linalg.norm(logw - logw.mean(axis=-1, keepdims=True), axis=(-2, -1))
            above = np.flatnonzero(delta >= 0.25)
            i = int(above[0])
            if i == 0:
                times.append(0.0)
                continue
            t = np.asarray(r.history.times, float)
            f = (0.25 - delta[i - 1]) / (delta[i] - delta[i - 1])
            times.append(t[i - 1] + f * (t[i] - t[i - 1]))
        times = np.sort(times)
        predicted = sgd_specialization_time(8, 64, 16.0, scale, 64, 2.0, 256, moments=moments)
        assert times[3] - 2.0 <= predicted["time"] <= times[12] + 2.0, (scale, times)

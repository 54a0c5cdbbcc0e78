"""theory.noise_floor: the OU noise floor of delta_max against its recursion, its d = inf limit, and SGD."""

import math

import numpy as np
import pytest

from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.toy.train import train_many
from weakspots.theory.noise_floor import (
    logit_variance,
    noise_floor,
    stationary_covariance,
    uniform_moments,
)

SIM_RTOL = 0.05  # 4000 chains: sampling error of a variance ~ sqrt(2/4000) = 2.2%
LIMIT_RTOL = 0.03  # d = 1e6: finite-d corrections O(1/sqrt(d)), MC error ~1% at 2^15 problems
STD_RTOL = 0.25  # pooling-weight std from 8 runs x 7 zero-sum modes: ~9.5% sampling error


def _ou_chains(k, c, lr, batch, steps, chains, init, rng):
    m = len(k)
    a = init * rng.standard_normal((chains, m))
    root = np.linalg.cholesky(c / batch)
    for _ in range(steps):
        xi = rng.standard_normal((chains, m)) @ root.T
        a = a - lr * (a @ k.T + xi)
    return a


def test_lyapunov_solution_matches_a_long_simulation_of_the_linear_recursion():
    rng = np.random.default_rng(0)
    m = 3
    basis = np.linalg.qr(rng.standard_normal((m, m)))[0]
    k = basis @ np.diag([0.05, 0.3, 0.9]) @ basis.T  # eta k up to 1.8: discrete, not continuous
    c = np.cov(rng.standard_normal((m, 50))) + 0.5 * np.eye(m)
    lr, batch = 2.0, 16
    predicted = stationary_covariance(k, c, lr, batch)
    chains = _ou_chains(k, c, lr, batch, 400, 4000, 0.0, rng)  # 400 steps: 40 relaxation times
    measured = np.cov(chains.T)
    scale = np.sqrt(np.outer(np.diag(predicted), np.diag(predicted)))
    np.testing.assert_allclose(measured / scale, predicted / scale, atol=SIM_RTOL)
    # the continuous (small-eta) Lyapunov answer eta C / (2 B K) would be off by far more here
    assert not np.allclose(predicted[0, 0], lr * c[0, 0] / (2 * batch * k[0, 0]), rtol=0.3)


def test_transient_from_the_init_scale_matches_the_recursion():
    rng = np.random.default_rng(1)
    kappa, c, lr, batch, init = 0.02, 0.5, 1.0, 32, 0.3
    for steps in (10, 50, 200):
        chains = _ou_chains(np.eye(1) * kappa, np.eye(1) * c, lr, batch, steps, 4000, init, rng)
        assert np.var(chains) == pytest.approx(
            logit_variance(kappa, c, lr, batch, steps, init), rel=SIM_RTOL
        )


def test_no_stationary_state_past_the_step_size_limit():
    with pytest.raises(ValueError, match="no stationary state"):
        stationary_covariance(1.5, 1.0, 2.0, 8)  # |1 - 3| > 1
    with pytest.raises(ValueError, match="no stationary state"):
        stationary_covariance(-0.1, 1.0, 2.0, 8)  # unstable uniform point


@pytest.mark.parametrize(("stride", "chunks", "loss"), [(8, 12, "mse"), (8, 64, "ce")])
def test_monte_carlo_moments_reach_the_closed_form_at_large_dim(stride, chunks, loss):
    kappa_inf, c_inf = uniform_moments(stride, chunks, math.inf, 16.0, loss)
    kappa, c = uniform_moments(stride, chunks, 10**6, 16.0, loss, samples=2**15)
    assert kappa == pytest.approx(kappa_inf, rel=LIMIT_RTOL)
    assert c == pytest.approx(c_inf, rel=LIMIT_RTOL)


@pytest.mark.slow  # about 40 s on 2 cores
def test_noise_floor_matches_sgd_below_threshold():
    """N = 12 < N_c: 8 SGD runs (lr 2, 600 steps) against the OU prediction at d = 64."""
    config = TrainConfig(chunks=12, eval_every=600, eval_samples=2048)
    seeds = 8
    results = train_many([config.replace(seed=s) for s in range(seeds)])
    weights = np.stack([np.asarray(r.model.pooling_weights())[0] for r in results])
    deltas = np.array([r.summary()["delta_max"] for r in results])
    pred = noise_floor(8, 12, 64, 16.0, 2.0, 256, 600, 2048, "mse", seeds=seeds)
    assert weights.std() == pytest.approx(pred["weight_std"], rel=STD_RTOL)
    low, high = pred["mean_of_seeds_interval"]  # 90%
    assert low <= deltas.mean() <= high


def test_without_pooling_noise_the_floor_is_the_range_of_the_held_out_errors():
    # lr -> 0 and a zero init leave the pooling uniform: delta_max is the range of s i.i.d.
    # normals of sd sqrt(acc (1 - acc) / n); E range of 8 standard normals = 2.8472.
    pred = noise_floor(8, 12, 64, 16.0, 1e-9, 256, 1, 2048, moments=(0.03, 0.05), init_scale=0)
    assert pred["pooling_sd"] < 1e-6
    assert pred["eval_sd"] == pytest.approx(
        math.sqrt(pred["accuracy"] * (1 - pred["accuracy"]) / 2048)
    )
    assert pred["delta_max_mean"] == pytest.approx(2.8472 * pred["eval_sd"], rel=0.01)

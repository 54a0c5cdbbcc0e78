"""theory.noise: the OU noise floor of delta_max against its recursion, its d = inf limit, and SGD."""

import math

import numpy as np
import pytest

from weakspots.idealized.config import TrainConfig
from weakspots.sims.train import train_many
from weakspots.theory.noise import (
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


# --- escape from a metastable well ------------------------------------------------------

PASSAGE_RTOL = 0.08  # 2000 ~exponential passage times: 2.2% sampling error; dt = 0.005 bias
KRAMERS_RTOL_4T = 0.25  # Kramers is asymptotic: at barrier 4 T its O(T / barrier) error shows
KRAMERS_RTOL_15T = 0.05


def _double_well(barrier):
    """U = barrier (x^2 - 1)^2: wells at +-1 (curvature 8 barrier), saddle at 0 (-4 barrier)."""
    return (lambda x: barrier * (x**2 - 1) ** 2), (lambda x: 4 * barrier * x * (x**2 - 1))


def _passage_times(force, diffusion, start, end, dt, chains, rng, max_steps=400_000):
    x = np.full(chains, float(start))
    times = np.full(chains, np.nan)
    for n in range(max_steps):
        alive = np.isnan(times)
        if not alive.any():
            break
        xa = x[alive]
        x[alive] = (
            xa - force(xa) * dt + np.sqrt(2 * diffusion(xa) * dt) * rng.standard_normal(xa.shape)
        )
        times[alive & (x >= end)] = (n + 1) * dt
    return times


@pytest.mark.parametrize("varying", [False, True])
def test_first_passage_time_matches_a_langevin_simulation(varying):
    from weakspots.theory.noise import first_passage_time

    barrier, temperature = 1.0, 1.0 / 3.0  # barrier 3 T
    _, force = _double_well(barrier)

    def diffusion(x):  # Ito, position-dependent: the SGD noise falls towards the saddle
        return temperature * (1.0 - 0.4 * np.tanh(x + 1.0)) if varying else temperature + 0 * x

    rng = np.random.default_rng(3)
    times = _passage_times(force, diffusion, -1.0, 1.0, 0.005, 2000, rng)
    assert not np.isnan(times).any()
    grid = np.linspace(-2.2, 1.0, 4001)
    predicted = first_passage_time(grid, -force(grid), diffusion(grid))
    assert times.mean() == pytest.approx(predicted, rel=PASSAGE_RTOL)


def test_kramers_rate_is_the_high_barrier_limit_of_the_passage_time():
    from weakspots.theory.noise import first_passage_time, kramers_rate

    grid = np.linspace(-2.2, 1.0, 8001)
    for ratio, rtol in ((4.0, KRAMERS_RTOL_4T), (15.0, KRAMERS_RTOL_15T)):
        barrier, temperature = 1.0, 1.0 / ratio
        _, force = _double_well(barrier)
        # escape = reaching x = 1 means crossing the saddle once, then half the flux returns
        # before thermalising on the far side only at low barrier; passage to the far well
        # bottom is 1/k + a relaxation time that vanishes relative to 1/k as barrier/T grows
        tau = first_passage_time(grid, -force(grid), np.full_like(grid, temperature))
        rate = kramers_rate(barrier, temperature, [8 * barrier], [-4 * barrier])
        assert 1.0 / tau == pytest.approx(rate, rel=rtol)


def test_kramers_rate_refuses_a_state_that_is_not_a_well_and_a_saddle():
    from weakspots.theory.noise import kramers_rate

    with pytest.raises(ValueError, match="index-1 saddle"):
        kramers_rate(1.0, 0.1, [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="index-1 saddle"):
        kramers_rate(1.0, 0.1, [1.0, -1.0], [-1.0, 1.0])


ESCAPE_LEVEL = 0.95  # escaped-run count must fall in this central binomial interval


@pytest.fixture(scope="module")
def metastable_path():
    from weakspots.theory.noise import escape_path

    return escape_path(4, 64, 64, 16.0, samples=2**16)  # about 70 s on 2 cores


@pytest.mark.slow  # about 3 min on 2 cores
@pytest.mark.parametrize(
    ("lr", "steps"),
    [
        (1.0, 1200),
        pytest.param(
            2.0,
            600,
            marks=pytest.mark.xfail(
                strict=True,
                reason="barrier 2.5 T: the 1-D passage model predicts P = 0.73-0.81, SGD "
                "escapes in about 0.3-0.4 of runs (theory.noise escape section)",
            ),
        ),
    ],
)
def test_escape_fraction_from_the_metastable_uniform_well_matches_sgd(metastable_path, lr, steps):
    """s=4 N=64 d=64 gain 16 (uniform stable at d = inf, metastable at d = 64), t = 1200."""
    from scipy.stats import binom

    from weakspots.theory.noise import escape_probability, escape_rate

    seeds = 16
    config = TrainConfig(stride=4, chunks=64, lr=lr, steps=steps, eval_every=steps)
    results = train_many([config.replace(seed=s) for s in range(seeds)])
    escaped = sum(float(np.min(r.model.pooling_weights())) < 0.1 for r in results)
    rate = escape_rate(metastable_path, 4, lr, config.batch)["rate"]
    p = escape_probability(rate, lr * steps)
    low, high = binom.interval(ESCAPE_LEVEL, seeds, p)
    assert low <= escaped <= high


def _cubic_path(stride, barrier, saddle_x, noise):
    """A drop-one-phase path with a cubic loss: well at 0, saddle at saddle_x, constant noise."""
    scale = math.sqrt(1 - 1 / stride)
    drop = np.linspace(-0.6, 2.0, 131) * saddle_x / scale
    x = drop * scale
    r = x / saddle_x
    curvature = 6 * barrier / saddle_x**2
    return {
        "drop": drop,
        "x": x,
        "loss": barrier * (3 * r**2 - 2 * r**3),
        "curvature": curvature * (1 - 2 * r),
        "noise": np.full_like(x, noise),
        "transverse_curvature": np.full_like(x, curvature),
        "transverse_noise": np.full_like(x, noise),
    }


def test_escape_rate_reaches_kramers_over_s_saddles_at_a_high_barrier():
    from weakspots.theory.noise import escape_rate, kramers_rate

    stride, lr, batch, barrier = 4, 1.0, 256, 0.003
    noise = 2 * batch * barrier / (15.0 * lr)  # barrier = 15 T
    path = _cubic_path(stride, barrier, 0.4, noise)
    got = escape_rate(path, stride, lr, batch)
    curvature = 6 * barrier / 0.4**2
    single = kramers_rate(barrier, barrier / 15.0, [curvature] * 3, [-curvature] + [curvature] * 2)
    assert got["barrier"] == pytest.approx(barrier, rel=1e-6)
    assert got["kramers_rate"] == pytest.approx(stride * single, rel=1e-9)
    assert got["rate"] == pytest.approx(stride * single, rel=KRAMERS_RTOL_15T)


def test_escape_mixture_limits_are_the_floor_and_the_escaped_state():
    from weakspots.theory.noise import delta_max_distribution, delta_max_with_escape

    floor = {"pooling_sd": 0.02, "eval_sd": 0.01}
    stay = delta_max_with_escape(floor, 4, 0.0, 0.97, seeds=4, level=0.9, draws=4000)
    ref = delta_max_distribution(0.02, 0.01, 4, seeds=4, level=0.9, draws=4000)
    assert stay["delta_max_mean"] == pytest.approx(ref["delta_max_mean"], rel=0.03)
    np.testing.assert_allclose(
        stay["mean_of_seeds_interval"], ref["mean_of_seeds_interval"], rtol=0.05
    )
    gone = delta_max_with_escape(floor, 4, 1.0, 0.97, seeds=4)
    assert gone["delta_max_mean"] == pytest.approx(0.97)
    assert gone["mean_of_seeds_interval"] == pytest.approx((0.97, 0.97))
    # half the runs escaping: the seed mean of 4 spreads over the binomial's 0..4 escapes
    half = delta_max_with_escape(floor, 4, 0.5, 0.97, seeds=4, level=0.95)
    low, high = half["mean_of_seeds_interval"]
    assert low < 0.97 / 4 < 3 * 0.97 / 4 < high


ESCAPE_NOISE_RTOL = 0.06  # two Monte Carlo estimates of c (2^14 problems each): ~1.5% apart


def test_finite_d_escape_path_starts_at_the_uniform_curvature_and_noise():
    """Its loss and curvature come from L_d's interpolant, its noise from fresh problems: at
    u = 0 they must give lambda_d (the quadrature's Hessian) and uniform_moments' c."""
    from weakspots.theory import escape_path_finite_d, growth_rate_finite_d

    path = escape_path_finite_d(4, 64, 64, 16.0, drops=np.array([-0.1, 0.0, 0.1, 0.5]))
    well = 1
    assert path["loss"][well] == 0.0
    assert path["curvature"][well] == pytest.approx(
        -growth_rate_finite_d(4, 64, 16.0, 64), rel=1e-4
    )
    # by symmetry, at uniform pooling the along and transverse directions are equivalent
    assert path["transverse_curvature"][well] == pytest.approx(path["curvature"][well], rel=1e-6)
    _, c = uniform_moments(4, 64, 64, 16.0, samples=2**14, seed=7)
    assert path["noise"][well] == pytest.approx(c, rel=ESCAPE_NOISE_RTOL)
    # the barrier of L_d at s=4, N=64, gain 16, d=64 (theory.noise escape section: 0.0026
    # from 2^18 Monte Carlo problems of the trainer's loss, +- 0.0003)
    assert path["loss"][3] == pytest.approx(0.0026, abs=3e-4)


def test_discrete_escape_needs_noise_and_grows_with_it():
    """The L_d recursion at s=4 N=64 d=64 (uniform metastable): noiseless chains stay in the
    well; the escaped fraction rises with the noise level (here: 8 x the measured c)."""
    from weakspots.theory import escape_fraction_discrete

    drops = np.arange(-2, 16) * 0.1
    quiet = {"drop": drops, "noise": np.zeros(18), "transverse_noise": np.zeros(18)}
    args = (4, 64, 64, 16.0, 2.0, 256, 600)
    assert escape_fraction_discrete(quiet, *args, chains=64) == 0.0
    loud = {"drop": drops, "noise": np.full(18, 2.0), "transverse_noise": np.full(18, 2.0)}
    assert escape_fraction_discrete(loud, *args, chains=64) > 0.9


@pytest.mark.slow  # about 2 min on 2 cores
@pytest.mark.parametrize(("lr", "steps"), [(2.0, 600), (1.0, 1200)])
def test_discrete_escape_fraction_matches_sgd(lr, steps):
    """s=4 N=64 d=64 gain 16 (metastable uniform), t = 1200: the SGD recursion on L_d with the
    escape path's noise (theory.escape_fraction_discrete, 1024 chains) against 64 SGD seeds
    of the trainer; escaped means min alpha < 0.1 at the end, in both."""
    from scipy.stats import binom

    from weakspots.theory import escape_fraction_discrete
    from weakspots.theory.noise import escape_path_finite_d

    seeds = 64
    config = TrainConfig(stride=4, chunks=64, lr=lr, steps=steps, eval_every=steps)
    path = escape_path_finite_d(4, 64, 64, 16.0, samples=2**14)
    p = escape_fraction_discrete(
        path, 4, 64, 64, 16.0, lr, config.batch, steps, config.init_scale, chains=1024
    )
    results = train_many([config.replace(seed=s) for s in range(seeds)])
    escaped = sum(float(np.min(r.model.pooling_weights())) < 0.1 for r in results)
    low, high = binom.interval(ESCAPE_LEVEL, seeds, p)
    assert low <= escaped <= high, (p, escaped)

"""theory.escape: passage times against Langevin simulations, the discrete recursion's
diffusion limit, the transverse modes' mean force, and SGD's escapes from metastable uniform pooling."""

import math

import numpy as np
import pytest

from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.toy.train import train_many
from weakspots.theory.escape import (
    escape_passage,
    escape_path_finite_d,
    escape_rate,
    escape_within,
    escaped_weight,
    first_passage_time,
    kramers_rate,
    passage_survival,
)
from weakspots.theory.noise_floor import uniform_moments

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
    with pytest.raises(ValueError, match="index-1 saddle"):
        kramers_rate(1.0, 0.1, [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="index-1 saddle"):
        kramers_rate(1.0, 0.1, [1.0, -1.0], [-1.0, 1.0])


def _cubic_path(stride, barrier, saddle_x, noise, transverse_noise=None, growth=0.0, fall=0.0):
    """A drop-one-phase path with a cubic loss: well at 0, saddle at saddle_x. Noise along
    the path `noise` at the well, falling by the fraction `fall` towards the saddle; transverse
    noise constant (default `noise`); transverse curvature the well's times
    1 + growth tanh(2 x / saddle_x). The path starts at -0.6 saddle_x (-0.3 with growth)."""
    scale = math.sqrt(1 - 1 / stride)
    x = np.linspace(-0.3 if growth else -0.6, 2.0, 131) * saddle_x
    r = x / saddle_x
    curvature = 6 * barrier / saddle_x**2
    along = noise * (1 - fall * (1 + np.tanh(3 * (r - 0.5))) / 2)
    return {
        "drop": x / scale,
        "x": x,
        "loss": barrier * (3 * r**2 - 2 * r**3),
        "curvature": curvature * (1 - 2 * r),
        "noise": along,
        "transverse_curvature": curvature * (1 + growth * np.tanh(2 * r)),
        "transverse_noise": np.full_like(
            x, noise if transverse_noise is None else transverse_noise
        ),
    }


def test_escape_rate_reaches_kramers_over_s_saddles_at_a_high_barrier():
    stride, lr, batch, barrier = 4, 0.01, 256, 0.003  # lr -> 0: the continuous-time limit
    noise = 2 * batch * barrier / (15.0 * lr)  # barrier = 15 T
    path = _cubic_path(stride, barrier, 0.4, noise)
    got = escape_rate(path, stride, lr, batch)
    curvature = 6 * barrier / 0.4**2
    single = kramers_rate(barrier, barrier / 15.0, [curvature] * 3, [-curvature] + [curvature] * 2)
    assert got["barrier"] == pytest.approx(barrier, rel=1e-6)
    assert got["kramers_rate"] == pytest.approx(stride * single, rel=1e-9)
    assert got["rate"] == pytest.approx(stride * single, rel=KRAMERS_RTOL_15T)


CHAIN_LEVEL = 0.99  # escaped-chain count must fall in this central binomial interval


def _escaped_chains(path, stride, lr, batch, steps, chains, seed):
    """The SGD recursion on U(x) + mu(x) |y|^2 / 2 with s - 2 transverse modes y, near one
    saddle: x <- x - lr (U' + mu' |y|^2 / 2 + xi_x), y <- y - lr (mu y + xi_y), Var xi = c / B
    along and c_perp / B across, reflecting at the path's start. Returns how many of
    `chains` (from x = y = 0) are past the path's end after `steps` steps; c along the path
    may vary with x, c_perp is constant."""
    rng = np.random.default_rng(seed)
    grid = path["x"]
    slope = np.gradient(path["loss"], grid)
    mu_slope = np.gradient(path["transverse_curvature"], grid)
    across = math.sqrt(path["transverse_noise"][0] / batch)
    x, y = np.zeros(chains), np.zeros((chains, stride - 2))
    done = np.zeros(chains, bool)
    for _ in range(steps):
        force = np.interp(x, grid, slope) + 0.5 * np.interp(x, grid, mu_slope) * np.sum(y**2, 1)
        mu = np.interp(x, grid, path["transverse_curvature"])[:, None]
        along = np.sqrt(np.interp(x, grid, path["noise"]) / batch)
        x = np.where(done, x, x - lr * (force + along * rng.standard_normal(chains)))
        y = y - lr * (mu * y + across * rng.standard_normal(y.shape))
        done |= x >= grid[-1]
        x = np.maximum(x, grid[0])
    return int(done.sum())


def _one_saddle(path, stride, lr, batch, steps):
    """P(the passage along one line has ended by `steps` steps), from uniform pooling."""
    return 1.0 - passage_survival(escape_passage(path, stride, lr, batch), lr * steps)


def _chain_check(path, stride, lr, batch, steps, chains=2000, seed=0):
    from scipy.stats import binom

    p = _one_saddle(path, stride, lr, batch, steps)
    escaped = _escaped_chains(path, stride, lr, batch, steps, chains, seed)
    return p, escaped, binom.interval(CHAIN_LEVEL, chains, p)


def test_passage_carries_the_step_size_of_the_discrete_recursion():
    """lr times the well curvature = 0.48, constant transverse curvature: escape_rate, with
    the step size carried by the matched diffusion, follows the discrete chain (16000 chains
    gave 0.518 against 0.514 predicted, 0.490 in the continuous-time limit)."""
    stride, barrier, saddle, lr, batch, steps = 4, 0.01, 0.5, 2.0, 1, 200
    temperature = barrier / 3.0
    path = _cubic_path(stride, barrier, saddle, 2 * batch * temperature / lr)
    p, escaped, (low, high) = _chain_check(path, stride, lr, batch, steps)
    assert low <= escaped <= high, (p, escaped)


# The 1-D reduction (transverse modes adiabatic, acting through their mean force) is not
# exact where the transverse curvature changes along the path: on the chain below the
# passage rate is 1.35 (hot, 16000 chains; 1.6 with 4000 chains of another seed) and 1.25
# (cold) times the predicted one; with a constant transverse curvature it matches (test
# above). A model error, stated here and in docs/theory_derivations.md, not sampling noise.
TRANSVERSE_RATE_FACTOR = 2.0


def test_transverse_modes_push_through_their_mean_force():
    """As on the s=4, N=64, d=64 path: the noise along the path falls to 0.4 of the well's at
    the saddle while the transverse noise stays (transverse modes 2.5 times hotter there),
    and the transverse curvature grows from the well's to 2.4 times it. The hot transverse
    modes' mean force slows the escape 2.7-fold against cold ones (0.4 times the noise), and
    the chains follow, with the 1-D reduction's error (TRANSVERSE_RATE_FACTOR)."""
    stride, barrier, saddle, lr, batch, steps, chains = 4, 0.01, 0.5, 1.0, 1, 400, 4000
    noise = 2 * batch * barrier / (3.0 * lr)  # barrier = 3 T at the well
    rates = []
    for transverse in (noise, 0.4 * noise):
        path = _cubic_path(stride, barrier, saddle, noise, transverse, growth=1.5, fall=0.6)
        predicted = -math.log(1.0 - _one_saddle(path, stride, lr, batch, steps))
        escaped = _escaped_chains(path, stride, lr, batch, steps, chains, seed=1)
        measured = -math.log(1.0 - escaped / chains)
        assert 1.0 / TRANSVERSE_RATE_FACTOR < measured / predicted < TRANSVERSE_RATE_FACTOR
        rates.append((predicted, measured))
    (hot, hot_measured), (cold, cold_measured) = rates
    assert cold > 2.0 * hot and cold_measured > 2.0 * hot_measured


def test_escape_mixture_limits_are_the_floor_and_the_escaped_state():
    from weakspots.theory import delta_max_distribution, delta_max_with_escape

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
    # the barrier of L_d at s=4, N=64, gain 16, d=64 (0.0026
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


ESCAPE_LEVEL = 0.95  # escaped-run count must fall in this central binomial interval
ESCAPE_SEEDS = 64
# (stride, chunks, dim, gain, lr, steps), batch 256: three strides, two learning rates at
# s=4 and s=6, two context lengths at s=8; uniform pooling linearly stable at d in all
# (lambda_d < 0), a lower (s-1)-phase state past a saddle 0.3 to 5 temperatures up
SHALLOW = pytest.mark.xfail(
    strict=True,
    reason="barrier under 0.5 T: no activated escape; the s saddles do not compete "
    "independently (the simulated recursion with all modes matches SGD there)",
)
ESCAPE_POINTS = [
    (4, 64, 64, 16.0, 2.0, 600),
    (4, 64, 64, 16.0, 1.0, 1200),
    pytest.param(6, 17, 48, 12.0, 1.0, 600, marks=SHALLOW),  # 0.26 T: 0.35 vs SGD 32/64
    (6, 17, 48, 12.0, 0.5, 1200),
    (5, 30, 64, 14.0, 0.5, 1200),
    (8, 15, 64, 16.0, 2.0, 600),
    pytest.param(8, 16, 64, 16.0, 2.0, 600, marks=SHALLOW),  # 0.39 T: 0.73 vs SGD 54/64
]


@pytest.mark.slow  # 1-4 min per point on 2 cores
@pytest.mark.parametrize(("stride", "chunks", "dim", "gain", "lr", "steps"), ESCAPE_POINTS)
def test_escape_probability_matches_sgd(stride, chunks, dim, gain, lr, steps):
    """64 SGD seeds of the trainer against escape_within; a run has escaped once its smallest
    pooling weight reached escaped_weight (the end of the passage), checked every 10 steps."""
    from scipy.stats import binom

    from weakspots.theory import growth_rate_finite_d

    assert growth_rate_finite_d(stride, chunks, gain, dim) < 0  # metastable, not unstable
    config = TrainConfig(
        stride=stride, chunks=chunks, dim=dim, gain=gain, lr=lr, steps=steps,
        eval_every=10, eval_samples=16,
    )  # fmt: skip
    p = escape_within(stride, chunks, gain, dim, lr, config.batch, steps)
    level = escaped_weight(stride)
    results = train_many([config.replace(seed=s) for s in range(ESCAPE_SEEDS)])
    escaped = sum(float(np.min(r.history.pooling_weights)) <= level for r in results)
    low, high = binom.interval(ESCAPE_LEVEL, ESCAPE_SEEDS, p)
    assert low <= escaped <= high, (p, escaped)


@pytest.mark.slow  # about 1 min on 2 cores
def test_escape_agrees_with_the_simulated_recursion():
    """Consistency: the passage's 1 - S^s against the SGD recursion on L_d with the path's
    noise in all s - 1 zero-sum modes (theory.escape_fraction_discrete, 1024 chains), s=4
    N=64 d=64 lr 2, 600 steps: their rates -log(1 - P) agree within the 1-D reduction's
    error (TRANSVERSE_RATE_FACTOR; here 1.15: 0.45 simulated against 0.405, 3 binomial
    standard errors apart)."""
    from weakspots.theory import escape_fraction_discrete

    path = escape_path_finite_d(4, 64, 64, 16.0)
    p = 1.0 - passage_survival(escape_passage(path, 4, 2.0, 256), 1200.0) ** 4
    simulated = escape_fraction_discrete(path, 4, 64, 64, 16.0, 2.0, 256, 600, 0.01, 1024)
    ratio = math.log(1.0 - simulated) / math.log(1.0 - p)
    assert 1.0 / TRANSVERSE_RATE_FACTOR < ratio < TRANSVERSE_RATE_FACTOR, (p, simulated)

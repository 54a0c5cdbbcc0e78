"""Measurements the experiments make, shared with the tests so that both measure alike.

Order parameters of pooling weights (`log_weights_centred`, `order_parameter`,
`mode_norms`), rates and times read off trajectories (`fitted_rates`, `crossing_time`,
`reentry_slopes`), independent references (`rk4`, a numpy RK4 of the reduced flow with a
hand-derived gradient; `monte_carlo_accuracy`, a direct Monte Carlo of the retrieval
task), the setups tests and experiments share (`sgd_config`,
`flows_from_the_trainers_start`, `reduced_weights`) with the tolerances they are checked
at, and tolerances from a measurement's sampling noise (`mean_half_width`,
`normal_half_width`). The physics is the canonical config's (`canonical`).
"""

from __future__ import annotations

import math
import statistics

import numpy as np

from weakspots import theory
from weakspots.idealized.metrics import mean_interval
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import FlowConfig, TrainConfig
from weakspots.idealized.toy.model import initial_pooling_logits
from weakspots.sims.experiments.canonical import CHUNKS, GAIN, STRIDE
from weakspots.sims.toy.flow import finite_flow, solve, solve_many, stack
from weakspots.theory.reduced import centred_logits

# Trainer against the finite-d flow from the same start, max abs pooling weight over the
# trajectory: an allowance, not derived, for SGD's minibatch noise and its finite step
# about the flow of the expected loss (lr 0.5, batch 256).
SGD_ATOL = 0.03
# The re-entry law is leading order in the dropped weight (1e-4) and is read over the
# first tenth of the run, where 1/alpha_k has moved by 2%: the next order is that size.
REENTRY_RTOL = 0.02


# Where sampling drives a row's error, its tolerance is the half-width of the interval
# that a correct prediction misses with this probability: that of 3 standard errors of a
# normal (about one false alarm in 370 rows).
FALSE_ALARM = 0.0027


def mean_half_width(values, comparisons: int = 1) -> float:
    """Half-width of the Student-t interval of the mean of `values` (n >= 2 draws;
    idealized.metrics.mean_interval), missing the true mean with probability
    FALSE_ALARM / comparisons. Returns a float in the units of `values`."""
    _, low, high = mean_interval(values, confidence=1.0 - FALSE_ALARM / comparisons)
    return 0.5 * (high - low)


def normal_half_width(variance, comparisons: int = 1) -> float:
    """Half-width of the normal interval of an estimate of known `variance`, missing the
    true value with probability FALSE_ALARM / comparisons (binomial: p (1 - p) / trials)."""
    z = statistics.NormalDist().inv_cdf(1.0 - FALSE_ALARM / (2 * comparisons))
    return float(z * math.sqrt(variance))


def log_weights_centred(weights):
    """log alpha - mean_phi log alpha (theory.reduced.centred_logits of log alpha), (..., s)."""
    return centred_logits(np.log(np.asarray(weights)))


def order_parameter(weights) -> np.ndarray:
    """delta = |log alpha - mean log alpha| over (heads, phases) (theory.specialization_order).

    weights: (..., H, s). Returns (...,).
    """
    centred = log_weights_centred(np.asarray(weights, float))
    return np.sqrt(np.sum(centred**2, axis=(-2, -1)))


def mode_norms(weights):
    """|common| and |differential| parts of P a, the centred log pooling weights `(..., H, s)`.

    common: the mean over heads (every head moves alike); differential: the rest. Both are
    invariant subspaces of the flow linearised about uniform pooling, growing at
    theory.growth_rates' lambda_common and lambda_differential. Returns two `(...)` arrays.
    """
    centred = log_weights_centred(weights)
    common = centred.mean(axis=-2, keepdims=True)
    return np.linalg.norm(common, axis=(-2, -1)), np.linalg.norm(centred - common, axis=(-2, -1))


def fitted_rates(hist, i0, i1):
    """Exponential rates of the common and differential parts of P a between two saves.

    hist: a batched FlowHistory; returns [common (B,), differential (B,) or None].
    """
    dt = float(hist.times[0, i1] - hist.times[0, i0])
    norms = mode_norms(hist.pooling_weights)  # each (B, T)
    return [np.log(n[:, i1] / n[:, i0]) / dt if np.all(n > 0) else None for n in norms]


def crossing_time(times, values, level) -> float:
    """First time `values` reaches `level`, linearly interpolated (inf if never)."""
    times, values = np.asarray(times, float), np.asarray(values, float)
    above = np.nonzero(values >= level)[0]
    if not above.size:
        return float("inf")
    i = int(above[0])
    if i == 0:
        return float(times[0])
    f = (level - values[i - 1]) / (values[i] - values[i - 1])
    return float(times[i - 1] + f * (times[i] - times[i - 1]))


def most_common(values) -> float:
    """The most frequent of `values` (the smallest on a tie)."""
    values, counts = np.unique(np.asarray(values), return_counts=True)
    return float(values[np.argmax(counts)])


def numpy_gradient(logits, gain, chunks):
    """Hand-derived dL/da of the mse reduced loss (no autodiff), logits (H, s), gain (H,)."""
    heads, stride = logits.shape
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    margin = gain[:, None] * weights
    sigma = 1.0 / (1.0 + (chunks - 1.0) * np.exp(-margin))
    pbar = sigma.mean(axis=0)
    scale = chunks / (chunks - 1.0) / stride
    d_weights = (
        scale * 2.0 * (1.0 - pbar)[None, :] * (-1.0 / heads) * sigma * (1 - sigma) * gain[:, None]
    )
    return weights * (d_weights - np.sum(weights * d_weights, axis=1, keepdims=True))


def rk4(logits, gain, chunks, ts, dt):
    """Fixed-step RK4 (numpy, step <= dt) of the mse reduced flow; logits at each of ts."""
    out, y, t = [logits.copy()], logits.copy(), ts[0]
    for t_next in ts[1:]:
        steps = int(round((t_next - t) / dt))
        h = (t_next - t) / steps
        for _ in range(steps):
            k1 = -numpy_gradient(y, gain, chunks)
            k2 = -numpy_gradient(y + 0.5 * h * k1, gain, chunks)
            k3 = -numpy_gradient(y + 0.5 * h * k2, gain, chunks)
            k4 = -numpy_gradient(y + h * k3, gain, chunks)
            y = y + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t_next
        out.append(y.copy())
    return np.stack(out)


def monte_carlo_accuracy(weights, chunks, dim, samples, seed):
    """Draw keys x[c, j] ~ N(0, I/d), query each phase's needle, argmax over compressed keys.

    weights: (s,) fixed pooling weights; samples: needles per phase (a multiple of 500 is
    used in full). Returns the fraction retrieved per phase, (s,).
    """
    rng = np.random.default_rng(seed)
    stride = weights.shape[0]
    wins = np.zeros(stride)
    batch = 500
    for _ in range(samples // batch):
        keys = rng.standard_normal((batch, chunks, stride, dim), dtype=np.float32) / np.sqrt(dim)
        compressed = np.einsum("j,bcjd->bcd", weights.astype(np.float32), keys)
        queries = keys[:, 0]  # needle chunk c* = 0 (chunks are exchangeable), every phase
        logits = np.einsum("bpd,bcd->bpc", queries, compressed)
        wins += np.sum(np.argmax(logits, axis=-1) == 0, axis=0)
    return wins / (samples // batch * batch)


def decisive_seed(config: TrainConfig, support: int, margin: float, tries: int = 64) -> int:
    """First seed from config.seed whose initial pooling logits pick the winners decisively.

    The gap between the support-th and (support+1)-th largest initial logit (every head)
    must be at least margin, so the start, not minibatch or sample noise, decides the
    support (a property of the start, checked before any dynamics is run).
    """

    for seed in range(config.seed, config.seed + tries):
        start = initial_pooling_logits(seed, config.heads, config.slots, config.init_scale)
        logits = np.sort(np.asarray(start, float), -1)
        gaps = logits[:, -support] - logits[:, -support - 1]
        if np.all(gaps >= margin):
            return seed
    raise ValueError(f"no decisive seed in {tries} tries")


REENTRY_CASES = [
    (16.0, 2),
    (16.0, 1),
    (24.0, 3),
    (16.0, 3),
    (16.0, 4),
    (24.0, 5),
    (9.0, 1),
    (30.0, 4),
]


def reentry_slopes(cases=REENTRY_CASES, dropped_weight=1e-4):
    """The re-entry law on the reduced flow: predicted and measured kappa, `(len(cases),)` each.

    Each case (gain, k) starts from k equal phases plus phase k at weight `dropped_weight`;
    to leading order 1/alpha_k moves linearly at rate -kappa (theory.reentry_rate): re-entry
    for kappa > 0, 1/t decay for kappa < 0. The measured kappa is minus the slope of
    1/alpha_k over the first tenth of the run.
    """

    logits0 = np.full((len(cases), 1, STRIDE), -40.0)
    for i, (_, k) in enumerate(cases):
        logits0[i, 0, :k] = 0.0
        logits0[i, 0, k] = np.log(dropped_weight * k)
    kappa = np.array([theory.reentry_rate(STRIDE, CHUNKS, g, k) for g, k in cases])
    t_end = float(0.2 / np.max(np.abs(kappa) * dropped_weight))
    configs = [
        FlowConfig(stride=STRIDE, chunks=CHUNKS, gain=g, t1=t_end, rtol=1e-10, atol=1e-12)
        for g, _ in cases
    ]
    hist = stack(solve_many(configs, starts=list(logits0)))
    inverse = 1.0 / np.asarray(hist.pooling_weights[:, :, 0, :])
    times = np.asarray(hist.times)
    measured = np.array(
        [-(inverse[i, 10, k] - inverse[i, 0, k]) / times[i, 10] for i, (_, k) in enumerate(cases)]
    )
    return kappa, measured


def sgd_config(dim=256) -> TrainConfig:
    """The ODE-vs-SGD comparison: d = 256, init 0.3, small learning rate, t = lr steps = 300."""
    base = TrainConfig(
        dim=dim, init_scale=0.3, lr=0.5, steps=600, batch=256, eval_every=30, eval_samples=256
    )
    return base.replace(seed=decisive_seed(base, 3, margin=0.15))


def flows_from_the_trainers_start(dims, samples, seed=0, sample_seed=0, t_end=400.0, saves=41):
    """Finite-d flows at each d on sample `sample_seed`, from the trainer's init (init_scale
    0.3, seed `seed`). Returns (ts, pooling weights (D, T, H, s), start logits (1, H, s))."""

    ts = np.linspace(0.0, t_end, saves)
    configs = [TrainConfig(dim=d, init_scale=0.3, seed=seed) for d in dims]
    finite = finite_flow(configs, ts=ts, samples=samples, sample_seed=sample_seed, accuracy=False)
    weights = np.asarray(finite.pooling_weights)
    return ts, weights, np.log(weights[0, 0])[None]  # the trainer's logits, up to a constant


def reduced_weights(start, ts, dim=None):
    """Pooling weights (T, H, s) of the reduced flow from `start`: L_inf, or L_d at `dim`."""

    dim = None if dim is None else int(dim)
    config = FlowConfig(
        stride=STRIDE, chunks=CHUNKS, gain=GAIN, t1=float(ts[-1]), saves=len(ts), dim=dim
    )
    flow = solve(config, starts=np.asarray(start, float)[0], times=np.asarray(ts, float))
    return np.asarray(flow.history.pooling_weights)


float64_module(__name__)  # 64-bit types inside these functions only

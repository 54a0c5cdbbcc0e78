"""Learned gain: the race with the instability, the re-entry ladder, the weight-decay equilibrium (docs/theory.md §6.6).

Derivation (one head, mse, c = N/(N-1), w(m) = 2 sigma_N(m) (1 - sigma_N(m))^2, the gain
learned with the penalty weight_decay/2 beta^2; J = 1 for a gain learned directly
("linear", docs/theory.md §6.6's convention), J = beta^2 for log beta ("log")).

Equilibrium. dL/dbeta = -(c/s) sum_phi alpha_phi w(beta alpha_phi); at the k-phase state
(alpha = 1/k on k phases) the gain is stationary where weight_decay beta = (c/s) w(beta/k).
The right side is hump-shaped in beta, so the stable root is the largest one (k = s:
uniform pooling).

Race. While pooling stays uniform the gain follows the 1-D flow
dbeta/dt = J [(c/s) w(beta/s) - weight_decay beta], and a zero-sum perturbation grows as
delta_0 exp(int lambda(beta(t)) dt) (theory.thresholds). Specialisation happens when that
reaches the event level; if it never does, pooling stays uniform and the gain is the 1-D
flow's at t_end.

Re-entry at finite weight. With W(a) = (c beta/s) w(beta a), a dropped phase of weight a
next to k support phases of weight u = (1 - a)/k obeys exactly
    d log a/dt = (1 + 1/k) a (1 - a)^2 (W(a) - W(u)).
theory.support's kappa is its a -> 0 limit, but after specialisation the dropped phases
sit at a ~ 1e-2 while beta ~ 20-50, so beta a is not small: w rises on [0, log((N-1)/2)],
and a k-state that is stable at a -> 0 (w(0) < w(beta/k)) still loses a dropped phase whose
weight exceeds the barrier a* (w(beta a*) = w(beta (1 - a*)/k), reentry_barrier): a state
barely stable at a -> 0 has a tiny barrier, and its last dropped phase re-enters.

Ladder (semi-analytic). After the race is lost the support grows by re-entries whose timing
depends on the dropped weights, which the gain drags as it relaxes; support_ladder
integrates the reduced ODE of the order parameters (the gain, one common log-weight of
the support -- its internal modes relax at theory.support.internal_rate < 0 -- and each
dropped phase's log-weight, with the exact cluster equations) from the admissible state at
the race's gain, and a dropped phase joins the support once its weight meets the support's.
The dropped phases' weights after the collapse are not predicted; they start at a common
DROPPED_WEIGHT with a small spread; the end state forgets them (tests/theory/test_theory_gain.py).
Which support the collapse leaves when that depends on the start: theory.selection
(learned_gain_law).
"""

import math

import numpy as np

from .needle_mass import mse_drive
from .quadrature import log_chi_mean
from .support import internal_rate, reentry_rate, stable_support_sizes
from .thresholds import growth_rate

DROPPED_WEIGHT = 0.03  # dropped phases' weight right after the collapse (the end state forgets it)
DROPPED_SPREAD = 0.1  # log-weight step between successive dropped phases (breaks their tie)
JOIN_GAP = 0.05  # a dropped phase joins the support once its log-weight is this close


def gain_force(stride, chunks, gain, weight_decay, support_size):
    """-dL/dbeta - weight_decay beta at the k-phase state: (c/s) w(beta/k) - weight_decay beta."""
    c = chunks / (chunks - 1.0)
    return c / stride * mse_drive(gain / support_size, chunks) - weight_decay * gain


def weight_decay_equilibrium_gain(stride, chunks, weight_decay, support_size):
    """The stable equilibrium gain of the k-phase state under weight decay (module docstring).

    stride s, chunks N, weight_decay > 0, support_size k (k = s: uniform pooling).
    Largest root of weight_decay beta = (c/s) w(beta/k), by bisection. Returns a float
    (inf for weight_decay = 0: the gain grows without bound).
    """
    if weight_decay <= 0.0:
        return math.inf
    grid = np.linspace(1e-6, support_size * (math.log(chunks) + 40.0), 20001)
    force = gain_force(stride, chunks, grid, weight_decay, support_size)
    crossings = np.nonzero((force[:-1] > 0) & (force[1:] <= 0))[0]
    if crossings.size == 0:
        return 0.0
    lo, hi = grid[crossings[-1]], grid[crossings[-1] + 1]
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (
            (mid, hi)
            if gain_force(stride, chunks, mid, weight_decay, support_size) > 0
            else (lo, mid)
        )
    return 0.5 * (lo + hi)


def learned_gain_states(stride, chunks, weight_decay):
    """For k = 1..s: (k, equilibrium gain, internally stable, stable against re-entry at a -> 0).

    stride s, chunks N, weight_decay > 0. Returns a list of tuples (theory.support tests).
    """
    rows = []
    for k in range(1, stride + 1):
        beta = weight_decay_equilibrium_gain(stride, chunks, weight_decay, k)
        internal = bool(internal_rate(stride, chunks, beta, k) <= 0)
        external = k == stride or bool(reentry_rate(stride, chunks, beta, k) <= 0)
        rows.append((k, beta, internal, external))
    return rows


def dropped_phase_rate(stride, chunks, gain, support_size, dropped_weight):
    """d log a/dt of one dropped phase of weight a beside k equal support phases (module docstring).

    Exact: (1 + 1/k) a (1 - a)^2 (c beta/s) (w(beta a) - w(beta (1 - a)/k)); its a -> 0
    limit is theory.reentry_rate * a. Arguments broadcast. Returns an array.
    """
    a = np.asarray(dropped_weight, float)
    k = np.asarray(support_size, float)
    c = chunks / (chunks - 1.0)
    drive = mse_drive(gain * a, chunks) - mse_drive(gain * (1.0 - a) / k, chunks)
    return (1.0 + 1.0 / k) * a * (1.0 - a) ** 2 * c * gain / stride * drive


def reentry_barrier(stride, chunks, gain, support_size):
    """a*: dropped phases heavier than this re-enter the k-phase state (module docstring).

    The smallest root of dropped_phase_rate in (0, 1/(k+1)) by bisection; 0 when the
    state is unstable at a -> 0 (theory.reentry_rate > 0), 1/(k+1) when no root (the
    dropped phase always falls back). Returns a float.
    """
    if reentry_rate(stride, chunks, gain, support_size) > 0:
        return 0.0
    grid = np.linspace(1e-9, 1.0 / (support_size + 1.0), 2001)
    rate = dropped_phase_rate(stride, chunks, gain, support_size, grid)
    up = np.nonzero((rate[:-1] <= 0) & (rate[1:] > 0))[0]
    if up.size == 0:
        return 1.0 / (support_size + 1.0)
    lo, hi = grid[up[0]], grid[up[0] + 1]
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        below = dropped_phase_rate(stride, chunks, gain, support_size, mid) <= 0
        lo, hi = (mid, hi) if below else (lo, mid)
    return 0.5 * (lo + hi)


# Dormand-Prince 5(4): the ladder's order parameters move on time scales from ~1 (a join)
# to ~1e4 (algebraic decay of dropped phases), so the step adapts.
_DP_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_DP_B5 = (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0)
_DP_B4 = (5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40)


def _dormand_prince(field, y, t, t_end, rtol, atol, after_step):
    """Adaptive Dormand-Prince 5(4) from (t, y) to t_end; after_step(t, y) -> (y, field, done)
    may change the state and the field after each accepted step (a join), or stop early."""
    h = 1e-2
    while t < t_end:
        h = min(h, t_end - t)
        stages = []
        for a_row in _DP_A:
            stages.append(field(y + h * sum(a * s for a, s in zip(a_row, stages, strict=False))))
        y5 = y + h * sum(b * s for b, s in zip(_DP_B5, stages, strict=True))
        y4 = y + h * sum(b * s for b, s in zip(_DP_B4, stages, strict=True))
        err = float(np.max(np.abs(y5 - y4) / (atol + rtol * np.abs(y5))))
        if err <= 1.0:
            t = t + h
            y, field, done = after_step(t, y5)
            if done:
                break
        h *= min(5.0, max(0.2, 0.9 * err**-0.2)) if err > 0 else 5.0
    return t, y


def race_exponent(
    stride, chunks, init_gain, weight_decay, t_end, gain_parametrisation="log", rtol=1e-9
):
    """The gain and int_0^t lambda(beta) dt along the uniform-state gain flow (module docstring).

    stride s, chunks N, init_gain beta_0, weight_decay, t_end; gain_parametrisation
    "log" | "linear" as in sims.toy.flow. Adaptive Dormand-Prince on the pair
    (beta, exponent): dbeta/dt = J [(c/s) w(beta/s) - wd beta], d exponent/dt = lambda(beta).
    Returns (times (T,), gains (T,), exponent (T,)) at the accepted steps; a start of order
    delta_0 reaches delta when log delta_0 + exponent reaches log delta.
    """
    if gain_parametrisation not in ("log", "linear"):
        raise ValueError(f"unknown gain_parametrisation {gain_parametrisation!r}")
    jacobian = 2.0 if gain_parametrisation == "log" else 0.0

    def field(y):
        force = gain_force(stride, chunks, y[0], weight_decay, stride)
        return np.array([force * y[0] ** jacobian, float(growth_rate(stride, chunks, y[0]))])

    path = [(0.0, float(init_gain), 0.0)]

    def record(t, y):
        path.append((t, float(y[0]), float(y[1])))
        # The 1-D flow is monotone: once the gain sits at a stable equilibrium (Newton
        # distance below rtol) past beta_c, the exponent only falls, linearly; the tail is
        # closed-form (explicit steps cross a stiff equilibrium's long tail slowly).
        speed, rate = field(y)
        step = 1e-6 * abs(y[0])
        slope = (field(y + np.array([step, 0.0]))[0] - speed) / step
        settled = slope < 0 and abs(speed / slope) < rtol * abs(y[0]) and rate < 0
        if settled and t < t_end:
            path.append((t_end, float(y[0]), float(y[1] + rate * (t_end - t))))
        return y, field, settled

    _dormand_prince(field, np.array([float(init_gain), 0.0]), 0.0, t_end, rtol, 1e-12, record)
    times, gains, exponent = (np.asarray(x) for x in zip(*path, strict=True))
    return times, gains, exponent


def gain_race(
    stride,
    chunks,
    init_gain,
    weight_decay,
    init_scale,
    t_end,
    gain_parametrisation="log",
    event_level=0.25,
):
    """Whether, and when, specialisation outruns the learned gain (module docstring).

    stride s, chunks N, init_gain beta_0, weight_decay, init_scale of the pooling logits,
    t_end; gain_parametrisation "log" | "linear" as in sims.toy.flow. delta_0 is the typical
    start init_scale * E chi_{s-1}; race_exponent must reach log(event_level / delta_0).
    Returns (time of specialisation or inf, gain then (or at t_end)).
    """
    log_needed = math.log(event_level) - (math.log(init_scale) + log_chi_mean(stride - 1))
    times, gains, exponent = race_exponent(
        stride, chunks, init_gain, weight_decay, t_end, gain_parametrisation
    )
    hit = np.nonzero(exponent >= log_needed)[0]
    if hit.size == 0:
        return math.inf, float(gains[-1])
    i = int(hit[0])
    if i == 0:
        return 0.0, float(gains[0])
    frac = (log_needed - exponent[i - 1]) / (exponent[i] - exponent[i - 1])
    t = times[i - 1] + frac * (times[i] - times[i - 1])
    return float(t), float(gains[i - 1] + frac * (gains[i] - gains[i - 1]))


def _ladder_weights(log_weights, support_size):
    counts = np.ones_like(log_weights)
    counts[0] = support_size
    shifted = log_weights - log_weights.max()
    return np.exp(shifted) / np.sum(counts * np.exp(shifted)), counts


def _ladder_field(y, support_size, stride, chunks, weight_decay, gain_parametrisation):
    # y = (support log-weight, dropped log-weights..., gain parameter); the cluster equations
    # da_i/dt = alpha_i (W_i - sum_j alpha_j W_j) for the logits, shifted to log-weights.
    c = chunks / (chunks - 1.0)
    beta = math.exp(y[-1]) if gain_parametrisation == "log" else y[-1]
    alpha, counts = _ladder_weights(y[:-1], support_size)
    drive = mse_drive(beta * alpha, chunks)
    pull = c * beta / stride * drive
    dlogit = alpha * (pull - np.sum(counts * alpha * pull))
    dlog_weight = dlogit - np.sum(counts * alpha * dlogit)
    force = c / stride * np.sum(counts * alpha * drive) - weight_decay * beta
    dgain = force * beta if gain_parametrisation == "log" else force
    return np.append(dlog_weight, dgain)


def support_ladder(
    stride,
    chunks,
    gain,
    support_size,
    weight_decay,
    t_start,
    t_end,
    gain_parametrisation="log",
    dropped_weights=None,
    rtol=1e-8,
    atol=1e-10,
):
    """The re-entry ladder: reduced ODE of the gain, the support and each dropped phase (semi-analytic).

    From a k-phase state (support_size k, all at one weight) with the gain at `gain` at time
    t_start, integrate to t_end the order parameters (gain, the support's log-weight, each
    dropped phase's log-weight: exact cluster equations of docs/theory.md §5's flow, internal modes
    of the support assumed relaxed) with adaptive Dormand-Prince; a dropped phase joins the
    support when its log-weight comes within JOIN_GAP of the support's. dropped_weights
    (s - k,) default DROPPED_WEIGHT * exp(-DROPPED_SPREAD * j) (module docstring).
    Returns (final k, final gain, final weights (s,) support first, joins: list of
    (time, new k, gain)).
    """
    k = int(support_size)
    if dropped_weights is None:
        dropped_weights = DROPPED_WEIGHT * np.exp(-DROPPED_SPREAD * np.arange(stride - k))
    dropped = np.log(np.asarray(dropped_weights, float))
    support = math.log((1.0 - np.exp(dropped).sum()) / k)
    gain_param = math.log(gain) if gain_parametrisation == "log" else float(gain)
    y = np.concatenate([[support], dropped, [gain_param]])
    joins, size = [], [k]

    def field_for(size_now):
        return lambda y: _ladder_field(
            y, size_now, stride, chunks, weight_decay, gain_parametrisation
        )

    def join(t, y):
        if y.size > 2:
            j = 1 + int(np.argmax(y[1:-1]))
            if y[0] - y[j] < JOIN_GAP:
                total = size[0] * math.exp(y[0]) + math.exp(y[j])
                size[0] += 1
                y = np.delete(y, j)
                y[0] = math.log(total / size[0])
                beta = math.exp(y[-1]) if gain_parametrisation == "log" else y[-1]
                joins.append((t, size[0], float(beta)))
        return y, field_for(size[0]), False

    _, y = _dormand_prince(field_for(k), y, float(t_start), t_end, rtol, atol, join)
    k = size[0]
    beta = math.exp(y[-1]) if gain_parametrisation == "log" else float(y[-1])
    alpha, _ = _ladder_weights(y[:-1], k)
    weights = np.concatenate([np.full(k, alpha[0]), alpha[1:]])
    return k, float(beta), weights, joins


def learned_gain_outcome(
    stride, chunks, init_gain, weight_decay, init_scale, t_end, gain_parametrisation="log"
):
    """Predicted end state of the flow with a learned gain: (support size k, gain at t_end).

    Arguments as gain_race. If the gain wins the race, pooling stays uniform (k = s) and
    the gain is the 1-D flow's at t_end. Otherwise the support forms at the race's gain on
    its smallest admissible size (theory.stable_support_sizes; 1 if none) and the re-entry
    ladder (support_ladder) runs to t_end. Semi-analytic (module docstring). One outcome for
    every start: where the end state depends on the start, theory.selection.learned_gain_law
    gives its distribution. Returns (k, gain).
    """
    t_spec, beta = gain_race(
        stride, chunks, init_gain, weight_decay, init_scale, t_end, gain_parametrisation
    )
    if math.isinf(t_spec):
        return stride, beta
    admissible = stable_support_sizes(stride, chunks, beta)
    k0 = int(admissible.min()) if admissible.size else 1
    k, gain, _, _ = support_ladder(
        stride, chunks, beta, k0, weight_decay, t_spec, t_end, gain_parametrisation
    )
    return k, gain

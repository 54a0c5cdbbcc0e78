"""Learned gain: the race with the instability and the weight-decay equilibrium (THEORY 6.6).

Derivation (one head, mse, c = N/(N-1), w(m) = 2 sigma_N(m) (1 - sigma_N(m))^2). At the
k-phase state L = c [(k/s) l(beta/k) + (1 - k/s) l(0)], so dL/dbeta = -(c/s) w(beta/k);
with the penalty weight_decay/2 beta^2 the gain is stationary where
weight_decay * beta = (c/s) w(beta/k). The right side is hump-shaped in beta, so the
stable root is the largest one. The k = s case is uniform pooling.

Race: while pooling stays uniform the gain follows the 1-D flow
dbeta/dt = J(beta) [(c/s) w(beta/s) - weight_decay beta] (J = 1 for a gain learned
directly, J = beta^2 for log beta), and a zero-sum perturbation grows as
delta_0 exp(int lambda(beta(t)) dt) (theory.thresholds). Specialisation happens when
that reaches the event level; once it does, the support forms at the gain of that
moment (the smallest admissible size there), then the gain relaxes to that support's
equilibrium; if the support is not stable against re-entry at its equilibrium gain,
phases re-enter and k grows until it is.
"""

import math

import numpy as np

from ._sigmoid import mse_drive
from .support import internal_rate, reentry_rate, stable_support_sizes
from .thresholds import _log_chi_mean, growth_rate


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
    """For k = 1..s: (k, equilibrium gain, internally stable, stable against re-entry).

    stride s, chunks N, weight_decay > 0. Returns a list of tuples (theory.support tests).
    """
    rows = []
    for k in range(1, stride + 1):
        beta = weight_decay_equilibrium_gain(stride, chunks, weight_decay, k)
        internal = bool(internal_rate(stride, chunks, beta, k) <= 0)
        external = k == stride or bool(reentry_rate(stride, chunks, beta, k) <= 0)
        rows.append((k, beta, internal, external))
    return rows


def gain_race(
    stride,
    chunks,
    init_gain,
    weight_decay,
    init_scale,
    t_end,
    gain_parametrisation="log",
    event_level=0.25,
    dt=0.5,
):
    """Whether, and when, specialisation outruns the learned gain (module docstring).

    stride s, chunks N, init_gain beta_0, weight_decay, init_scale of the pooling logits,
    t_end; gain_parametrisation "log" | "linear" as in sims.flow. RK4 on the 1-D gain
    flow at uniform pooling, accumulating int lambda dt against log(event / delta_0).
    Returns (time of specialisation or inf, gain then (or at t_end)).
    """
    log_needed = math.log(event_level) - (math.log(init_scale) + _log_chi_mean(stride - 1))

    def speed(beta):
        force = gain_force(stride, chunks, beta, weight_decay, stride)
        return force * (beta**2 if gain_parametrisation == "log" else 1.0)

    beta, t, exponent = float(init_gain), 0.0, 0.0
    while t < t_end:
        k1 = speed(beta)
        k2 = speed(beta + 0.5 * dt * k1)
        k3 = speed(beta + 0.5 * dt * k2)
        k4 = speed(beta + dt * k3)
        new_beta = beta + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        rate = 0.5 * (
            float(growth_rate(stride, chunks, beta)) + float(growth_rate(stride, chunks, new_beta))
        )
        exponent += rate * dt
        beta, t = new_beta, t + dt
        if exponent >= log_needed:
            return t, beta
    return math.inf, beta


def learned_gain_outcome(
    stride, chunks, init_gain, weight_decay, init_scale, t_end, gain_parametrisation="log"
):
    """Predicted end state of the flow with a learned gain: (support size k, final gain).

    Arguments as gain_race. Uniform (k = s) if the gain wins the race; otherwise the
    smallest internally stable support at the gain of specialisation, grown one phase at
    a time until stable against re-entry at its equilibrium gain (module docstring).
    Returns (k, gain); the gain is the race's gain at t_end when pooling stays uniform
    and weight_decay = 0.
    """
    t_spec, beta = gain_race(
        stride, chunks, init_gain, weight_decay, init_scale, t_end, gain_parametrisation
    )
    if math.isinf(t_spec):
        if weight_decay > 0:
            return stride, weight_decay_equilibrium_gain(stride, chunks, weight_decay, stride)
        return stride, beta
    admissible = stable_support_sizes(stride, chunks, beta)
    k = int(admissible.min()) if admissible.size else 1
    if weight_decay <= 0:
        return stride, math.inf
    for size in range(k, stride + 1):
        beta_eq = weight_decay_equilibrium_gain(stride, chunks, weight_decay, size)
        if size == stride or reentry_rate(stride, chunks, beta_eq, size) <= 0:
            return size, beta_eq
    return stride, weight_decay_equilibrium_gain(stride, chunks, weight_decay, stride)

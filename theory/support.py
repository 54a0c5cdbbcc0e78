"""Which supports the reduced flow can end on, and which it does from near-uniform starts.

Derivation (THEORY 6.4; one head, mse, c = N/(N-1), l(m) = (1 - sigma_N(m))^2,
w(m) = -l'(m) = 2 sigma (1 - sigma)^2). With G_j = dL/dalpha_j = (c/s) beta l'(beta alpha_j),
the logit flow is da_j/dt = -alpha_j (G_j - sum_i alpha_i G_i). At the k-phase state
(alpha = 1/k on a support S, 0 elsewhere):

* internal modes (zero-sum perturbations inside S) move at rate
  -(c beta^2 / (s k^2)) l''(beta/k): stable iff beta/k >= log((N-1)/2) (or k = 1);
* a dropped phase j obeys d log alpha_j/dt = kappa alpha_j with
  kappa = (1 + 1/k) (c beta / s) (w(0) - w(beta/k)) (its own logit moves at
  alpha_j (c beta/s)(w(0) - w(beta/k)); the support's logits move back by 1/k of that,
  through alpha_i = 1/k and sum_i alpha_i = 1 - alpha_j): its weight decays only algebraically,
  alpha_j ~ 1/(|kappa| t), when kappa < 0, and re-enters when kappa > 0, at the blow-up
  time 1/(kappa alpha_j) of dalpha_j/dt = kappa alpha_j^2 -- exponentially long in the
  logit gap, because the flow carries the factor alpha_j.

w is hump-shaped with its peak at sigma = 1/3 (the instability threshold), so the
k-state is stable iff log((N-1)/2) <= beta/k <= m_reentry(N), where
sigma_N(m_reentry) is the root above 1/3 of x (1 - x)^2 = w(0)/2.
Which admissible k is reached from near-uniform starts depends on the start's
direction only (the linear phase scales it, THEORY 6.2): predicted_support_size
samples that map over isotropic directions with a fixed-step integrator of its own.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ._sigmoid import mse_drive, sigma_n
from .reduced import reduced_loss
from .thresholds import growth_rate


def _l2(margin, chunks):
    g = 1.0 - sigma_n(margin, chunks)
    return 2.0 * g**2 * (1.0 - g) * (2.0 - 3.0 * g)


def internal_rate(stride, chunks, gain, support_size):
    """Growth rate of zero-sum perturbations inside a k-phase support (module docstring).

    stride s, chunks N, gain beta, support_size k (scalars/arrays). Returns an array;
    positive means the k-state is internally unstable (0 for k = 1: no internal mode).
    """
    k = np.asarray(support_size, float)
    c = chunks / (chunks - 1.0)
    rate = -(c * gain**2 / (stride * k**2)) * _l2(gain / k, chunks)
    return np.where(k > 1, rate, 0.0)


def reentry_rate(stride, chunks, gain, support_size):
    """kappa = (1 + 1/k)(c beta/s)(w(0) - w(beta/k)): d log alpha_j/dt = kappa alpha_j, dropped phase.

    Arguments as internal_rate (k < s). Returns an array; positive: dropped phases re-enter.
    """
    k = np.asarray(support_size, float)
    c = chunks / (chunks - 1.0)
    return (
        (1.0 + 1.0 / k) * c * gain / stride * (mse_drive(0.0, chunks) - mse_drive(gain / k, chunks))
    )


def reentry_time(stride, chunks, gain, support_size, dropped_weight):
    """Time for a dropped phase of weight alpha_j to re-enter: 1/(kappa alpha_j) (inf if kappa <= 0).

    stride s, chunks N, gain beta, support_size k, dropped_weight alpha_j (arrays
    broadcast). Leading order in alpha_j (module docstring). Returns an array.
    """
    kappa = reentry_rate(stride, chunks, gain, support_size)
    with np.errstate(divide="ignore"):
        return np.where(kappa > 0, 1.0 / (kappa * np.asarray(dropped_weight, float)), np.inf)


def reentry_margin(chunks):
    """m_reentry(N): dropped phases re-enter iff beta/k > m_reentry (module docstring)."""
    target = mse_drive(0.0, chunks) / 2.0
    lo, hi = 1.0 / 3.0, 1.0
    for _ in range(200):  # x (1 - x)^2 decreases on (1/3, 1)
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid * (1 - mid) ** 2 > target else (lo, mid)
    x = 0.5 * (lo + hi)
    return math.log(x * (chunks - 1.0) / (1.0 - x))


def stable_support_sizes(stride, chunks, gain):
    """Admissible support sizes k: internally stable and stable against re-entry (THEORY 6.4).

    stride s, chunks N, gain beta (one head, mse). Returns a sorted int array.
    """
    ks = np.arange(1, stride + 1)
    internal = internal_rate(stride, chunks, gain, ks) <= 0.0
    external = np.array([k == stride or reentry_rate(stride, chunks, gain, k) <= 0 for k in ks])
    return ks[internal & external]


def support_loss(stride, chunks, gain, support_size):
    """L_inf at the k-phase state: c [(k/s) l(beta/k) + ((s-k)/s) l(0)] (THEORY 5, 6.4)."""
    k = np.asarray(support_size, float)
    c = chunks / (chunks - 1.0)
    dropped = (1.0 - 1.0 / chunks) ** 2
    return c * (
        k / stride * (1.0 - sigma_n(gain / k, chunks)) ** 2 + (stride - k) / stride * dropped
    )


@functools.partial(jax.jit, static_argnames=("steps", "loss"))
def _settle(logits, gain, chunks, dt, steps, loss):
    def field(a):
        return -jax.grad(reduced_loss)(a, gain, chunks, loss)

    def step(a, _):
        k1 = field(a)
        k2 = field(a + 0.5 * dt * k1)
        k3 = field(a + 0.5 * dt * k2)
        k4 = field(a + dt * k3)
        return a + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4), None

    final, _ = jax.lax.scan(step, logits, None, length=steps)
    return jax.nn.softmax(final, axis=-1)


def covered(pooling_weights, stride):
    """Phases a head covers: weight above 1/(2s). pooling_weights (..., s) -> bool (..., s)."""
    return np.asarray(pooling_weights) > 0.5 / stride


def sampled_final_weights(
    stride, chunks, gain, heads=1, loss="mse", samples=256, seed=0, amplitude=1e-3, settle=4000.0
):
    """Final pooling weights from `samples` isotropic near-uniform starts (semi-analytic).

    Starts amplitude * z / |z| (z standard normal, (H, s)), integrated by fixed-step RK4
    (dt = 0.5) for t*(amplitude) + settle. Returns (samples, H, s).
    """
    lam = float(growth_rate(stride, chunks, gain, heads, loss))
    if not lam > 0:
        return np.full((samples, heads, stride), 1.0 / stride)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((samples, heads, stride))
    z = amplitude * z / np.linalg.norm(z, axis=(-2, -1), keepdims=True)
    t_end = math.log(1.0 / amplitude) / lam + settle
    dt = 0.5
    gains = jnp.full((heads,), float(gain))
    run = jax.vmap(lambda a: _settle(a, gains, float(chunks), dt, int(t_end / dt), loss))
    return np.asarray(run(jnp.asarray(z)))


def predicted_support_size(stride, chunks, gain, samples=256, seed=0):
    """Distribution of the support size k reached from near-uniform starts (THEORY 6.4).

    stride s, chunks N, gain beta (one head, mse). Semi-analytic: the outcome depends
    only on the start's direction, sampled isotropically (sampled_final_weights).
    Returns (sizes (K,), probabilities (K,), admissible sizes); a unique prediction is a
    single size with probability 1.
    """
    weights = sampled_final_weights(stride, chunks, gain, 1, "mse", samples, seed)
    sizes = covered(weights[:, 0], stride).sum(axis=-1)
    values, counts = np.unique(sizes, return_counts=True)
    return values, counts / counts.sum(), stable_support_sizes(stride, chunks, gain)


def support_profile(stride, chunks, gain, dim, samples=256, seed=0):
    """Predicted per-phase accuracy, delta_max and psc of the k-state reached (THEORY 7).

    Uses the most probable k of predicted_support_size and theory.accuracy at dim d
    (inf allowed). Returns (accuracy (s,), delta_max, psc); phases sorted covered first.
    """
    from .accuracy import delta_max, phase_accuracy_profile, psc

    sizes, probs, _ = predicted_support_size(stride, chunks, gain, samples, seed)
    k = int(sizes[np.argmax(probs)])
    accuracy = phase_accuracy_profile(stride, chunks, k, dim)
    return accuracy, float(delta_max(accuracy)), float(psc(accuracy))

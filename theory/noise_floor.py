"""The SGD noise floor of delta_max around stable uniform pooling (docs/theory.md §6.9, §7).

Derivation (one head, fixed gain). Near a stable uniform point the pooling logits a
(s,) of minibatch SGD follow a linear (Ornstein-Uhlenbeck) recursion

    a_{n+1} = a_n - eta (K a_n + xi_n),   Cov xi_n = C / B,  independent across steps,

with K the Hessian of the expected loss at uniform pooling, C the covariance of the
per-problem gradient there, eta the learning rate and B the batch. Both are invariant
under permuting the phases and annihilate the constant direction (softmax ignores it),
so on the zero-sum subspace K = kappa P and C = c P (P = I - 11^T/s): every zero-sum
mode is one scalar recursion. Writing A = I - eta K, the logit covariance at step n is

    Sigma_n = S + A^n (Sigma_0 - S) A^n,    S = A S A + eta^2 C / B   (discrete Lyapunov),

so S = eta c / (B kappa (2 - eta kappa)) P, reached after a few relaxation times
1 / -log|1 - eta kappa| steps (Sigma_0 = init_scale^2 P from the trainer's init).
The pooling weights move by d alpha = P da / s, so Var alpha_phi = (1 - 1/s) S / s^2.

Per-phase accuracy, linearised at uniform: by the same symmetry d acc = D d alpha on
zero-sum perturbations, D = d acc_phi/d alpha_phi - d acc_phi/d alpha_j (j != phi),
from theory.accuracy.needle_accuracy. The measured accuracy adds the held-out set's
binomial error, variance acc (1 - acc) / n per phase, independent across phases and
shared by every run (the trainer draws one held-out set per config). delta_max is a
range, blind to a common shift, so the zero-sum correlation of the pooling part drops
out: Cov alpha = (S/s^2) P, and delta_max is distributed as the range of s independent
normals with variance D^2 S / s^2 + acc (1 - acc) / n.

kappa and c. At d = inf they are closed forms: kappa = -lambda (theory.thresholds) and,
since a problem at phase phi has gradient (beta/s) l'(beta/s) P e_phi,
c = beta^2 l'(beta/s)^2 / s^3 with l the per-problem loss (mse: N/(N-1) (1 - sigma_N)^2,
ce: -log sigma_N). At finite d the distractor logits (standard deviation
beta |alpha| / sqrt(d)) change both, so finite d uses a Monte Carlo estimate: the exact
Hessian and per-problem gradient covariance of the trainer's own loss on a fixed sample of
problems (theory.gradient_noise), in float64.

This holds inside the well. Where a specialised state is also stable past a low saddle,
runs escape: theory.escape.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module

from .accuracy import needle_accuracy
from .gradient_noise import loss_derivatives, problem_sample
from .needle_mass import mse_drive, sigma_n
from .thresholds import growth_rate

MOMENT_SAMPLES = 2**16  # Monte Carlo problems for kappa and c at finite d
DRAWS = 20000  # Gaussian draws for the delta_max distribution


def _loss_slope(margin, chunks, loss):
    if loss == "mse":
        return -chunks / (chunks - 1.0) * mse_drive(margin, chunks)
    if loss == "ce":
        return -(1.0 - sigma_n(margin, chunks))
    raise ValueError(f"loss must be mse or ce, got {loss!r}")


def uniform_moments(stride, chunks, dim, gain, loss="mse", samples=MOMENT_SAMPLES, seed=0):
    """(kappa, c): curvature and per-problem gradient variance of each zero-sum logit mode.

    stride s, chunks N, dim d (math.inf for the reduced model), gain beta, loss mse | ce;
    one head at uniform pooling. d = inf: kappa = -lambda (docs/theory.md §6.2, theory.growth_rate),
    c = beta^2 l'(beta/s)^2 / s^3 (module docstring). Finite d: Monte Carlo on `samples`
    problems drawn from `seed` (exact Hessian of the sample-mean loss; sample covariance of
    the per-problem gradients), projected on the zero-sum subspace and averaged over its
    s - 1 directions (they are equal by phase symmetry). Returns two floats.
    """
    s, n, beta = int(stride), float(chunks), float(gain)
    if math.isinf(dim):
        kappa = -float(growth_rate(s, n, beta, loss=loss))
        c = beta**2 * float(_loss_slope(beta / s, n, loss)) ** 2 / s**3
        return kappa, c
    gram, target = problem_sample(s, chunks, dim, samples, seed)
    _, hessian, grads = loss_derivatives(jnp.zeros(s, jnp.float64), gram, target, beta, loss)
    centring = np.eye(s) - 1.0 / s
    hessian = centring @ np.asarray(hessian) @ centring
    noise = centring @ np.cov(np.asarray(grads).T) @ centring
    return float(np.trace(hessian)) / (s - 1), float(np.trace(noise)) / (s - 1)


def stationary_covariance(hessian, noise_cov, lr, batch):
    """S solving S = A S A^T + eta^2 C / B, A = I - eta K (the SGD recursion's fixed point).

    hessian K and noise_cov C: (m, m) matrices or scalars (one mode); lr eta; batch B.
    Raises ValueError unless every eigenvalue of A lies inside the unit circle.
    Returns an array shaped like hessian.
    """
    k = np.atleast_2d(np.asarray(hessian, float))
    c = np.atleast_2d(np.asarray(noise_cov, float))
    m = len(k)
    a = np.eye(m) - lr * k
    if np.max(np.abs(np.linalg.eigvals(a))) >= 1.0:
        raise ValueError("no stationary state: |1 - lr * curvature| >= 1 on some mode")
    # vec(A S A^T) = (A kron A) vec(S): one linear solve, fine for m <= ~30 phases.
    q = (lr**2 / batch) * c
    sol = np.linalg.solve(np.eye(m * m) - np.kron(a, a), q.reshape(-1)).reshape(m, m)
    return sol.reshape(np.shape(hessian))


def logit_variance(kappa, c, lr, batch, steps, init_scale=0.0):
    """Variance of one zero-sum logit mode after `steps` SGD steps (module docstring).

    kappa, c: uniform_moments; lr, batch; steps n; init_scale: the trainer's init standard
    deviation (logits i.i.d., so each zero-sum mode starts at variance init_scale^2).
    Sigma_n = S + (1 - eta kappa)^(2n) (init_scale^2 - S). Returns a float.
    """
    stationary = float(stationary_covariance(kappa, c, lr, batch))
    decay = (1.0 - lr * kappa) ** (2 * steps)
    return stationary + decay * (init_scale**2 - stationary)


def relaxation_steps(kappa, lr):
    """Steps for a zero-sum logit mode's mean to fall by e: 1 / -log|1 - eta kappa|."""
    return -1.0 / math.log(abs(1.0 - lr * kappa))


def accuracy_sensitivity(stride, chunks, dim, step=1e-3):
    """(acc, D): accuracy at uniform pooling and d acc_phi / d alpha_phi on zero-sum moves.

    stride s, chunks N, dim d (finite). Central difference of theory.needle_accuracy along
    alpha = 1/s + e (e_phi - 1/s) (module docstring). Returns two floats.
    """
    s = int(stride)

    def acc(e):
        needle, rest = 1.0 / s + e * (1.0 - 1.0 / s), 1.0 / s - e / s
        return float(needle_accuracy(needle, needle**2 + (s - 1) * rest**2, chunks, dim))

    return acc(0.0), (acc(step) - acc(-step)) / (2.0 * step * (1.0 - 1.0 / s))


def noise_floor(
    stride,
    chunks,
    dim,
    gain,
    lr,
    batch,
    steps,
    eval_samples,
    loss="mse",
    init_scale=0.01,
    seeds=1,
    moments=None,
    level=0.9,
    draws=DRAWS,
    seed=0,
):
    """Predicted distribution of delta_max (and pooling-weight std) of SGD at uniform pooling.

    The canonical trainer's config (one head, fixed gain, SGD lr, batch, steps, held-out
    eval_samples per phase, init_scale). moments: (kappa, c) if already known, else
    uniform_moments at this dim. seeds: runs averaged (they share the held-out set, so its
    error is drawn once per average). level: probability of the central intervals returned.
    Module docstring for the derivation; the range's distribution is Monte Carlo over
    `draws` Gaussian draws from `seed`.
    Returns a dict: kappa, c, relaxation_steps, logit_var, weight_std (per phase),
    accuracy, sensitivity, pooling_sd and eval_sd (per-phase accuracy); for one run
    delta_max_mean, delta_max_sd and delta_max_interval (low, high); for the average over
    `seeds` runs mean_of_seeds_interval (low, high).
    """
    s = int(stride)
    kappa, c = moments if moments is not None else uniform_moments(s, chunks, dim, gain, loss)
    var = logit_variance(kappa, c, lr, batch, steps, init_scale)
    weight_var = (1.0 - 1.0 / s) * var / s**2
    acc, sensitivity = accuracy_sensitivity(s, chunks, dim)
    # The pooling part has covariance (D^2 var / s^2) P; the range ignores the common
    # shift, so independent normals of variance D^2 var / s^2 per phase give it exactly.
    pooling_sd = abs(sensitivity) * math.sqrt(var) / s
    eval_sd = math.sqrt(acc * (1.0 - acc) / eval_samples)
    ranges = delta_max_distribution(pooling_sd, eval_sd, s, seeds, level, draws, seed)
    return {
        "kappa": kappa,
        "c": c,
        "relaxation_steps": relaxation_steps(kappa, lr),
        "logit_var": var,
        "weight_std": math.sqrt(weight_var),
        "accuracy": acc,
        "sensitivity": sensitivity,
        "pooling_sd": pooling_sd,
        "eval_sd": eval_sd,
        **ranges,
    }


def delta_max_distribution(pooling_sd, eval_sd, stride, seeds=1, level=0.9, draws=DRAWS, seed=0):
    """delta_max of phase accuracies acc_0 + pooling part + held-out error (module docstring).

    pooling_sd: per-phase sd of the pooling part (its P correlation drops out of the range;
    0 for fixed pooling such as mean_pool); eval_sd: sd of each phase's held-out error (a
    scalar or (s,)), drawn once per average (shared held-out set); stride s phases; seeds runs averaged;
    level of the central intervals. Monte Carlo over `draws` Gaussian draws from `seed`.
    Returns a dict: delta_max_mean, delta_max_sd, delta_max_interval (one run),
    mean_of_seeds_interval (the mean over `seeds` runs).
    """
    rng = np.random.default_rng(seed)
    pooling = pooling_sd * rng.standard_normal((draws, seeds, stride))
    held_out = eval_sd * rng.standard_normal((draws, 1, stride))
    ranges = np.ptp(pooling + held_out, axis=-1)
    single, averaged = ranges[:, 0], ranges.mean(axis=1)
    tails = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    return {
        "delta_max_mean": float(single.mean()),
        "delta_max_sd": float(single.std()),
        "delta_max_interval": tuple(float(q) for q in np.quantile(single, tails)),
        "mean_of_seeds_interval": tuple(float(q) for q in np.quantile(averaged, tails)),
    }


float64_module(__name__)  # 64-bit types inside these functions only

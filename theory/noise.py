"""The SGD noise floor of delta_max around stable uniform pooling (issues 2 and 4).

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
beta |alpha| / sqrt(d), 0.7 at the canonical config) change both a lot (s=4, N=64,
gain 16, d=64: kappa = 0.128 against 0.425 at d = inf), so finite d uses a Monte Carlo
estimate: the exact Hessian and per-problem gradient covariance of the trainer's own
loss (idealized.loss.retrieval_loss) on a fixed sample of problems drawn as
idealized.task's exact inner-product sampler draws them, in float64.

Checked against SGD (d = 64, gain 16, batch 256, 8 seeds, eval 2048): module tests and
issue report. Outside the linear regime this is no prediction: where a specialised state
is also stable and the barrier to it is a few noise temperatures T = kappa S high, SGD
escapes; escape_rate (below) predicts how often, reliably from ~5 T up. At s=4, N=64 the
finite-d loss along dropping one phase rises by only 0.0026 before falling 0.030 below
uniform: 2.5 T at lr 2 (7 of 24 runs collapsed onto 3 phases in 600 steps), 10 T at lr 0.5
(none of 16 in 2400 steps, and the floor holds). At s=8, N=12 the far side of the path
stays above uniform (8 T up at lr 2): no escapes seen (0 of 24).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.loss import retrieval_loss
from weakspots.idealized.xla import jit

from ._sigmoid import mse_drive, sigma_n
from .accuracy import needle_accuracy
from .thresholds import growth_rate

MOMENT_SAMPLES = 2**16  # Monte Carlo problems for kappa and c at finite d
DRAWS = 20000  # Gaussian draws for the delta_max distribution


def _loss_slope(margin, chunks, loss):
    if loss == "mse":
        return -chunks / (chunks - 1.0) * mse_drive(margin, chunks)
    if loss == "ce":
        return -(1.0 - sigma_n(margin, chunks))
    raise ValueError(f"loss must be mse or ce, got {loss!r}")


def _problem_loss(a, gram, target, gain, loss):
    """The trainer's loss on one problem (gram (N, s), target) at pooling logits a."""
    return retrieval_loss((gain * gram @ jax.nn.softmax(a))[None], target, loss)


def _per_problem_gradients(logits_a, gram, target, gain, loss):
    grad = jax.grad(_problem_loss)
    return jax.vmap(grad, (None, 0, 0, None, None))(logits_a, gram, target, gain, loss)


@functools.partial(jit, static_argnums=4)
def _loss_derivatives(logits_a, gram, target, gain, loss):
    """Sample-mean loss, its Hessian and the per-problem gradients, at pooling logits logits_a."""

    def mean_loss(a):
        per = jax.vmap(_problem_loss, (None, 0, 0, None, None))(a, gram, target, gain, loss)
        return jnp.mean(per)

    grads = _per_problem_gradients(logits_a, gram, target, gain, loss)
    return mean_loss(logits_a), jax.hessian(mean_loss)(logits_a), grads


def uniform_moments(stride, chunks, dim, gain, loss="mse", samples=MOMENT_SAMPLES, seed=0):
    """(kappa, c): curvature and per-problem gradient variance of each zero-sum logit mode.

    stride s, chunks N, dim d (math.inf for the reduced model), gain beta, loss mse | ce;
    one head at uniform pooling. d = inf: kappa = -lambda (THEORY 6.2, theory.growth_rate),
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
    # idealized.task's exact inner-product sampler, drawn in numpy (the jax chi-square
    # sampler costs seconds to compile): r = |q|^2 ~ chi2_d / d; q . x ~ N(0, r/d) for
    # every other key; the needle's entry is r.
    gram, target = _problem_sample(s, chunks, dim, samples, seed)
    _, hessian, grads = _loss_derivatives(jnp.zeros(s, jnp.float64), gram, target, beta, loss)
    centring = np.eye(s) - 1.0 / s
    hessian = centring @ np.asarray(hessian) @ centring
    noise = centring @ np.cov(np.asarray(grads).T) @ centring
    return float(np.trace(hessian)) / (s - 1), float(np.trace(noise)) / (s - 1)


def _problem_sample(stride, chunks, dim, samples, seed):
    rng = np.random.default_rng(seed)
    n = int(chunks)
    norm2 = rng.chisquare(dim, samples) / dim
    gram = np.sqrt(norm2 / dim)[:, None, None] * rng.standard_normal((samples, n, stride))
    target = rng.integers(0, n, samples)
    phase = rng.integers(0, stride, samples)
    gram[np.arange(samples), target, phase] = norm2
    return jnp.asarray(gram), jnp.asarray(target)


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


# --- Escape from a metastable uniform well (issue: s=4, N=64 at d=64) -----------------
#
# Derivation. Where uniform pooling is a local minimum of the finite-d loss but a
# lower state exists, SGD can cross a saddle. By phase symmetry the s saddles are
# equivalent, one per phase to drop, and each lies on the line a = -u e_j (phase j's
# logit lowered, the others equal): that line is the fixed set of the permutations of
# the other s - 1 phases, which the gradient respects, so a critical point of the loss
# restricted to it is a critical point of the full loss. Along it, with x = u sqrt(1-1/s)
# the unit-speed zero-sum coordinate, take from the trainer's loss (Monte Carlo, as in
# uniform_moments) the loss U(x), the noise along the line c(x) (per-problem gradient
# variance on e = P e_j / |P e_j|), and on the s - 2 transverse zero-sum directions
# (equal by symmetry) the curvature mu(x) and noise c_perp(x). SGD in time t = eta n is
# then, along the line, a 1-D diffusion with drift -U' and diffusion D = eta c / (2B), the
# transverse modes equilibrated at variance T_perp / mu (T_perp = eta c_perp / (2B)):
# stationary marginal rho(x) = Z_perp(x) exp(-Phi(x)) / D(x), Phi' = U' / D (Ito),
# Z_perp = (T_perp / mu)^((s-2)/2). The exact 1-D mean first-passage time from the well
# over the saddle (reflecting below the well, absorbing past the saddle) is
#
#     tau = int_x0^x1 dy / (D(y) rho(y)) int_x0^y rho(z) dz,
#
# and the s saddles give the escape rate R = s / tau, P(escaped by t) = 1 - exp(-R t).
# For constant D and a harmonic well and saddle, tau reduces to Kramers-Langer
# (kramers_rate), which is only asymptotic in barrier / T.
#
# Checked (s=4, N=64, gain 16, d=64, batch 256, t = 1200; escaped = min alpha < 0.1 at
# the end; 2^18 problems: barrier 0.0026 at u = 0.5, saddle curvature -0.062 along,
# +0.31 across, well 0.132; the noise along the path falls from 0.257 to 0.12 at the
# saddle, so the passage model's exponent is ~1.5 x barrier / T):
#   lr 2,   600 steps (barrier 2.5 T): passage P = 0.73, Kramers 0.90; SGD 7/24 (0.29) and,
#           same loss on fresh jax batches (own loop, not the trainer), 54/128 (0.42).
#   lr 1,  1200 steps (5.1 T): passage 0.04, Kramers 0.17; SGD 1/16.
#   lr 0.5, 2400 steps (10 T): passage 4e-5, Kramers 0.001; SGD 0/16.
#   s=8, N=12, lr 2: the loss maximum on the path is 8.2 T up and the far side stays above
#           uniform; passage P ~ 1e-9; SGD 0/24.
# Harmonic Kramers is far off below ~5 T (it ignores the falling noise); the passage model
# holds from ~5 T up but over-predicts by a factor ~2-4 in rate at 2.5 T: the same
# temperature in near-continuous time (own loop, lr 0.25, batch 32, 4800 steps) escapes in
# 33/64 (0.52), so ~1.8x is the 1-D reduction (transverse modes taken as harmonic about
# the line, though their curvature grows 7-fold from u = -0.2 to the saddle) and ~1.3x is lr 2's
# discreteness. The MC barrier
# itself moves by ~0.0003 (0.3 T at lr 2) between samples of 2^16 problems.


def kramers_rate(barrier, temperature, well_curvatures, saddle_curvatures):
    """Kramers-Langer (Eyring) escape rate over one saddle of overdamped Langevin dynamics.

    dx = -grad U dt + sqrt(2 T) dW in m dimensions; barrier = U(saddle) - U(well);
    well_curvatures: the m Hessian eigenvalues at the well (all > 0); saddle_curvatures:
    the m at the saddle, exactly one < 0 (lambda_u).
    rate = |lambda_u| / (2 pi) sqrt(prod well / |prod saddle|) exp(-barrier / T)
    (Langer 1969; asymptotic for barrier >> T). Returns a float (per unit time).
    """
    well = np.asarray(well_curvatures, float)
    saddle = np.asarray(saddle_curvatures, float)
    unstable = saddle[saddle < 0]
    if np.any(well <= 0) or len(unstable) != 1:
        raise ValueError("need a minimum (all well curvatures > 0) and an index-1 saddle")
    ratio = np.prod(well) / abs(np.prod(saddle))
    return float(
        abs(unstable[0]) / (2 * math.pi) * math.sqrt(ratio) * math.exp(-barrier / temperature)
    )


def first_passage_time(x, drift, diffusion, weight=None):
    """Mean first-passage time of a 1-D Ito diffusion from x[0] (reflecting) to x[-1].

    x: (n,) increasing grid; drift f(x) and diffusion D(x) on it (dx = f dt + sqrt(2D) dW);
    weight: an extra stationary factor (the transverse modes' partition function, default 1).
    tau = int dy / (D rho) int_{x0}^{y} rho, rho = weight exp(-Phi) / D, Phi' = -f / D
    (Gardiner, Handbook of Stochastic Methods, 5.2.7), trapezoidal on the grid; the start
    point inside [x0, x1] does not matter once the well is deep compared with D.
    Returns a float.
    """
    x, f, dif = (np.asarray(v, float) for v in (x, drift, diffusion))
    w = np.ones_like(x) if weight is None else np.asarray(weight, float)

    def integral(y):
        return np.concatenate([[0.0], np.cumsum(0.5 * (y[1:] + y[:-1]) * np.diff(x))])

    phi = -integral(f / dif)
    log_rho = np.log(w) - phi - np.log(dif)
    # rho spans hundreds of e-folds past the saddle: accumulate its mass in log space
    pieces = np.logaddexp(log_rho[1:], log_rho[:-1]) + np.log(0.5 * np.diff(x))
    log_mass = np.logaddexp.accumulate(pieces)
    inner = np.concatenate([[0.0], np.exp(log_mass - log_rho[1:] - np.log(dif[1:]))])
    return float(integral(inner)[-1])


def escape_path(
    stride, chunks, dim, gain, loss="mse", drops=None, samples=2**18, seed=0, block=2**14
):
    """Loss, curvatures and gradient noise along dropping one phase (module section above).

    stride s, chunks N, dim d (finite), gain beta, loss; drops: the values u of the path
    a = -u e_j (default -0.2 .. 1.5 in steps of 0.1); Monte Carlo on `samples` problems
    from `seed`, in blocks of `block`. Returns a dict of (n,) arrays: drop u, x (the
    unit-speed zero-sum coordinate u sqrt(1 - 1/s)), loss (relative to uniform), curvature
    and noise along the path, transverse_curvature and transverse_noise (per direction).
    """
    s, beta = int(stride), float(gain)
    drops = _path_drops(drops)
    blocks = max(1, samples // block)
    m = len(drops)
    mean_loss, hess = np.zeros(m), np.zeros((m, s, s))
    g1, g2 = np.zeros((m, s)), np.zeros((m, s, s))
    for b in range(blocks):
        gram, target = _problem_sample(s, chunks, dim, block, seed * 100003 + b)
        for i, u in enumerate(drops):
            a = jnp.zeros(s, jnp.float64).at[0].set(-u)
            value, h, grads = _loss_derivatives(a, gram, target, beta, loss)
            grads = np.asarray(grads)
            mean_loss[i] += float(value) / blocks
            hess[i] += np.asarray(h) / blocks
            g1[i] += grads.mean(0) / blocks
            g2[i] += grads.T @ grads / (block * blocks)
    return _path_dict(drops, mean_loss, hess, g2 - g1[:, :, None] * g1[:, None, :])


def _path_drops(drops):
    """The drops u of the escape path: default -0.2 .. 1.5 in steps of 0.1."""
    return np.arange(-2, 16) * 0.1 if drops is None else np.asarray(drops, float)


def _path_dict(drops, loss, hess, cov):
    """escape_path's dict from the loss (m,), its Hessians (m, s, s) and the per-problem
    gradient covariances (m, s, s) at the drops (m,): projected on the drop direction e of
    phase 0 and on the s - 2 zero-sum directions across it."""
    s = hess.shape[-1]
    centring = np.eye(s) - 1.0 / s
    e = centring[0] / np.linalg.norm(centring[0])
    across = centring - np.outer(e, e)
    return {
        "drop": drops,
        "x": drops * math.sqrt(1.0 - 1.0 / s),
        "loss": loss - np.interp(0.0, drops, loss),
        "curvature": np.einsum("i,nij,j->n", e, hess, e),
        "noise": np.einsum("i,nij,j->n", e, cov, e),
        "transverse_curvature": np.einsum("ij,nji->n", across, hess) / max(s - 2, 1),
        "transverse_noise": np.einsum("ij,nji->n", across, cov) / max(s - 2, 1),
    }


@functools.partial(jit, static_argnums=4)
def _problem_gradients(logits_a, gram, target, gain, loss):
    """_per_problem_gradients jitted alone (the finite-d path takes no Monte Carlo Hessian)."""
    return _per_problem_gradients(logits_a, gram, target, gain, loss)


@functools.partial(jit, static_argnums=0)
def _interpolated_hessians(stride, drops, coefficients):
    from .support import interpolated_finite_d_loss

    def at(u):
        a = jnp.zeros(stride).at[0].set(-u)
        return interpolated_finite_d_loss(a, coefficients), jax.hessian(interpolated_finite_d_loss)(
            a, coefficients
        )

    return jax.vmap(at)(drops)


def escape_path_finite_d(stride, chunks, dim, gain, drops=None, samples=2**14, seed=0, block=2**14):
    """escape_path with the loss and curvatures of the exact expected loss L_d (mse).

    Same path and dict as escape_path; the loss, curvature and transverse_curvature come
    from L_d (theory.finite_d, through theory.support's interpolant of its per-phase loss:
    no sampling error; the barrier at s=4, N=64, gain 16, d=64 is 0.00260, which 2^18 Monte
    Carlo problems reproduce only to ~0.0003 and 2^14 to ~0.001), the gradient noise
    from `samples` Monte Carlo problems (gradients only: no Hessian per problem).
    """
    from .support import per_phase_loss_coefficients

    s, beta = int(stride), float(gain)
    drops = _path_drops(drops)
    coefficients = jnp.asarray(per_phase_loss_coefficients(float(chunks), beta, float(dim)))
    loss, hess = (
        np.asarray(x) for x in _interpolated_hessians(s, jnp.asarray(drops), coefficients)
    )
    blocks = max(1, samples // block)
    m = len(drops)
    g1, g2 = np.zeros((m, s)), np.zeros((m, s, s))
    for b in range(blocks):
        gram, target = _problem_sample(s, chunks, dim, block, seed * 100003 + b)
        for i, u in enumerate(drops):
            a = jnp.zeros(s, jnp.float64).at[0].set(-u)
            grads = np.asarray(_problem_gradients(a, gram, target, beta, "mse"))
            g1[i] += grads.mean(0) / blocks
            g2[i] += grads.T @ grads / (block * blocks)
    return _path_dict(drops, loss, hess, g2 - g1[:, :, None] * g1[:, None, :])


def escape_rate(path, stride, lr, batch, grid=4000):
    """Rate of escape from uniform pooling over the s drop-one-phase saddles (section above).

    path: escape_path's dict; stride s; SGD lr eta and batch B (time t = eta n). The loss
    maximum past u = 0 is the saddle; the 1-D passage runs from the lowest drop where the
    transverse curvature is still positive (reflecting) to the path's end (absorbing).
    Returns a dict: rate (per unit t, all s saddles), kramers_rate (harmonic Kramers-Langer
    at the well's temperature, s saddles), barrier, temperature (eta c / 2B at the well),
    saddle_drop; rate 0 and barrier inf where the loss does not fall past a maximum.
    """
    from scipy.interpolate import CubicSpline

    s = int(stride)
    drop, x, loss = path["drop"], path["x"], path["loss"]
    well = int(np.argmin(np.abs(drop)))
    top = well + int(np.argmax(loss[well:]))
    temperature = lr * path["noise"][well] / (2.0 * batch)
    none = {"rate": 0.0, "kramers_rate": 0.0, "barrier": math.inf, "temperature": temperature}
    if top == well or top == len(x) - 1 or loss[-1] >= loss[top]:
        return none | {"saddle_drop": math.nan}
    barrier = float(loss[top] - loss[well])
    stable = path["transverse_curvature"] > 0
    start = well - int(np.argmin(stable[well::-1])) + 1 if not stable[: well + 1].all() else 0
    fine = np.linspace(x[start], x[-1], grid)

    def spline(key):
        return CubicSpline(x[start:], path[key][start:])

    diffusion = lr * spline("noise")(fine) / (2.0 * batch)
    t_perp = lr * spline("transverse_noise")(fine) / (2.0 * batch)
    weight = (t_perp / spline("transverse_curvature")(fine)) ** ((s - 2) / 2)
    tau = first_passage_time(fine, -spline("loss")(fine, 1), diffusion, weight)
    kappa = path["curvature"][well]
    saddle = [path["curvature"][top]] + [path["transverse_curvature"][top]] * (s - 2)
    kramers = s * kramers_rate(barrier, temperature, [kappa] * (s - 1), saddle)
    return {
        "rate": s / tau,
        "kramers_rate": kramers,
        "barrier": barrier,
        "temperature": float(temperature),
        "saddle_drop": float(drop[top]),
    }


def escape_probability(rate, time):
    """P(a run has left the uniform well by time t) = 1 - exp(-rate t) (Poisson escapes)."""
    return 1.0 - math.exp(-rate * time)


def delta_max_with_escape(
    floor, stride, p_escape, escaped_delta_max, seeds=1, level=0.95, draws=DRAWS, seed=0
):
    """delta_max when each run has left the uniform well with probability p_escape.

    floor: noise_floor's dict (its pooling_sd and eval_sd); stride s;
    escaped_delta_max: delta_max of the state an escaped run reaches (the (s-1)-phase
    state, theory.phase_accuracy_profile); seeds: runs averaged, each escaping
    independently (the held-out error is shared, as in delta_max_distribution).
    Returns a dict: delta_max_mean (expected, one run) = p escaped + (1 - p) floor mean,
    and mean_of_seeds_interval, the central `level` interval of the seed mean (a mixture:
    binomial number of escapes). Monte Carlo over `draws` from `seed`.
    """
    rng = np.random.default_rng(seed)
    s = int(stride)
    pooling = floor["pooling_sd"] * rng.standard_normal((draws, seeds, s))
    held_out = floor["eval_sd"] * rng.standard_normal((draws, 1, s))
    ranges = np.ptp(pooling + held_out, axis=-1)
    escaped = rng.random((draws, seeds)) < p_escape
    runs = np.where(escaped, escaped_delta_max, ranges)
    tails = [(1.0 - level) / 2.0, (1.0 + level) / 2.0]
    return {
        "delta_max_mean": float(
            p_escape * escaped_delta_max + (1 - p_escape) * ranges[:, 0].mean()
        ),
        "mean_of_seeds_interval": tuple(float(q) for q in np.quantile(runs.mean(1), tails)),
    }


@functools.partial(jit, static_argnums=(5, 6))
def _discrete_escapes(
    key, coefficients, drops, noise, transverse_noise, steps, chains, lr, batch, init
):
    from .support import interpolated_finite_d_loss

    s = init.shape[0]
    grad = jax.grad(interpolated_finite_d_loss)
    centring = jnp.eye(s) - 1.0 / s

    def step(i, state):
        a, k = state
        j = jnp.argmin(a)
        u = jnp.clip((jnp.sum(a) - a[j]) / (s - 1) - a[j], drops[0], drops[-1])
        e = centring[j] / jnp.linalg.norm(centring[j])
        along = jnp.interp(u, drops, noise)
        across = jnp.interp(u, drops, transverse_noise)
        z = jax.random.normal(jax.random.fold_in(k, i), (s,))
        # noise with covariance (along e e^T + across (P - e e^T)) / B
        xi = jnp.sqrt(along) * jnp.dot(e, z) * e + jnp.sqrt(across) * (
            centring @ z - jnp.dot(e, z) * e
        )
        return a - lr * (grad(a, coefficients) + xi / jnp.sqrt(batch)), k

    def chain(k):
        a0 = init * jax.random.normal(jax.random.fold_in(k, steps), (s,))
        a, _ = jax.lax.fori_loop(0, steps, step, (a0, k))
        return jnp.min(jax.nn.softmax(a)) < 0.1

    return jnp.mean(jax.vmap(chain)(jax.random.split(key, chains)))


def escape_fraction_discrete(
    path, stride, chunks, dim, gain, lr, batch, steps, init_scale=0.01, chains=256, seed=0
):
    """Fraction of runs that leave the uniform well in `steps` SGD steps, by simulating the
    reduced recursion a <- a - lr (grad L_d(a) + xi), xi Gaussian with the path's noise.

    L_d is the interpolated finite-d loss (theory.support); the noise covariance is
    (c(u) e e^T + c_perp(u) (P - e e^T)) / B with e the drop direction of the most-dropped
    phase, u its drop and c, c_perp read off `path` (escape_path_finite_d). Unlike
    escape_rate it keeps all s - 1 zero-sum modes (no 1-D reduction) and SGD's discrete
    steps. Measured (s=4, N=64, gain 16, d=64, batch 256, 512 chains): lr 2, 600 steps:
    0.44 (1-D passage 0.72; SGD 7/24, 54/128, 1/4); lr 1, 1200 steps: 0.018 (passage 0.038;
    SGD 1/16). Escaped: min alpha < 0.1 at the end. Returns a float.
    """
    from .support import per_phase_loss_coefficients

    coefficients = jnp.asarray(per_phase_loss_coefficients(float(chunks), float(gain), float(dim)))
    return float(
        _discrete_escapes(
            jax.random.PRNGKey(seed),
            coefficients,
            jnp.asarray(path["drop"]),
            jnp.asarray(path["noise"]),
            jnp.asarray(path["transverse_noise"]),
            int(steps),
            int(chains),
            float(lr),
            float(batch),
            jnp.full(int(stride), float(init_scale)),
        )
    )

"""Instability of uniform pooling: growth rates, thresholds and the time to specialise.

Derivation (docs/theory.md §6.2, extended to H heads and to the ce loss). Write the per-phase
loss as ell(Pbar) (mse: N/(N-1) (1 - P)^2; ce: -log P), with
Pbar[phi] = (1/H) sum_h sigma_N(beta alpha_h[phi]). Near uniform pooling,
alpha_h = 1/s + P u_h / s + O(u^2) with u_h the logits and P the centring projector;
the first-order term of the loss vanishes because sum_phi alpha_h = 1 at every order.
Expanding to second order, with p = sigma_N(beta/s) and sigma', sigma'' at beta/s,

    du_h/dt = -(beta^2 / s^3) [ ell'(p) sigma'' / H * P u_h + ell''(p) sigma'^2 / H^2 * sum_g P u_g ].

Two invariant subspaces: the common mode (all u_h equal, dimension s-1) grows at
lambda_c = -(beta^2 / (H s^3)) [ell' sigma'' + ell'' sigma'^2], which for H = 1 and mse
is docs/theory.md §6.2's -(N/(N-1)) beta^2/s^3 l''(beta/s); the differential modes
(sum_h u_h = 0, dimension (H-1)(s-1)) grow at lambda_d = -(beta^2/(H s^3)) ell' sigma''.
Since ell'' sigma'^2 > 0, lambda_d > lambda_c: with two or more heads the heads first
split the phases between them, and the threshold moves from sigma_N(beta/s) < 1/3
(one head, mse) to sigma_N(beta/s) < 1/2, i.e. N > 1 + exp(beta/s), for either loss.
One ce head is never unstable (lambda_c = -(beta^2/s^3) sigma(1 - sigma) < 0).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit

from .needle_mass import sigma_n
from .quadrature import log_chi_mean
from .reduced import LOSSES, centred_logits, reduced_loss


def _sigma_derivatives(margin, chunks):
    sigma = sigma_n(margin, chunks)
    first = sigma * (1.0 - sigma)
    second = first * (1.0 - 2.0 * sigma)
    return sigma, first, second


def _loss_derivatives(p, chunks, loss):
    if loss == "mse":
        scale = chunks / (chunks - 1.0)
        return -2.0 * scale * (1.0 - p), 2.0 * scale
    if loss == "ce":
        return -1.0 / p, 1.0 / p**2
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")


def growth_rates(stride, chunks, gain, heads=1, loss="mse"):
    """(lambda_common, lambda_differential) of zero-sum perturbations of uniform pooling.

    stride s, chunks N, gain beta (scalars or broadcastable arrays), heads H, loss
    "mse" | "ce". Derivation in this module's docstring (docs/theory.md §6.2 for H = 1, mse).
    Returns two arrays; lambda_differential is nan for H = 1 (no such mode).
    """
    s, n, beta = np.asarray(stride, float), np.asarray(chunks, float), np.asarray(gain, float)
    p, d1, d2 = _sigma_derivatives(beta / s, n)
    l1, l2 = _loss_derivatives(p, n, loss)
    scale = beta**2 / (heads * s**3)
    differential = -scale * l1 * d2
    common = -scale * (l1 * d2 + l2 * d1**2)
    if heads == 1:
        differential = np.full_like(common, np.nan)
    return common, differential


def growth_rate(stride, chunks, gain, heads=1, loss="mse"):
    """lambda: the fastest growth rate of perturbations of uniform pooling (docs/theory.md §6.2).

    Same arguments as growth_rates. H = 1, mse: -(N/(N-1)) beta^2/s^3 l''(beta/s);
    H >= 2: the differential (phase-splitting) rate, which is the larger.
    Returns an array of the broadcast shape of the inputs (positive: unstable).
    """
    common, differential = growth_rates(stride, chunks, gain, heads, loss)
    return common if heads == 1 else differential


def critical_chunks(gain, stride, heads=1, loss="mse"):
    """N_c: uniform pooling is unstable for N > N_c (docs/theory.md §6.3; heads/ce: module docstring).

    gain beta, stride s (scalars or arrays). H = 1 mse: 1 + 2 exp(beta/s);
    H >= 2 (either loss): 1 + exp(beta/s); H = 1 ce: inf (never unstable).
    Returns an array.
    """
    margin = np.asarray(gain, float) / np.asarray(stride, float)
    if heads == 1 and loss == "ce":
        return np.full_like(margin, np.inf)
    factor = 2.0 if heads == 1 else 1.0
    return 1.0 + factor * np.exp(margin)


def critical_gain(chunks, stride, heads=1, loss="mse"):
    """beta_c: uniform pooling is unstable for beta < beta_c (inverse of critical_chunks).

    chunks N, stride s. H = 1 mse: s log((N-1)/2); H >= 2: s log(N-1); H = 1 ce: 0.
    Returns an array.
    """
    n, s = np.asarray(chunks, float), np.asarray(stride, float)
    if heads == 1 and loss == "ce":
        return np.zeros_like(n * s)
    factor = 2.0 if heads == 1 else 1.0
    return s * np.log((n - 1.0) / factor)


def _split_modes(centred):
    common = jnp.mean(centred, axis=0, keepdims=True)
    return jnp.broadcast_to(common, centred.shape), centred - common


@jit
def _ray_speed(direction, radius, gain, chunks, loss_is_ce):
    # f(x) = -v . grad L(x v): the flow's radial speed along the fixed ray x v.
    def along(x):
        mse = reduced_loss(x * direction, gain, chunks, "mse")
        ce = reduced_loss(x * direction, gain, chunks, "ce")
        return jnp.where(loss_is_ce, ce, mse)

    return -jax.vmap(jax.grad(along))(radius)


def ray_time_offset(direction, stride, chunks, gain, loss="mse", event_level=0.25, nodes=96):
    """tau: nonlinear offset of the time to reach |P a| = event_level along a ray (docs/theory.md §7).

    direction: (H, s) or (M, H, s) directions v (centred per head and normalised here);
    stride s, chunks N, gain beta. Along the ray a = x v the flow's radial speed is
    f(x) = -v . grad L(x v) -> lambda_v x (with M directions, f is averaged over them:
    the direction-averaged radial flow). The time from x0 to x_f is
    int dlog x * x / f(x), so tau = int_{-inf}^{log x_f} (x / f(x) - 1/lambda_v) dlog x,
    a 1-D Gauss-Legendre quadrature (the integrand decays as x^2 for small x).
    Returns (tau, lambda_v); tau is nan when the radial speed stalls (f <= 0) before x_f.
    """
    v = np.asarray(direction, float)
    if v.ndim == 2:
        v = v[None]
    v = centred_logits(v)
    v = v / np.linalg.norm(v, axis=(-2, -1), keepdims=True)
    heads = v.shape[1]
    betas = jnp.full((heads,), float(gain))
    is_ce = jnp.asarray(loss == "ce")

    def mean_speed(radius):
        radius = jnp.asarray(radius)
        speeds = jax.vmap(_ray_speed, in_axes=(0, None, None, None, None))(
            jnp.asarray(v), radius, betas, chunks, is_ce
        )
        return np.asarray(jnp.mean(speeds, axis=0))

    small = 1e-4 * event_level
    lam = float(mean_speed(np.array([small]))[0] / small)
    y_top = math.log(event_level)
    y_bottom = y_top - 14.0
    xs, ws = np.polynomial.legendre.leggauss(nodes)
    ys = y_bottom + (xs + 1.0) * (y_top - y_bottom) / 2.0
    weights = ws * (y_top - y_bottom) / 2.0
    radius = np.exp(ys)
    speed = mean_speed(radius)
    if np.any(speed <= 0.0):
        return np.nan, lam
    tau = float(np.sum(weights * (radius / speed - 1.0 / lam)))
    return tau, lam


def _isotropic_directions(rng, count, heads, stride):
    z = rng.standard_normal((count, heads, stride))
    z = centred_logits(z)
    if heads > 1:  # the dominant (differential) subspace
        z = z - z.mean(axis=1, keepdims=True)
    return z


def nonlinear_offset(
    stride, chunks, gain, heads=1, loss="mse", event_level=0.25, directions=64, seed=0
):
    """tau of specialization_time for isotropic starts: the direction-averaged ray offset.

    ray_time_offset over `directions` isotropic directions of the dominant mode (fixed seed);
    0 where the radial speed stalls. Returns a float.
    """
    rays = _isotropic_directions(np.random.default_rng(seed), directions, heads, stride)
    tau = ray_time_offset(rays, stride, chunks, gain, loss, event_level)[0]
    return float(tau) if np.isfinite(tau) else 0.0


def specialization_time(
    stride,
    chunks,
    gain,
    init_scale,
    heads=1,
    loss="mse",
    event_level=0.25,
    pooling_logits=None,
    directions=64,
    seed=0,
):
    """t*: first time the order parameter delta = |P a|_F reaches event_level (docs/theory.md §7).

    Definitions shared with sims.toy.flow.solve_many: delta(t) = Frobenius norm of the
    per-head centred pooling logits (= |log alpha - mean log alpha|, a function of the
    pooling weights); the event is delta = event_level (default 0.25: the end of the
    linear phase, weights off uniform by about 10%; the later collapse onto a support
    adds a further O(1/lambda) that depends on the start's direction, not on its size).
    Linear phase (thresholds module docstring): H = 1: delta(t) = delta_0 e^{lambda t};
    H >= 2: delta^2 = |common_0|^2 e^{2 lambda_c t} + |diff_0|^2 e^{2 lambda_d t}.
    Nonlinear tail: tau from ray_time_offset along the dominant mode.
    With pooling_logits (H, s) (the actual start): delta_0 and its modes are those of
    that start, tau that of its ray (the direction-averaged one if that ray stalls).
    Without: logits init_scale * N(0, 1) of shape (H, s); log|mode_0| takes its exact
    mean log(init_scale) + E log chi_k, and tau is that of the radial speed averaged over
    `directions` isotropic directions (fixed seed): semi-analytic, a 1-D quadrature.
    Returns t* (float; inf if uniform pooling is stable).
    """
    lam_c, lam_d = (float(x) for x in growth_rates(stride, chunks, gain, heads, loss))
    lam = lam_c if heads == 1 else lam_d
    if not lam > 0.0:
        return math.inf
    rng = np.random.default_rng(seed)
    if pooling_logits is not None:
        a0 = np.asarray(pooling_logits, float)
        centred = centred_logits(a0)
        common, diff = (np.asarray(x) for x in _split_modes(jnp.asarray(centred)))
        log_common = math.log(np.linalg.norm(common) + 1e-300)
        log_diff = math.log(np.linalg.norm(diff) + 1e-300) if heads > 1 else -math.inf
        rays = [diff if heads > 1 else common]
    else:
        # the common mode repeats the heads' mean (variance init_scale^2 / H per entry) on
        # each of the H heads: its Frobenius norm is init_scale chi_{s-1}, whatever H
        log_common = math.log(init_scale) + log_chi_mean(stride - 1)
        log_diff = (
            math.log(init_scale) + log_chi_mean((heads - 1) * (stride - 1))
            if heads > 1
            else -math.inf
        )
        rays = list(_isotropic_directions(rng, directions, heads, stride))
    tau = ray_time_offset(np.stack(rays), stride, chunks, gain, loss, event_level)[0]
    if not np.isfinite(tau):
        isotropic = _isotropic_directions(rng, directions, heads, stride)
        tau = ray_time_offset(isotropic, stride, chunks, gain, loss, event_level)[0]
    tau = float(tau) if np.isfinite(tau) else 0.0
    log_level = math.log(event_level)
    if heads == 1:
        return (log_level - log_common) / lam + tau

    # Solve |c0|^2 e^{2 lam_c t} + |d0|^2 e^{2 lam_d t} = level^2 for the linear part.
    def excess(t):
        return (
            np.logaddexp(2 * (log_common + lam_c * t), 2 * (log_diff + lam_d * t)) - 2 * log_level
        )

    if excess(0.0) >= 0.0:
        return tau
    lo, hi = 0.0, (log_level - log_diff) / lam_d + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi) + tau


float64_module(__name__)  # 64-bit types inside these functions only

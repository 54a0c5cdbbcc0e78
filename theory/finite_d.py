"""The expected mse loss at finite d, L_d(a, beta), and its threshold (docs/theory.md §6.10-§6.12, §7).

Derivation (one head, phase phi, query q = x[c*, phi], keys i.i.d. N(0, I/d)). Condition on
r = |q|^2 ~ chi2_d / d, as in theory.accuracy: every inner product of q with another key is
N(0, r/d), independently, so with alpha = softmax(a), a_phi = alpha[phi],
s_phi^2 = |alpha|^2 - a_phi^2 and M = N - 1 distractor chunks,

    needle logit      m   = beta (kappa a_phi r + sqrt(r/d) s_phi Z),
    distractor logits z_c = sigma Z_c,  sigma = beta sqrt(r/d) |alpha|,    c = 1..M,

all independent Gaussians given r (exact: this is how idealized.toy.task samples the gram).
With S = sum_c e^{z_c} and Q = sum_c e^{2 z_c} the per-needle loss |Pbar - onehot|^2 is

    l = (1 - P*)^2 + sum_c P_c^2 = (S^2 + Q) / (e^m + S)^2.

Write 1/x^2 = int_0^inf t e^{-t x} dt. The needle and the distractors then factorise:
with psi(t) = E_Z exp(-t e^m) and, for y = e^{sigma Z}, phi_k(t) = E[y^k e^{-t y}],

    E[(S^2 + Q) e^{-t S}] = phi_0^{M-1} (2 M phi_2 + M (M - 1) phi_1^2 / phi_0),
    E[l | r]            = int_0^inf t psi(t) phi_0(t)^{M-1} (2 M phi_2 + M (M-1) phi_1^2 / phi_0) dt,

and L_d = mean_phi E_r E[l | r]. At d = inf (sigma = 0) this is M (M+1) / (e^m + M)^2 =
N/(N-1) (1 - sigma_N(m))^2, docs/theory.md §5's L_inf. No expansion in 1/d is made: it is a
deterministic quadrature, exact up to the quadrature error. Rules: trapezoid in u = log t
(the integrand is analytic in a strip, so the trapezoid converges geometrically), trapezoid
against the Gaussian density in Z (same reason), trapezoid in rho = sqrt(r d) against the
chi_d density; all in log space (logsumexp), so it is differentiable everywhere by jax.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit

from .quadrature import chi_nodes_traced, normal_nodes
from .thresholds import growth_rate

# Quadrature rules (module docstring). Fixed, so the loss is one smooth function of the state;
# `test_theory_finite_d` checks them against rules twice as fine.
LOG_T = (-32.0, 8.0, 0.6)  # u = log t: trapezoid from low to high with this step
NEEDLE_NODES = 24  # Gauss-Hermite nodes for the needle's Z
DISTRACTOR_NODES = 48  # Gauss-Hermite nodes for a distractor's Z
CHI_NODES = 10  # Gauss-Hermite nodes for rho = sqrt(r d), reweighted to the chi_d density


@functools.lru_cache(maxsize=8)
def _log_t(low, high, step):
    return np.arange(low, high + step / 2, step), float(np.log(step))


def _log_laplace(log_t, mean, sd, power, nodes):
    """log E[y^power exp(-t y)] for y = exp(mean + sd Z), Z ~ N(0, 1), at every log t.

    log_t (U,); mean, sd: arrays of one shape (...). Returns (..., U).
    """
    z, w = normal_nodes(nodes)
    z, log_w = (jnp.asarray(x).reshape((1,) * (mean.ndim + 1) + (-1,)) for x in (z, np.log(w)))
    log_t = log_t.reshape((1,) * mean.ndim + (-1, 1))
    exponent = mean[..., None, None] + sd[..., None, None] * z
    terms = log_w + power * exponent - jnp.exp(log_t + exponent)
    return jax.nn.logsumexp(terms, axis=-1)


def expected_loss_given_norm(needle_weight, weight_norm2, gain, chunks, dim, norm2, kappa):
    """E[|Pbar - onehot|^2 | r] for one head at query norm r = |q|^2 (module docstring).

    needle_weight alpha_phi and kappa (the needle-mean factor, theory.rope; 1 without
    RoPE): (P, 1) per phase; norm2 r: (1, R) query norms; weight_norm2 |alpha|^2, gain
    beta, chunks N, dim d: scalars. Returns (P, R).
    """
    u, log_du = (jnp.asarray(x) for x in _log_t(*LOG_T))
    scale = gain * jnp.sqrt(norm2 / dim)  # (1, R)
    others = jnp.sqrt(jnp.maximum(weight_norm2 - needle_weight**2, 0.0))  # (P, 1)
    needle_mean = gain * kappa * needle_weight * norm2  # (P, R)
    log_psi = _log_laplace(u, needle_mean, scale * others, 0.0, NEEDLE_NODES)  # (P, R, U)
    sigma = scale * jnp.sqrt(weight_norm2)  # (1, R): the distractors do not see the phase
    log_phi0, log_phi1, log_phi2 = (
        _log_laplace(u, jnp.zeros_like(sigma), sigma, k, DISTRACTOR_NODES) for k in (0.0, 1.0, 2.0)
    )
    distractors = chunks - 1.0
    log_sums = jnp.logaddexp(
        jnp.log(2.0 * distractors) + log_phi2,
        jnp.log(distractors * (distractors - 1.0)) + 2.0 * log_phi1 - log_phi0,
    )
    log_rest = 2.0 * u.reshape(1, 1, -1) + (distractors - 1.0) * log_phi0 + log_sums  # (1, R, U)
    return jnp.exp(log_du + jax.nn.logsumexp(log_psi + log_rest, axis=-1))


def finite_d_loss(
    pooling_logits, gain, chunks, dim, weight_decay=0.0, phase_scale=None, entropy_weight=0.0
):
    """L_d(a, beta): the expected mse loss of one head at finite d (module docstring), differentiable.

    pooling_logits: (1, s) or (s,) logits a (one head); gain: beta (scalar or (1,)); chunks N;
    dim d (a scalar, may be traced: one compilation serves every d); weight_decay adds
    weight_decay/2 beta^2 as theory.reduced_loss; phase_scale: optional (s,) needle-mean
    factor kappa; entropy_weight adds -entropy_weight H(alpha) (theory.mitigations), as
    theory.reduced_loss does. Equals theory.reduced_loss (mse) as d -> inf. Returns a scalar.
    """
    logits = jnp.asarray(pooling_logits, jnp.float64)
    if logits.ndim == 2:
        if logits.shape[0] != 1:
            raise ValueError("finite_d_loss: one head only (heads share the keys at finite d)")
        logits = logits[0]
    gain = jnp.reshape(jnp.asarray(gain, jnp.float64), ())
    weights = jax.nn.softmax(logits)
    kappa = jnp.ones_like(weights) if phase_scale is None else jnp.asarray(phase_scale, jnp.float64)
    rho, log_w = chi_nodes_traced(jnp.asarray(dim, jnp.float64), CHI_NODES)
    per_phase = expected_loss_given_norm(
        weights[:, None],
        jnp.sum(weights**2),
        gain,
        chunks,
        dim,
        rho[None, :] ** 2 / dim,
        kappa[:, None],
    )
    data = jnp.mean(per_phase @ jnp.exp(log_w))
    entropy = -jnp.sum(weights * jax.nn.log_softmax(logits))
    return data + 0.5 * weight_decay * gain**2 - entropy_weight * entropy


@functools.partial(jit, static_argnames="stride")
def _uniform_hessian(stride, chunks, gain, dim):
    hess = jax.hessian(finite_d_loss)(jnp.zeros((1, stride)), gain, chunks, dim)[0, :, 0, :]
    return hess[0, 0], hess[0, 1]


def uniform_hessian(stride, chunks, gain, dim):
    """(D, O): diagonal and off-diagonal of the Hessian of L_d in the pooling logits at a = 0.

    By the phases' permutation symmetry the Hessian at uniform pooling is D I + O (J - I),
    so on zero-sum perturbations it is (D - O) times the identity. Autodiff of finite_d_loss;
    one compilation per stride. Returns two floats.
    """
    diag, off = _uniform_hessian(int(stride), float(chunks), float(gain), float(dim))
    return float(diag), float(off)


def growth_rate_finite_d(stride, chunks, gain, dim):
    """lambda_d: growth rate of zero-sum pooling-logit perturbations of uniform pooling at d.

    The flow linearised at a = 0, da/dt = -Hess L_d(0) a, on zero-sum a: lambda_d = -(D - O)
    (uniform_hessian). d = inf gives docs/theory.md §6.2's -(N/(N-1)) (beta^2/s^3) l''(beta/s)
    (theory.growth_rate), which finite d approaches as 1/d. Returns a float (> 0: unstable).
    """
    if np.isinf(dim):
        return float(growth_rate(stride, chunks, gain))
    diag, off = uniform_hessian(stride, chunks, gain, dim)
    return -(diag - off)


def _sign_change(f, low, high, rtol=1e-8):
    """x in [low, high] (both > 0) where f changes sign, by bisection in log x; nan if none."""
    lo, hi = np.log(low), np.log(high)
    f_lo = f(low)
    if not f_lo * f(high) < 0.0:
        return float("nan")
    while hi - lo > rtol:
        mid = 0.5 * (lo + hi)
        f_mid = f(np.exp(mid))
        if f_mid * f_lo > 0.0:
            lo, f_lo = mid, f_mid
        else:
            hi = mid
    return float(np.exp(0.5 * (lo + hi)))


def critical_chunks_finite_d(gain, stride, dim, low=3.0, high=1e5):
    """N_c(d): the context length where lambda_d (growth_rate_finite_d) changes sign.

    Root of lambda_d in N on [low, high] (bisection in log N); d = inf gives docs/theory.md §6.3's
    1 + 2 exp(beta/s). Uniform pooling is linearly unstable for N > N_c(d). nan if lambda_d
    keeps its sign.
    """
    return _sign_change(lambda n: growth_rate_finite_d(stride, n, gain, dim), low, high)


def critical_gain_finite_d(chunks, stride, dim, low=1.0, high=200.0):
    """beta_c(d): the gain where lambda_d (growth_rate_finite_d) changes sign at fixed N.

    d = inf gives docs/theory.md §6.3's s log((N-1)/2). Uniform pooling is linearly unstable for
    beta < beta_c(d). nan if lambda_d keeps its sign on [low, high].
    """
    return _sign_change(lambda g: growth_rate_finite_d(stride, chunks, g, dim), low, high)


float64_module(__name__)  # 64-bit types inside these functions only

"""SGD's time to specialise: the unstable linear recursion with gradient noise (docs/theory.md §9.3).

Derivation (one head, fixed gain; docs/theory_derivations.md §3). Past the threshold,
SGD's zero-sum pooling-logit modes follow, near uniform pooling,

    u_{n+1} = (1 + eta lambda) u_n - eta xi_n,   Var xi_n = c / B per mode, independent,

with lambda the growth rate (docs/theory.md §6.2; lambda_d at finite d, theory.finite_d) and
c the per-problem gradient variance of a zero-sum mode at uniform pooling
(theory.noise_floor.uniform_moments). Unrolled,

    u_n = r^n [u_0 - eta sum_{m<n} r^{-(m+1)} xi_m],   r = 1 + eta lambda,

a Gaussian with variance per mode V_n = sigma_0^2 r^{2n} + sigma_N^2 (r^{2n} - 1), where
sigma_0 = init_scale (the trainer's logits are i.i.d. N(0, sigma_0^2), so is each zero-sum
mode) and sigma_N^2 = eta c / (B lambda (2 + eta lambda)): the noise injected during the
linear stage acts as an extra initial amplitude (sigma_eff^2 = sigma_0^2 + sigma_N^2 once
n >> 1 / (eta lambda)). The order parameter delta = |P a| = sqrt(V_n) chi_{s-1}, with
chi_{s-1} the norm of s - 1 standard normals, reaches the event level after

    n* = log((level^2 / chi^2 + sigma_N^2) / (sigma_0^2 + sigma_N^2)) / (2 log r)

steps (0 if the start is past it), t* = eta n* + tau, tau the nonlinear offset along the
ray (theory.thresholds.nonlinear_offset, d = inf). t* falls as chi grows, so chi's
quantile 1 - q gives t*'s quantile q.
"""

from __future__ import annotations

import math

import numpy as np

from .finite_d import growth_rate_finite_d
from .noise_floor import uniform_moments
from .thresholds import growth_rate, nonlinear_offset


def effective_init_scale(init_scale, growth, noise, lr, batch):
    """sigma_eff = sqrt(sigma_0^2 + eta c / (B lambda (2 + eta lambda))) (module docstring).

    init_scale sigma_0; growth lambda > 0; noise c (uniform_moments); lr eta; batch B.
    """
    return math.sqrt(init_scale**2 + lr * noise / (batch * growth * (2.0 + lr * growth)))


def _chi_quantile(dof, q, draws=200_001):
    rng = np.random.default_rng(0)
    return float(np.quantile(np.sqrt(rng.chisquare(dof, draws)), q))


def sgd_specialization_time(
    stride,
    chunks,
    gain,
    init_scale,
    dim,
    lr,
    batch,
    loss="mse",
    event_level=0.25,
    quantile=0.5,
    moments=None,
):
    """Quantile of SGD's t* (time t = lr * step at which delta reaches event_level; module docstring).

    stride s, chunks N, gain beta, init_scale sigma_0, dim d (math.inf for the reduced
    model), lr eta, batch B, loss; quantile q of t* over seeds (0.5: the median);
    moments (kappa, c) if known, else uniform_moments at d. lambda is lambda_d at finite d.
    Returns a dict: time (t*'s quantile; inf if uniform pooling is stable), growth (lambda),
    noise (c), effective_init_scale (sigma_eff), offset (tau).
    """
    s = int(stride)
    lam = (
        float(growth_rate(s, chunks, gain, loss=loss))
        if math.isinf(dim)
        else growth_rate_finite_d(s, chunks, gain, dim)
    )
    if not lam > 0.0:
        return {"time": math.inf, "growth": lam}
    _, c = moments if moments is not None else uniform_moments(s, chunks, dim, gain, loss)
    noise2 = lr * c / (batch * lam * (2.0 + lr * lam))
    chi = _chi_quantile(s - 1, 1.0 - quantile)
    ratio = ((event_level / chi) ** 2 + noise2) / (init_scale**2 + noise2)
    steps = max(0.0, math.log(ratio) / (2.0 * math.log1p(lr * lam)))
    tau = nonlinear_offset(s, chunks, gain, loss=loss, event_level=event_level)
    return {
        "time": lr * steps + tau,
        "growth": lam,
        "noise": c,
        "effective_init_scale": effective_init_scale(init_scale, lam, c, lr, batch),
        "offset": tau,
    }

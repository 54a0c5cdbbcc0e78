"""DeepSeek-V4's compressor in the idealized model: a unit-normalised pooled key (figure 8).

Derivation (single head, stride s != 4, gate `wgate = 0`, `wkv = I`, `ape` equal across
channels, no RoPE: the `deepseek_v4` operator at its initialisation,
idealized.toy.compression.init_compressor). Then every channel pools with the same weights
`alpha = softmax(a)` over the block's own s tokens, `y[c] = sum_j alpha_j x[c, j]`;
RMSNorm gives `sqrt(d) y / |y|` (eps negligible) and the `DeepSeekV4` module divides by
sqrt(d), so the key is `K[c] = y[c] / |y[c]|`. As d -> inf, `|x|^2 -> 1` and cross
products vanish, so `|y|^2 -> |alpha|^2` and the logits are

    needle      z[c*] = beta alpha_phi / |alpha| =: m_phi,      distractors   z[c] = 0,

docs/theory.md §5 with `beta alpha_phi` replaced by `beta alpha_phi / |alpha|`:

    L(a) = N/(N-1) mean_phi (1 - sigma_N(m_phi))^2.

Stability of uniform pooling. Take `a = eps v` with `sum v = 0`, `q = mean_phi v_phi^2`.
To second order `alpha_phi = (1 + v_phi + v_phi^2/2 - q/2) / s` and `|alpha|^2 = (1 + q)/s`,
so with `m0 = beta / sqrt(s)`

    m_phi = m0 (1 + v_phi + v_phi^2/2 - q),   mean_phi dm = -m0 q / 2,   mean_phi dm^2 = m0^2 q.

With `l(m) = (1 - sigma_N(m))^2` the loss changes by `N/(N-1) (q/2) m0 (m0 l'' - l')`: the
Hessian on the zero-sum logits is isotropic and every zero-sum mode grows at

    lambda = -(N/(N-1)) (m0 / s) (m0 l''(m0) - l'(m0)).

The first term is softmax_pool's (docs/theory.md §6.2, there with `m = beta/s` and a factor 1/s^2
from `dm = beta da/s`); the second, `+l' < 0`, comes from `d|alpha|`: moving weight off
uniform always raises `|alpha|`, which lowers every needle logit, so normalisation
stabilises. With `g = 1 - sigma_N(m)`, `l' = -2 g^2 (1-g)` and `l'' = 2 g^2 (1-g)(2-3g)`,
so `m l'' - l' = 2 g^2 (1-g) (m (2 - 3g) + 1)`, and uniform pooling is unstable iff
`m0 (2 - 3g) + 1 < 0`, i.e. (solving for N at fixed m0 > 1)

    N > N_c(m0) = 1 + (2 m0 + 1) e^m0 / (m0 - 1),        never for m0 <= 1.

N_c is smallest, 1 + 34.4, at `m0 = (1 + sqrt 33)/4`; below N = 36 uniform pooling is
stable at every gain, above it unstable only for gains in a window
`sqrt(s) (m_lo, m_hi)`. Canonical s=8, N=64, beta=16: m0 = 5.66, N_c = 758,
lambda = -0.355 (softmax_pool: +0.0585).

What this does not cover: stride 4 (the overlapping window puts the needle in two keys,
its own through the second half of the columns and the next block's through the first:
a different reduced loss); channel-dependent `ape` (to first order it leaves every needle
logit unchanged and raises `|y|`, so it adds another stabilising term); learning of
`wgate` and `wkv`, which SGD also trains; RoPE.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import betainc

from weakspots.idealized.precision import float64_module

from .quadrature import chi_nodes, normal_nodes
from .reduced import retrieval_probability

#: m0 where N_c(m0) is smallest: d/dm log((2m+1) e^m / (m-1)) = 0, i.e. 2m^2 - m - 4 = 0.
WORST_LOGIT = (1.0 + math.sqrt(33.0)) / 4.0


def normalised_needle_logit(pooling_logits, gain):
    """m_phi = beta alpha_phi / |alpha| at d = inf (module docstring).

    pooling_logits: (H, s) `ape` logits `a_h` (shared by all channels); gain: (H,).
    Returns (H, s).
    """
    weights = jax.nn.softmax(pooling_logits, axis=-1)
    norm = jnp.sqrt(jnp.sum(weights**2, axis=-1, keepdims=True))
    return gain[:, None] * weights / norm


def normalised_reduced_loss(pooling_logits, gain, chunks):
    """L(a) = N/(N-1) mean_phi (1 - Pbar[phi])^2, Pbar = mean_h sigma_N(m_h,phi) (module docstring).

    The docs/theory.md §5 loss with softmax_pool's needle logit `beta alpha_phi` replaced by the
    unit-normalised key's `beta alpha_phi / |alpha|`. pooling_logits: (H, s); gain: (H,);
    chunks: N. Returns a scalar; differentiable in both.
    """
    m = normalised_needle_logit(pooling_logits, gain)
    pbar = jnp.mean(retrieval_probability(m, chunks), axis=0)
    return chunks / (chunks - 1.0) * jnp.mean((1.0 - pbar) ** 2)


def normalised_growth_rate(stride, chunks, gain):
    """lambda = -(N/(N-1)) (m0/s) (m0 l''(m0) - l'(m0)), m0 = beta/sqrt(s) (module docstring).

    The growth rate of every zero-sum perturbation of the pooling logits at uniform
    pooling under gradient flow on normalised_reduced_loss (one head, fixed gain).
    Negative: uniform pooling is stable. Arguments broadcast; returns float or array.
    """
    m = np.asarray(gain, float) / np.sqrt(stride)
    g = (chunks - 1.0) / (np.exp(m) + chunks - 1.0)
    curvature = 2.0 * g**2 * (1.0 - g) * (m * (2.0 - 3.0 * g) + 1.0)
    return -(chunks / (chunks - 1.0)) * (m / stride) * curvature


def normalised_critical_chunks(stride, gain):
    """N_c = 1 + (2 m0 + 1) e^m0 / (m0 - 1) for m0 = beta/sqrt(s) > 1, else inf (module docstring).

    Uniform pooling of the unit-normalised key is unstable iff N > N_c.
    """
    m = float(gain) / math.sqrt(stride)
    if m <= 1.0:
        return math.inf
    return 1.0 + (2.0 * m + 1.0) * math.exp(m) / (m - 1.0)


def normalised_unstable_gains(stride, chunks):
    """The gain window (beta_lo, beta_hi) where uniform pooling is unstable, or None.

    Solves N_c(beta/sqrt(s)) = N on either side of WORST_LOGIT (module docstring);
    None when N <= N_c(WORST_LOGIT) = 35.4, where no gain destabilises it.
    """
    excess = lambda m: (2 * m + 1) * math.exp(m) / (m - 1) - (chunks - 1.0)  # noqa: E731
    if excess(WORST_LOGIT) >= 0.0:
        return None
    from scipy.optimize import brentq  # here: importing theory stays lighter

    lo = brentq(excess, 1.0 + 1e-12, WORST_LOGIT)
    hi = brentq(excess, WORST_LOGIT, WORST_LOGIT + math.log(chunks) + 10.0)
    return math.sqrt(stride) * lo, math.sqrt(stride) * hi


@functools.lru_cache(maxsize=8)
def _chi2_nodes(dof, nodes):
    rho, w = chi_nodes(float(dof), nodes)
    return rho**2, w


def normalised_phase_accuracy(pooling_weights, chunks, dim, nodes=32):
    """acc[phi] at finite d for the unit-normalised key `K = y/|y|` (exact up to quadrature).

    Derivation (docs/theory.md §6.12's conditioning, extended to the norm). With q = x[c*, phi],
    r = |q|^2 and q_hat = q/|q|, write `y[c*] = A q_hat + P` with
    `A = alpha_phi sqrt(r) + s_phi Z / sqrt(d)` (s_phi^2 = |alpha|^2 - alpha_phi^2) and P
    orthogonal to q, `|P|^2 = s_phi^2 W / d`, W ~ chi2_{d-1}, all independent. A logit is
    `beta sqrt(r) cos(angle to q)`, so the common factor drops: the needle's cosine is
    `A / sqrt(A^2 + |P|^2)` and each distractor's is that of a uniform direction on
    S^{d-1}, whose CDF F has `(1 + cos)/2 ~ Beta((d-1)/2, (d-1)/2)`; they are independent,
    so acc = E_{r, Z, W} F(cos_needle)^(N-1): a 3-D quadrature (chi_d, Gauss-Hermite, chi2_{d-1}).
    The normalisation makes |y| co-vary with the needle's product (a large q.P' raises both),
    which narrows the needle's spread: the accuracy is not mean_pool's.

    pooling_weights: (s,); chunks: N; dim: d. Returns (s,).
    """
    alpha = np.asarray(pooling_weights, float)
    distinct, where = np.unique(alpha, return_inverse=True)
    others = np.sqrt(np.maximum(np.sum(alpha**2) - distinct**2, 0.0))
    rho, w_rho = chi_nodes(float(dim), nodes)  # rho = sqrt(r d) ~ chi_d
    z, w_z = normal_nodes(nodes)
    w2, w_w = _chi2_nodes(dim - 1, nodes)
    # In units of 1/sqrt(d): A sqrt(d) = alpha rho + s Z, |P| sqrt(d) = s sqrt(W).
    a = distinct[:, None, None] * rho[None, :, None] + others[:, None, None] * z[None, None, :]
    p2 = others[:, None, None, None] ** 2 * w2[None, None, None, :]
    cos = a[..., None] / np.sqrt(np.maximum(a[..., None] ** 2 + p2, 1e-300))
    half = 0.5 * (dim - 1.0)
    cdf = betainc(half, half, np.clip(0.5 * (1.0 + cos), 0.0, 1.0))
    win = np.exp((chunks - 1.0) * np.log(np.maximum(cdf, 1e-300)))
    return np.einsum("pijk,i,j,k->p", win, w_rho, w_z, w_w)[where.reshape(alpha.shape)]


float64_module(__name__)  # 64-bit types inside these functions only

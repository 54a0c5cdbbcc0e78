"""The selection model: an indexer keeps the top k of N entries (docs/theory.md §9.5).

The needle entry's indexer score at phase phi is X ~ N(mu(phi), sigma^2), the N - 1
distractor scores are i.i.d. N(0, 1); the needle is read only if its score ranks within the
top k. Given X = x the number of distractors above x is Binomial(N - 1, 1 - Phi(x)), so

    P(rank <= k | x) = P(Bin(N - 1, 1 - Phi(x)) <= k - 1) = I_(Phi(x))(N - k, k)

(the regularised incomplete beta), and the miss probability is the 1-D integral
1 - E_x I_(Phi(x))(N - k, k). Equivalently the k-th largest distractor Y has
Phi(Y) ~ Beta(N - k, k). At large N it concentrates at t = Phi^-1(1 - k/N) with standard
deviation w = sqrt(k (N - k) / (N^2 (N + 1))) / phi(t) ~ 1 / (t sqrt(k)): the miss is a step
Phi((t - mu) / sqrt(sigma^2 + w^2)) at t ~ sqrt(2 log(N/k)).

With a toy indexer (pooling weights alpha, dimension d) the scores are those of
docs/theory.md §6.12: given rho = sqrt(d) |q| ~ chi_d the needle's standardised score is
(alpha_phi rho + s_phi Z)/|alpha| and the distractors are exactly i.i.d. N(0, 1).
acc(phi) = P(rank <= k) acc_read(phi), the read among the k selected entries being the toy's
(theory.accuracy.needle_accuracy with k chunks).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import betainc, ndtr, ndtri

from .accuracy import needle_accuracy
from .quadrature import chi_nodes

_GRID = 4001  # points of the composite Simpson rule over the needle score


def _check(chunks, topk):
    if int(topk) < 1 or int(chunks) < 2:
        raise ValueError(f"need chunks >= 2 and topk >= 1, got {chunks}, {topk}")


def hit_given_score(score, chunks, topk):
    """P(rank <= k | needle score x) = I_(Phi(x))(N - k, k); 1 when k >= N. Returns score's shape."""
    _check(chunks, topk)
    n, k = int(chunks), int(topk)
    if k >= n:
        return np.ones_like(np.asarray(score, dtype=float))
    return betainc(n - k, k, ndtr(np.asarray(score, dtype=float)))


def step_location(chunks, topk):
    """t = Phi^-1(1 - k/N): where the k-th largest of the distractors sits at large N (docs/theory.md §9.5)."""
    return float(ndtri(1.0 - int(topk) / int(chunks)))


def step_width(chunks, topk):
    """w: the standard deviation of the k-th largest distractor score, sd(Beta(N-k, k)) / phi(t).

    ~ 1 / (t sqrt(k)) at large N/k and k (docs/theory.md §9.5). Returns a float.
    """
    n, k = int(chunks), int(topk)
    t = step_location(n, k)
    sd_u = math.sqrt(k * (n - k) / (n**2 * (n + 1.0)))
    return sd_u / (math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi))


def miss_probability(mu, sigma, chunks, topk):
    """P(rank > k) for a needle score N(mu, sigma^2) against N - 1 i.i.d. N(0, 1) (docs/theory.md §9.5).

    Exact: 1 - E_x I_(Phi(x))(N - k, k), a composite Simpson rule over x on a range covering
    both the needle's density and the step (sigma = 0: the integrand at x = mu). mu, sigma
    broadcast. Returns the broadcast shape.
    """
    mu, sigma = np.broadcast_arrays(np.asarray(mu, float), np.asarray(sigma, float))
    out = np.empty(mu.shape)
    t, w = step_location(chunks, topk), step_width(chunks, topk)
    for idx in np.ndindex(mu.shape):
        m, sd = float(mu[idx]), float(sigma[idx])
        if sd == 0.0:
            out[idx] = 1.0 - float(hit_given_score(m, chunks, topk))
            continue
        lo = min(m - 12.0 * sd, t - 12.0 * w)
        hi = max(m + 12.0 * sd, t + 12.0 * w)
        x = np.linspace(lo, hi, _GRID)
        density = np.exp(-0.5 * ((x - m) / sd) ** 2) / (sd * math.sqrt(2.0 * math.pi))
        f = density * hit_given_score(x, chunks, topk)
        h = x[1] - x[0]
        simpson = h / 3.0 * (f[0] + f[-1] + 4.0 * f[1:-1:2].sum() + 2.0 * f[2:-1:2].sum())
        out[idx] = 1.0 - simpson
    return out


def needle_mean(hit, sigma, chunks, topk):
    """The needle's mean score mu at which P(rank <= k) = hit (docs/theory.md §9.5): the inverse
    of 1 - miss_probability in mu, by bisection (it rises monotonically in mu). hit in (0, 1),
    clipped to [1e-4, 1 - 1e-4]. Returns a float."""
    target = min(max(float(hit), 1e-4), 1.0 - 1e-4)
    t = step_location(chunks, topk)
    span = 12.0 * max(float(sigma), step_width(chunks, topk), 1.0)
    from scipy.optimize import brentq  # here: importing theory stays lighter

    return float(brentq(
        lambda m: 1.0 - float(miss_probability(m, sigma, chunks, topk)) - target,
        t - span, t + span, xtol=1e-10,
    ))  # fmt: skip


def miss_probability_step(mu, sigma, chunks, topk):
    """The large-N step form Phi((t - mu) / sqrt(sigma^2 + w^2)) of the miss probability (docs/theory.md §9.5).

    t = step_location, w = step_width. Returns the broadcast shape.
    """
    t, w = step_location(chunks, topk), step_width(chunks, topk)
    return ndtr((t - np.asarray(mu, float)) / np.sqrt(np.asarray(sigma, float) ** 2 + w**2))


def amplification(mu, sigma, chunks, topk):
    """-d P(miss) / d mu: how much miss probability a unit deficit in the needle's mean costs (docs/theory.md §9.5).

    Exact as a central difference of miss_probability; its step form
    phi((t - mu)/s_eff)/s_eff, s_eff = sqrt(sigma^2 + w^2), peaks at mu = t at
    1/(sqrt(2 pi) s_eff). Returns the broadcast shape.
    """
    h = 1e-3
    return (miss_probability(np.asarray(mu) - h, sigma, chunks, topk)
            - miss_probability(np.asarray(mu) + h, sigma, chunks, topk)) / (2.0 * h)


def amplification_step(mu, sigma, chunks, topk):
    """The step form of amplification: phi((t - mu)/s_eff) / s_eff (docs/theory.md §9.5)."""
    t, w = step_location(chunks, topk), step_width(chunks, topk)
    s_eff = np.sqrt(np.asarray(sigma, float) ** 2 + w**2)
    z = (t - np.asarray(mu, float)) / s_eff
    return np.exp(-0.5 * z**2) / (math.sqrt(2.0 * math.pi) * s_eff)


def indexer_margin(pooling_weights, dim):
    """(mu, sigma) of the toy indexer's standardised needle score by phase (docs/theory.md §9.5).

    Needle score (alpha_phi rho + s_phi Z)/|alpha|, rho ~ chi_d: mean alpha_phi E rho / |alpha|,
    variance (s_phi^2 + alpha_phi^2 Var rho)/|alpha|^2, with E rho = sqrt(2) Gamma((d+1)/2)/Gamma(d/2).
    A margin deficit Delta alpha costs sqrt(d) Delta alpha / |alpha| in mu. Returns ((s,), (s,)).
    """
    alpha = np.asarray(pooling_weights, dtype=float)
    d = float(dim)
    mean_rho = math.exp(0.5 * math.log(2.0) + math.lgamma((d + 1) / 2) - math.lgamma(d / 2))
    var_rho = d - mean_rho**2
    norm2 = np.sum(alpha**2)
    mu = alpha * mean_rho / math.sqrt(norm2)
    sigma = np.sqrt((norm2 - alpha**2 + alpha**2 * var_rho) / norm2)
    return mu, sigma


def phase_miss_probability(pooling_weights, chunks, topk, dim, nodes=64):
    """P(rank > k) by phase for the toy indexer at finite d, exact up to quadrature (docs/theory.md §9.5).

    Conditions on rho ~ chi_d (chi_nodes): the needle's score is then
    N(alpha_phi rho/|alpha|, s_phi^2/|alpha|^2), the distractors i.i.d. N(0, 1), and
    miss_probability integrates the rest. A one-phase indexer (s_phi = 0) integrates over
    rho alone. Returns (s,).
    """
    alpha = np.asarray(pooling_weights, dtype=float)
    norm = math.sqrt(np.sum(alpha**2))
    rho, w = chi_nodes(float(dim), int(nodes))
    mu = alpha[:, None] * rho[None, :] / norm
    sigma = np.sqrt(np.maximum(norm**2 - alpha**2, 0.0))[:, None] / norm * np.ones_like(mu)
    return miss_probability(mu, sigma, chunks, topk) @ w


def selection_accuracy(indexer_weights, read_weights, chunks, topk, dim, index_dim=None):
    """acc(phi) = P(rank <= k) acc_read(phi) (docs/theory.md §9.5), indexer and readout independent.

    indexer_weights: (s,) the indexer's pooling weights; read_weights: (s,) the main
    attention's; chunks N; topk k; dim d of the main keys; index_dim d_I of the indexer's
    (default d). acc_read is theory.accuracy.needle_accuracy with min(k, N) chunks.
    Returns (s,).
    """
    d_index = dim if index_dim is None else index_dim
    miss = phase_miss_probability(indexer_weights, chunks, topk, d_index)
    read = np.asarray(read_weights, dtype=float)
    acc_read = needle_accuracy(read, np.sum(read**2), min(int(topk), int(chunks)), dim)
    return (1.0 - miss) * acc_read


def topk_gap_requirement(gap=0.4, chunks=32768, topk=512, sigma=1.0):
    """What a per-phase gap from selection alone needs (docs/theory.md §9.6), acc_read = 1.

    The largest gap a mean spread Delta mu buys is 2 Phi(Delta mu / (2 s_eff)) - 1 (the two
    means straddling t symmetrically in the step form), so gap needs
    Delta mu >= 2 s_eff Phi^-1((1 + gap)/2) with s_eff = sqrt(sigma^2 + w^2), and the weak
    phase's mean below t. Returns a dict (t, w, s_eff, margin_spread_needed).
    """
    t, w = step_location(chunks, topk), step_width(chunks, topk)
    s_eff = math.sqrt(float(sigma) ** 2 + w**2)
    need = 2.0 * s_eff * float(ndtri((1.0 + float(gap)) / 2.0))
    return {"gap": float(gap), "step_location": t, "step_width": w, "effective_width": s_eff,
            "margin_spread_needed": need}


def reduced_selection_loss(pooling_logits, index_logits, gain, chunks, topk):
    """The selection model's d = inf loss (docs/theory.md §9.5.1), jax, differentiable.

    pooling_logits, index_logits: (s,) main and indexer logits; gain beta (both); chunks N;
    topk k. At d = inf the needle's indexer score beta alpha_I[phi] > 0 beats the distractors'
    0, so it is always selected and the main readout is the toy's over k entries,
    k/(k-1) (1 - sigma_k(beta alpha_phi))^2 (0 at k = 1); the indexer's KL to the main
    attention's two-level distribution over N entries is
    sigma log(sigma/tau) + (1 - sigma) log((1 - sigma)/(1 - tau)), sigma = sigma_N(beta alpha_phi)
    held fixed, tau = sigma_N(beta alpha_I[phi]). Returns the mean over phases.
    """
    import jax
    import jax.numpy as jnp

    alpha = jax.nn.softmax(pooling_logits)
    alpha_index = jax.nn.softmax(index_logits)
    if int(topk) > 1:
        sig_k = jax.nn.sigmoid(gain * alpha - jnp.log(topk - 1.0))
        main = topk / (topk - 1.0) * (1.0 - sig_k) ** 2
    else:
        main = jnp.zeros_like(alpha)
    sigma = jax.lax.stop_gradient(jax.nn.sigmoid(gain * alpha - jnp.log(chunks - 1.0)))
    log_tau = jax.nn.log_sigmoid(gain * alpha_index - jnp.log(chunks - 1.0))
    log_rest = jax.nn.log_sigmoid(-(gain * alpha_index - jnp.log(chunks - 1.0)))
    kl = sigma * (jnp.log(sigma) - log_tau) + (1.0 - sigma) * (jnp.log1p(-sigma) - log_rest)
    return jnp.mean(main + kl)

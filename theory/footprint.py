"""The footprint model: carry by a local layer, then a compressed readout (docs/theory.md §9.4).

A fact is a key at position p - 1 and its value at p, of phase phi = p mod s. A local
mixing step of width W writes the fact into the tokens after it: token p + r carries it
with share c_r (0 <= r < W), 0 beyond. Compressed entry i (0: the window holding the value,
1: the next, ...) pools its s tokens with weights alpha and has the query logit

    m_i(phi) = beta sum_j alpha_j c_(i s + j - phi)  +  beta_D alpha_(phi-1) [i = 0, phi >= 1].

At phi = 0 the key token sits alone in entry -1, a decoy holding no value, logit
m_dec = beta_D alpha_(s-1). Entry i holds the fact when its tokens meet the carry window,
i <= floor((phi + W - 1)/s); there are n_e(phi) such entries. Of the N entries the decoy is
one of the N - n_e not holding the fact (its logit 0 replaced by m_dec), the rest sit at 0:

    M(phi) = sum_i nu_i e^(m_i) / (sum_i e^(m_i) + [phi = 0](e^(m_dec) - 1) + N - n_e),
    L      = N/(N-1) mean_phi (1 - M(phi))^2,

and m_eff(phi) = log sum_i e^(m_i) is the per-phase logit. With c_r = [r = 0], beta_D = 0,
nu = 1 this is the toy's L_inf of docs/theory.md §5 (theory.reduced_loss).

Everything here is numpy (float64) except `footprint_loss`, which is jax, for flows.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import expit, logsumexp


def flat_carry(window: int, share: float = 1.0) -> np.ndarray:
    """c_r = share for 0 <= r < W: the flat carry of docs/theory.md §9.4. Returns (W,)."""
    if int(window) < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    return np.full(int(window), float(share))


def entry_count(stride: int, window: int) -> np.ndarray:
    """n_e(phi) = floor((phi + W - 1)/s) + 1: the entries holding the fact, by phase. Returns (s,) int."""
    return (np.arange(stride) + int(window) - 1) // int(stride) + 1


def entry_operators(stride: int, carry) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The linear maps from pooling weights to entry logits (module docstring).

    stride s; carry: (W,) shares c_r. Returns (C (s, n, s), K (s, n, s), holds (s, n) bool)
    with n = max_phi n_e: m[phi, i] = beta C[phi, i] . alpha + beta_D K[phi, i] . alpha on the
    entries that hold the fact (holds), the key token's weight in K.
    """
    carry = np.asarray(carry, dtype=float)
    s, window = int(stride), carry.shape[0]
    counts = entry_count(s, window)
    n = int(counts.max())
    phi = np.arange(s)[:, None, None]
    i = np.arange(n)[None, :, None]
    j = np.arange(s)[None, None, :]
    r = i * s + j - phi
    inside = (r >= 0) & (r < window)
    shares = np.where(inside, carry[np.clip(r, 0, window - 1)], 0.0)
    key = ((i == 0) & (phi >= 1) & (j == phi - 1)).astype(float)
    holds = np.arange(n)[None, :] < counts[:, None]
    return shares, key, holds


def entry_logits(pooling_weights, stride: int, carry, gain, decoy_gain=0.0):
    """m_i(phi) and m_dec(phi) of docs/theory.md §9.4 (module docstring).

    pooling_weights: (s,) alpha; carry: (W,) c_r; gain beta; decoy_gain beta_D.
    Returns (m (s, n) with -inf on entries not holding the fact, m_dec (s,): the decoy's
    logit at phi = 0 and -inf elsewhere, where there is no decoy).
    """
    alpha = np.asarray(pooling_weights, dtype=float)
    shares, key, holds = entry_operators(stride, carry)
    m = gain * shares @ alpha + decoy_gain * key @ alpha
    m = np.where(holds, m, -np.inf)
    dec = np.full(stride, -np.inf)
    dec[0] = decoy_gain * alpha[stride - 1]
    return m, dec


def footprint_phase_logit(pooling_weights, stride: int, carry, gain, decoy_gain=0.0):
    """m_eff(phi) = log sum_i e^(m_i(phi)) over the entries holding the fact (docs/theory.md §9.4).

    Arguments as entry_logits. Returns (s,).
    """
    m, _ = entry_logits(pooling_weights, stride, carry, gain, decoy_gain)
    return logsumexp(m, axis=-1)


def _read_quality(read_quality, stride: int, entries: int) -> np.ndarray:
    nu = np.asarray(read_quality, dtype=float)
    if nu.ndim == 1:
        nu = np.pad(nu, (0, max(0, entries - nu.shape[0])), constant_values=1.0)[:entries]
    return np.broadcast_to(nu, (stride, entries))


def footprint_retrieval(
    pooling_weights, stride: int, chunks, carry, gain, decoy_gain=0.0, read_quality=1.0
):
    """M(phi): the read mass on the fact's value (docs/theory.md §9.4, module docstring).

    pooling_weights (s,), carry (W,) c_r, gain beta, decoy_gain beta_D, chunks N (entries in
    all; N > n_e + 1); read_quality nu_i: a scalar, (n,) by entry (entry 0 first; missing
    entries read 1) or (s, n). Returns (s,).
    """
    m, dec = entry_logits(pooling_weights, stride, carry, gain, decoy_gain)
    nu = _read_quality(read_quality, stride, m.shape[1])
    counts = np.isfinite(m).sum(axis=1)
    if np.any(chunks < counts + 2):
        raise ValueError(f"chunks must exceed the entries holding the fact + 1, got {chunks}")
    top = np.max(m, axis=1, keepdims=True)
    e = np.exp(m - top)
    rest = chunks - counts + np.where(np.isfinite(dec), np.exp(dec) - 1.0, 0.0)
    return (nu * e).sum(axis=1) / (e.sum(axis=1) + rest * np.exp(-top[:, 0]))


def footprint_loss(pooling_logits, stride: int, chunks, carry, gain, decoy_gain=0.0, read_quality=1.0):
    """L = N/(N-1) mean_phi (1 - M(phi))^2 as a jax function of the pooling logits (docs/theory.md §9.4).

    pooling_logits: (s,) a with alpha = softmax(a) (jax, differentiable); the rest as
    footprint_retrieval (concrete). Computed in the dtype of pooling_logits. Returns a scalar.
    """
    shares, key, holds = entry_operators(stride, carry)
    dtype = jnp.asarray(pooling_logits).dtype
    nu = jnp.asarray(_read_quality(read_quality, stride, holds.shape[1]), dtype)
    alpha = jax.nn.softmax(pooling_logits)
    m = gain * jnp.asarray(shares, dtype) @ alpha + decoy_gain * jnp.asarray(key, dtype) @ alpha
    m = jnp.where(jnp.asarray(holds), m, -jnp.inf)
    counts = jnp.asarray(holds.sum(axis=1), dtype)
    dec = jnp.zeros(stride, dtype).at[0].set(jnp.exp(decoy_gain * alpha[stride - 1]) - 1.0)
    top = jnp.max(m, axis=1, keepdims=True)
    e = jnp.exp(m - top)
    rest = chunks - counts + dec
    big_m = (nu * e).sum(axis=1) / (e.sum(axis=1) + rest * jnp.exp(-top[:, 0]))
    return chunks / (chunks - 1.0) * jnp.mean((1.0 - big_m) ** 2)


def allocation_ratio(pooling_weights, stride: int, carry, gain, decoy_gain=0.0):
    """log(pi_own / pi_next) = m_0 - m_1 by phase: the read share on the fact's own entry against
    the next one (docs/theory.md §9.4). nan where the fact holds one entry only. Returns (s,)."""
    m, _ = entry_logits(pooling_weights, stride, carry, gain, decoy_gain)
    if m.shape[1] < 2:
        return np.full(stride, np.nan)
    out = m[:, 0] - m[:, 1]
    return np.where(np.isfinite(out), out, np.nan)


# Flat carry c_r = c (r < W) and mean pooling: closed forms in g = beta c / s, g_D = beta_D / s.


def flat_token_counts(stride: int, window: int) -> np.ndarray:
    """n_i(phi): carried tokens in entry i under flat carry (docs/theory.md §9.4.1).

    n_0 = min(s - phi, W); n_i = clip(W - (s - phi) - (i - 1) s, 0, s) for i >= 1.
    Returns (s, n) int.
    """
    s, w = int(stride), int(window)
    n = int(entry_count(s, w).max())
    phi = np.arange(s)[:, None]
    i = np.arange(n)[None, :]
    later = np.clip(w - (s - phi) - (i - 1) * s, 0, s)
    return np.where(i == 0, np.minimum(s - phi, w), later)


def flat_phase_logit(stride: int, window: int, carry_gain, decoy_gain=0.0) -> np.ndarray:
    """m_eff(phi) under flat carry and mean pooling (docs/theory.md §9.4.1).

    With W = q s + rho and R = W - (s - phi) = (q - 1) s + rho + phi:
    m_eff = log(e^(g (s - phi) + g_D [phi >= 1]) + floor(R/s) e^(g s) + [R mod s > 0] e^(g (R mod s)))
    when R >= 0, and g W + g_D [phi >= 1] when the carry ends inside entry 0 (R < 0).
    carry_gain g = beta c / s, decoy_gain g_D = beta_D / s. Returns (s,).
    """
    s, w = int(stride), int(window)
    phi = np.arange(s)
    key = decoy_gain * (phi >= 1)
    rest = w - (s - phi)
    full, last = np.divmod(np.maximum(rest, 0), s)
    inside = carry_gain * np.minimum(w, s - phi) + key
    with np.errstate(divide="ignore"):
        spread = np.logaddexp(
            inside,
            np.logaddexp(np.log(full) + carry_gain * s, np.where(last > 0, carry_gain * last, -np.inf)),
        )
    return np.where(rest < 0, inside, spread)


def flat_retrieval(stride: int, window: int, chunks, carry_gain, decoy_gain=0.0) -> np.ndarray:
    """M(phi) under flat carry, mean pooling, nu = 1 (docs/theory.md §9.4.1).

    M = e^(m_eff) / (e^(m_eff) + [phi = 0](e^(g_D) - 1) + N - n_e). Returns (s,).
    """
    s = int(stride)
    m_eff = flat_phase_logit(s, window, carry_gain, decoy_gain)
    rest = chunks - entry_count(s, window) + np.where(np.arange(s) == 0, np.expm1(decoy_gain), 0.0)
    return expit(m_eff - np.log(rest))


def flat_retrieval_logit(stride: int, window: int, chunks, carry_gain, decoy_gain=0.0, hidden=()):
    """logit M(phi) under flat carry, mean pooling, nu = 1, with entries hidden (docs/theory.md §9.4.5).

    hidden: any of "direct" (the fact's own entry 0 and, at phi = 0, the key's entry, the
    decoy) and "next1" (entry 1), removed from the softmax as `sims.decoder.carry`'s
    `hide_direct` / `hide_next1` remove them from a decoder's: logit M = log sum over the
    kept entries holding the fact of e^(m_i) - log(N - n_e + [phi = 0] (e^(g_D) - 1), or
    - 1 with the decoy hidden; - 1 more where a hidden next entry holds no carry, a
    distractor gone). -inf where no kept entry holds the fact. Returns (s,).
    """
    unknown = set(hidden) - {"direct", "next1"}
    if unknown:
        raise ValueError(f"hidden entries are 'direct' and 'next1', got {sorted(unknown)}")
    s = int(stride)
    counts = flat_token_counts(s, window)
    phi = np.arange(s)
    m = carry_gain * counts + np.where(np.arange(counts.shape[1]) == 0, decoy_gain, 0.0) * (phi >= 1)[:, None]
    holding = entry_count(s, window)
    kept = np.arange(counts.shape[1])[None, :] < holding[:, None]
    if "direct" in hidden:
        kept[:, 0] = False
    if "next1" in hidden and counts.shape[1] > 1:
        kept[:, 1] = False
    decoy = -1.0 if "direct" in hidden else np.expm1(decoy_gain)
    # a hidden next entry that does not hold the fact is a distractor gone
    empty_next = ("next1" in hidden) & (holding < 2)
    rest = chunks - holding + np.where(phi == 0, decoy, 0.0) - empty_next
    with np.errstate(divide="ignore"):
        return logsumexp(np.where(kept, m, -np.inf), axis=1) - np.log(rest)


def allocation_law(stride: int, carry_gain, decoy_gain=0.0) -> np.ndarray:
    """log(pi_own / pi_next) = g_D [phi >= 1] - g phi (docs/theory.md §9.4.1).

    Holds under flat carry and mean pooling wherever entry 1 is fully carried,
    W >= 2 s - phi. At phi = 0 the key is the decoy, not in entry 0: the ratio is 0 there,
    not g_D. Returns (s,).
    """
    phi = np.arange(int(stride))
    return decoy_gain * (phi >= 1) - carry_gain * phi


def weakest_phase_flat(stride: int, window: int, carry_gain, decoy_gain=0.0) -> float:
    """phi* = (s - rho)/2 + g_D/(2 g), W = q s + rho: the continuous minimiser of m_eff (docs/theory.md §9.4.1).

    For phases 1 <= phi <= s - rho with q >= 1, m_eff = log((q-1) e^(gs) + e^(g(s-phi) + g_D)
    + e^(g(rho + phi))), whose phi-dependent part is a cosh centred on phi*; the integer
    weakest phase among those is the one nearest phi*. It need not be the weakest phase
    overall: phase 0 and the wrapped phases (weakest_phase_wrapped) compete. Returns a float.
    """
    rho = int(window) % int(stride)
    return (int(stride) - rho) / 2.0 + decoy_gain / (2.0 * carry_gain)


def weakest_phase_wrapped(stride: int, window: int, carry_gain, decoy_gain=0.0) -> float:
    """The second well of m_eff under flat carry, phases s - rho < phi < s (docs/theory.md §9.4.1).

    There the carry spills into a (q+1)-th entry with rho + phi - s tokens:
    m_eff = log(q e^(gs) + e^(g(s - phi) + g_D) + e^(g(rho + phi - s))), a cosh centred on
    s - rho/2 + g_D/(2 g). The weakest phase overall is the lowest of this well's, the first
    well's (weakest_phase_flat) and phase 0. nan when rho = 0 (no such phases). Returns a float.
    """
    rho = int(window) % int(stride)
    if rho == 0:
        return math.nan
    return int(stride) - rho / 2.0 + decoy_gain / (2.0 * carry_gain)


def gap_bound(multiple: int, key_logit=0.0) -> float:
    """Upper bound on max_phi m_eff - min_phi m_eff for flat carry over W = q s (docs/theory.md §9.4.2).

    Any pooling alpha: fully carried entries have logit beta c whatever alpha is, so
    Delta m_eff <= log((q - 1 + e^D)/(q - 1)) with D = beta_D max_j alpha_j the key's largest
    logit; log(q/(q-1)) at beta_D = 0. multiple q >= 2. Returns a float.
    """
    q = int(multiple)
    if q < 2:
        return math.inf
    return math.log((q - 1 + math.exp(key_logit)) / (q - 1))


def uncovered_phases(stride: int, window: int, support) -> np.ndarray:
    """Phases none of whose carried tokens lands on a pooled phase (docs/theory.md §9.4.2).

    support: (s,) bool, the phases with pooling weight (a collapsed alpha). A phase phi is
    uncovered when {(phi + r) mod s : r < W} misses the support: all its entry logits are 0
    but for the key's, as in the toy's dropped phases. Returns (s,) bool.
    """
    s, w = int(stride), int(window)
    support = np.asarray(support, dtype=bool)
    reach = (np.arange(s)[:, None] + np.arange(min(w, s))[None, :]) % s
    return ~support[reach].any(axis=1)


def _entry_derivatives(alpha, stride, chunks, carry, gain, decoy_gain, read_quality):
    """Per phase: the maps A (s, e, s) from alpha to the logits of the alpha-dependent slots
    (fact entries, then the decoy), their probabilities p (s, e), the read qualities v (s, e)
    and M (s,)."""
    shares, key, holds = entry_operators(stride, carry)
    n = holds.shape[1]
    lin = gain * shares + decoy_gain * key
    dec = np.zeros((stride, 1, stride))
    dec[0, 0, stride - 1] = decoy_gain
    maps = np.concatenate([lin, dec], axis=1)
    m = maps @ alpha
    live = np.concatenate([holds, (np.arange(stride) == 0)[:, None]], axis=1)
    nu = np.concatenate([_read_quality(read_quality, stride, n), np.zeros((stride, 1))], axis=1)
    free = chunks - holds.sum(axis=1) - 1.0 * (np.arange(stride) == 0)
    e = np.where(live, np.exp(m), 0.0)
    z = e.sum(axis=1) + free
    p = e / z[:, None]
    big_m = (nu * p).sum(axis=1)
    return maps, p, nu, big_m


def footprint_gradient(pooling_weights, stride, chunks, carry, gain, decoy_gain=0.0, read_quality=1.0):
    """G = dL/dalpha at alpha (docs/theory.md §9.4.3): nonzero spread across j means uniform
    pooling is no fixed point. Returns (s,)."""
    alpha = np.asarray(pooling_weights, dtype=float)
    maps, p, nu, big_m = _entry_derivatives(alpha, stride, chunks, carry, gain, decoy_gain, read_quality)
    dm = p * (nu - big_m[:, None])
    grad_m = np.einsum("pe,pej->pj", dm, maps)
    return (chunks / (chunks - 1.0)) / stride * np.sum(-2.0 * (1.0 - big_m)[:, None] * grad_m, axis=0)


def footprint_hessian(
    stride, chunks, carry, gain, decoy_gain=0.0, read_quality=1.0, pooling_weights=None
):
    """The Hessian of L in the pooling logits u at alpha = softmax(u) (docs/theory.md §9.4.3).

    At uniform pooling (the default) H_u = (1/s^2) P H_alpha P + (1/s) P diag(G - mean G) P,
    H_alpha = (c/s) sum_phi 2 [grad M grad M^T - (1 - M) hess M] with grad M = A^T (p (nu - M))
    and hess M = A^T [diag(p v) - p (p v)^T - (p v) p^T] A, v = nu - M (A: the entry maps).
    Elsewhere the general softmax chain rule. Returns (s, s).
    """
    s = int(stride)
    alpha = np.full(s, 1.0 / s) if pooling_weights is None else np.asarray(pooling_weights, float)
    maps, p, nu, big_m = _entry_derivatives(alpha, s, chunks, carry, gain, decoy_gain, read_quality)
    scale = (chunks / (chunks - 1.0)) / s
    pv = p * (nu - big_m[:, None])
    grad_m = np.einsum("pe,pej->pj", pv, maps)
    inner = (
        np.einsum("pe,ef->pef", pv, np.eye(p.shape[1]))
        - pv[:, :, None] * p[:, None, :]
        - p[:, :, None] * pv[:, None, :]
    )
    hess_m = np.einsum("pei,pef,pfj->pij", maps, inner, maps)
    h_alpha = scale * np.sum(
        2.0 * (grad_m[:, :, None] * grad_m[:, None, :] - (1.0 - big_m)[:, None, None] * hess_m), axis=0
    )
    g = scale * np.sum(-2.0 * (1.0 - big_m)[:, None] * grad_m, axis=0)
    jac = np.diag(alpha) - np.outer(alpha, alpha)
    mean_g = alpha @ g
    second = (
        np.diag(alpha * g - mean_g * alpha)
        - np.outer(alpha * g, alpha)
        - np.outer(alpha, alpha * g)
        + 2.0 * mean_g * np.outer(alpha, alpha)
    )
    return jac @ h_alpha @ jac + second


def footprint_growth_rate(stride, chunks, carry, gain, decoy_gain=0.0, read_quality=1.0):
    """The largest growth rate of zero-sum perturbations of uniform pooling under the §9.4 flow
    (docs/theory.md §9.4.3): minus the smallest eigenvalue of P H_u P on the zero-sum subspace.

    Reduces to theory.growth_rate (§6.2) for c_r = [r = 0], beta_D = 0, nu = 1. With carry,
    uniform pooling is no longer a fixed point (footprint_gradient): the rate is the local
    linear rate about it. Returns a float (positive: unstable).
    """
    s = int(stride)
    h = footprint_hessian(s, chunks, carry, gain, decoy_gain, read_quality)
    basis = np.linalg.qr(np.eye(s) - 1.0 / s)[0][:, : s - 1]
    return float(-np.linalg.eigvalsh(basis.T @ h @ basis).min())


def max_growth_rate(stride, chunks, carry, decoy_gain=0.0, read_quality=1.0, gains=None):
    """max over gains beta of footprint_growth_rate, and the maximising gain (docs/theory.md §9.4.3).

    gains: the grid scanned (default 0.5 to 120 in steps of 0.5), refined by a bounded
    scalar search around the grid's best. Returns (rate, gain).
    """
    grid = np.arange(0.5, 120.0, 0.5) if gains is None else np.asarray(gains, float)

    def rate(b):
        return footprint_growth_rate(stride, chunks, carry, b, decoy_gain, read_quality)

    rates = np.array([rate(b) for b in grid])
    k = int(np.argmax(rates))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    from scipy.optimize import minimize_scalar  # here: importing theory stays 0.3 s lighter

    best = minimize_scalar(lambda b: -rate(b), bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
    if -best.fun >= rates[k]:
        return float(-best.fun), float(best.x)
    return float(rates[k]), float(grid[k])


def retrieval_vs_length(stride, window, lengths, carry_gain, decoy_gain=0.0):
    """M(phi) against context length T at d = inf (docs/theory.md §9.4.4): N = T / s entries.

    The other facts' entries are distractors at logit 0, so fact density does not enter; only
    N - n_e does: logit M = m_eff - log(N - n_e) shifts every phase alike with log N.
    lengths: (L,) token counts (multiples of s). Returns (L, s).
    """
    return np.stack([flat_retrieval(stride, window, t // stride, carry_gain, decoy_gain) for t in lengths])


def logistic_gap_ceiling(logit_gap) -> float:
    """The largest gap in sigma(x) between two logits Delta apart, tanh(Delta/4) (at x = -Delta/2).

    Used by the 40-point-gap requirement (docs/theory.md §9.6). Returns a float.
    """
    return math.tanh(float(logit_gap) / 4.0)


def footprint_gap_requirement(gap=0.4, multiple=None, read_spread=0.0):
    """What a per-phase retrieval gap needs in the footprint model (docs/theory.md §9.6).

    With nu = 1, Delta M >= gap needs Delta m_eff >= 4 artanh(gap) (logistic_gap_ceiling); with
    read qualities spread by read_spread (max nu - min nu), only gap - read_spread is left to
    the logits. For W = q s (multiple q >= 2) that needs the key logit
    D = beta_D max alpha >= log((q - 1)(e^(Delta m) - 1)) (gap_bound). Returns a dict.
    """
    rest = max(float(gap) - float(read_spread), 0.0)
    need = 4.0 * math.atanh(rest) if rest > 0 else 0.0
    out = {"gap": float(gap), "logit_gap_needed": need}
    if multiple is not None:
        q = int(multiple)
        out["carry_only_ceiling"] = logistic_gap_ceiling(gap_bound(q)) + float(read_spread)
        out["key_logit_needed"] = math.log((q - 1) * math.expm1(need)) if need > 0 else -math.inf
    return out

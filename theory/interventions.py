"""Predictions for interventions, RoPE anchoring and mitigations, from the pooling weights.

Finite-d accuracy of the head-averaged readout (derivation; THEORY 3, 6.12, 7). Condition on
rho = sqrt(d) |q| ~ chi_d. Given q, every key other than the needle is an independent
N(0, I/d) vector, so its product with q is rho/d times a standard normal u_t; the needle
token's own product is rho^2/d. Head h's logit of an entry is b_h w_h . u with
b_h = beta_h rho / d, w_h its pooling weights over the entry's tokens and u_needle = rho
(times kappa, the RoPE-anchoring attenuation, theory.rope.rope_attenuation_at). So, given
rho, the needle class's logits (one entry per head, two with overlapping windows) are
Gaussian in the s - 1 other tokens of its chunk (shared by all heads: the heads' noises are
correlated through alpha_h . alpha_h'), and each distractor class's logit vector
y = (b_h w_h . u)_h is an independent draw of an H-dim Gaussian with covariance
b_h b_h' alpha_h . alpha_h'. The readout is

    Pbar[c] = (1/H) sum_h e^{z_h[c]} / Z_h,   Z_h = needle mass + sum_{distractors} e^{y_h}.

Approximation (the only one): in Z_h, the needle's own term and the competing distractor's
own term are kept exactly, and the other distractors' part is replaced by its mean
R_h = (n - 1) e^{b_h^2 |alpha_h|^2 / 2} (n = N - 1 distractors; N - 2 with overlap, the alias
entry being merged into the needle). Keeping the competitor's own term bounds its mass in
every head by 1: with the mean alone, a sharp head (b |alpha| >~ 1.7, where e^y is heavy
tailed) gave rare distractors masses above 1 (an offset ensemble of a 0.93-weight head:
0.72 against a measured 0.98; with the own term 0.99). For one head the formula is exact
(the argmax does not see Z). With R_h fixed the distractors are i.i.d. given the needle:
distractor c loses iff

    sum_h (A_h - B_h) / (A_h + B_h + R_h) > 0,   A_h = needle mass, B_h = e^{y_h[c]},

i.e. sum_h (1 + p_h) sigmoid(y_h - log(A_h + R_h)) < sum_h p_h with p_h = A_h / (A_h + R_h),
and acc[phi] = E_{rho, needle noise} [ G^n ] with G = P(c loses).

G is computed by conditioning on the distractor's component x along the all-ones token
direction v: y_h = b_h w_h . u_perp + k_h x with k_h = b_h sum(w_h)/sqrt(T) > 0, so the left
side is increasing in x and G = E_{u_perp} Phi(x*) (one root per needle and distractor
draw: bracketed Newton). The remaining expectations (rho at the Gauss nodes of chi_d, the
needle noise and u_perp by scrambled Sobol points with fixed seeds, so the prediction is
deterministic) carry a quadrature error of about 0.005 (checked against the exact
single-head quadrature, theory.accuracy.needle_accuracy).

Chunking variants enter through the entry layout: with boundaries shifted by o_h tokens a
needle at phase phi sits at head phase (phi - o_h) mod s (staggered heads; an offset
ensemble of K chunkings is K H virtual heads); overlapping windows hold it in two entries
(own-chunk slot s + hp, and previous-chunk slot hp of the next entry), whose logits the
readout merges (logaddexp). Distractor classes are treated as independent of each other
(with overlap or staggering neighbouring entries share tokens; that correlation is ignored),
and RoPE rotations are taken not to change the distractors' joint law.

Interventions: ablating head h drops it from the average (the readout over the other
heads; chance 1/N when none is left); pooling patches change alpha_h[slot] (no
renormalising); activation patching restores head h's clean needle logit into a context
whose needle token was replaced by a fresh key (the other heads see that key instead).

The best-head rule (best_head_accuracy: acc ~ max_h acc_h) is kept as the comparison it
was: it ignores that the average divides a covering head's mass by H while every head adds
distractor noise, and that several weak heads (or two aliased entries) add their votes.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp, ndtr
from scipy.special import ndtri, roots_genlaguerre
from scipy.stats import qmc

from weakspots.idealized.xla import jit

from .accuracy import needle_accuracy
from .reduced import retrieval_probability
from .rope import rope_attenuation_at

DRAWS = (64, 1024, 4)  # needle-noise points, distractor points, rho nodes (error ~0.005)
BRACKET = 8.5  # |x*| beyond which Phi(x*) is 0 or 1 in float64
# Newton stops when no Phi(root) moved by more than this: G is a mean of Phi(x*), so this
# bounds G's error (G^n's by n times it) without chasing roots deep in Phi's flat tails
# (a root just inside +-BRACKET, where Phi is 0 or 1 to 1e-17, was bisected to 1e-9 in x:
# ~30 iterations of the whole (K, M, H) array where 5-7 converge everything else).
PHI_TOL = 1e-12


@functools.lru_cache(maxsize=64)
def _normal_points(count, dims, seed):
    points = qmc.Sobol(dims, scramble=True, seed=seed).random(count)
    z = ndtri(np.clip(points, 1e-12, 1.0 - 1e-12))
    z.flags.writeable = False
    return z


@functools.lru_cache(maxsize=16)
def _rho_nodes(dim, nodes):
    # Gauss nodes of rho = sqrt(2 t), t ~ Gamma(d/2) (generalised Laguerre, exact for
    # polynomials of degree 2 nodes - 1 in rho^2).
    t, weights = roots_genlaguerre(nodes, dim / 2 - 1)
    rho, weights = np.sqrt(2 * t), weights / weights.sum()
    rho.flags.writeable = weights.flags.writeable = False
    return rho, weights


@functools.partial(jit, static_argnames=("distractors",))
def _needle_wins(log_needle, log_rest, log_distractor, slope, node_weight, distractors):
    # E_rho E_needle [G^n] (module docstring). Per rho node: log_needle (K, H) = log A_h,
    # log_rest (H,) = log R_h, log_distractor (M, H) = b_h w_h . u_perp, slope (H,) = k_h.
    def per_node(args):
        log_a, log_r, log_c, k = args
        log_r = log_r[None]
        p = jax.nn.sigmoid(log_a - log_r)  # (K, H)
        vote = (1.0 + p)[:, None, :]
        total = jnp.sum(p, axis=-1)[:, None]
        shift = log_c[None] - jnp.logaddexp(log_a, log_r)[:, None]  # (K, M, H)
        k = k[None, None]

        def excess(x):  # minus the vote margin: increasing in x
            s = jax.nn.sigmoid(k * x[..., None] + shift)
            return jnp.sum(vote * s, -1) - total, jnp.sum(vote * k * s * (1 - s), -1)

        lo = jnp.full(shift.shape[:2], -BRACKET)
        hi = jnp.full(shift.shape[:2], BRACKET)
        below, above = excess(lo)[0] >= 0, excess(hi)[0] <= 0

        def newton(state):
            i, x, lo, hi, _ = state
            f, df = excess(x)
            lo, hi = jnp.where(f < 0, x, lo), jnp.where(f < 0, hi, x)
            step = x - f / jnp.maximum(df, 1e-300)
            new = jnp.where((step >= lo) & (step <= hi), step, 0.5 * (lo + hi))
            return i + 1, new, lo, hi, jnp.max(jnp.abs(ndtr(new) - ndtr(x)))

        # Start where the vote margin would vanish if every sigmoid were in its exponential
        # tail with the mean slope: exact for one head far from saturation.
        slope = jnp.mean(k)
        level = jnp.log(total / (jnp.sum(vote, -1) - total))
        start = (
            level - logsumexp(shift + jnp.log(vote / jnp.sum(vote, -1, keepdims=True)), -1)
        ) / slope
        state = (0, jnp.clip(start, lo, hi), lo, hi, jnp.inf)
        x = jax.lax.while_loop(lambda st: (st[0] < 100) & (st[4] > PHI_TOL), newton, state)[1]
        x = jnp.where(below, -jnp.inf, jnp.where(above, jnp.inf, x))
        g = jnp.mean(ndtr(x), axis=1)  # (K,)
        return jnp.mean(jnp.exp(distractors * jnp.log(jnp.maximum(g, 1e-300))))

    return jnp.sum(
        node_weight * jax.lax.map(per_node, (log_needle, log_rest, log_distractor, slope))
    )


def _entry_starts(phase, stride, offsets, overlap):
    # First token of each head's entry holding the needle, relative to the needle's chunk:
    # a chunking shifted by o starts its entries at c s + o, and the needle at phase < o
    # belongs to the entry that started one chunk earlier (idealized.model.align_to_needle).
    offsets = np.asarray(offsets, int)
    own = offsets - np.where(phase < offsets, stride, 0)
    return own - stride if overlap else own


def _readout_accuracy_at(
    phase, weights, gains, chunks, dim, offsets, overlap, rope_dim, sees, draws
):
    heads, slots = weights.shape
    if heads == 0:
        return 1.0 / chunks
    stride = slots // 2 if overlap else slots
    if heads == 1 and not overlap and sees[0]:  # one head: Z drops out, the exact quadrature
        kappa = (
            rope_attenuation_at((phase - offsets[0]) % stride, rope_dim, dim) if rope_dim else 1.0
        )
        slot = (phase - offsets[0]) % stride
        return float(needle_accuracy(weights[0, slot], np.sum(weights[0] ** 2), chunks, dim, kappa))
    starts = _entry_starts(phase, stride, offsets, overlap)
    distractors = chunks - 2 if overlap else chunks - 1
    # Needle entries: each head's own entry, and with overlap the next (alias) entry.
    entry_start = np.concatenate([starts, starts + stride]) if overlap else starts
    entry_head = np.tile(np.arange(heads), 2 if overlap else 1)
    lo = entry_start.min()
    needle_rows = np.zeros((entry_start.size, entry_start.max() + slots - lo))
    for e, (first, h) in enumerate(zip(entry_start, entry_head, strict=True)):
        needle_rows[e, first - lo : first - lo + slots] = weights[h]
    column = phase - lo
    needle_weight = needle_rows[:, column].copy()
    needle_rows[:, column] = 0.0
    kappa = np.ones(entry_start.size)
    if rope_dim:
        head_phase = (phase - np.asarray(offsets, int)[entry_head]) % stride
        own = phase - entry_start >= stride if overlap else np.ones(entry_start.size, bool)
        kappa = rope_attenuation_at(np.where(own, head_phase, head_phase - stride), rope_dim, dim)
    first = starts.min()
    distractor_rows = np.zeros((heads, starts.max() + slots - first))
    for h in range(heads):
        distractor_rows[h, starts[h] - first : starts[h] - first + slots] = weights[h]

    n_needle, n_distractor, n_rho = draws
    u_needle = _normal_points(n_needle, needle_rows.shape[1], 1)  # needle column: a fresh key
    u_distractor = _normal_points(n_distractor, distractor_rows.shape[1], 2)
    direction = np.full(distractor_rows.shape[1], 1.0 / math.sqrt(distractor_rows.shape[1]))
    u_perp = u_distractor - np.outer(u_distractor @ direction, direction)
    noise_needle = u_needle @ needle_rows.T  # (K, E)
    noise_distractor = u_perp @ distractor_rows.T  # (M, H)
    norm2 = np.sum(weights**2, axis=1)
    slope_per_b = distractor_rows @ direction
    rhos, node_weight = _rho_nodes(float(dim), n_rho)
    b = gains[None] * rhos[:, None] / dim  # (R, H)
    # The needle token's product: rho kappa where the head sees it, else a fresh key's.
    value = np.where(sees[entry_head], rhos[:, None, None] * kappa, u_needle[None, :, column, None])
    z = b[:, None, entry_head] * (noise_needle[None] + needle_weight * value)  # (R, K, E)
    log_needle = np.logaddexp(z[..., :heads], z[..., heads:]) if overlap else z
    with np.errstate(divide="ignore"):  # a single distractor (N = 3 with overlap): no rest
        log_rest = np.log(distractors - 1.0) + 0.5 * b**2 * norm2
    return float(
        _needle_wins(
            log_needle,
            log_rest,
            b[:, None, :] * noise_distractor[None],
            b * slope_per_b,
            node_weight,
            float(distractors),
        )
    )


def readout_accuracy(
    pooling_weights,
    gain,
    chunks,
    dim,
    offsets=None,
    overlap=False,
    rope_dim=0,
    ensemble=1,
    keep=None,
    sees_needle=None,
    phases=None,
    draws=DRAWS,
):
    """Per-phase accuracy `(s,)` of the head-averaged readout argmax_c mean_h P_h[c].

    pooling_weights (H, S) with S = s, or 2s with `overlap` ([previous | own] slots); gain
    scalar or (H,); chunks N; dim d; offsets (H,) per-head chunk shifts in tokens; rope_dim
    RoPE-anchored channels (0: none); ensemble K: the readout averages K chunkings shifted
    by k s // K (K H virtual heads); keep (H,) bool: the heads left in the average (default
    all: ablation drops some); sees_needle (H,) bool: heads whose needle token is intact
    (the others see a fresh key: activation patching); phases: which phases to compute
    (default all; the others are nan). Semi-analytic (module docstring): exact but for the
    mean partition function, quadrature error about 0.005.
    """
    w = np.asarray(pooling_weights, float)
    heads, slots = w.shape
    stride = slots // 2 if overlap else slots
    gains = np.broadcast_to(np.asarray(gain, float), (heads,))
    base = np.zeros(heads, int) if offsets is None else np.asarray(offsets, int)
    keep = np.ones(heads, bool) if keep is None else np.asarray(keep, bool)
    sees = np.ones(heads, bool) if sees_needle is None else np.asarray(sees_needle, bool)
    shifts = np.arange(ensemble) * stride // ensemble
    virtual_offsets = ((base[None] + shifts[:, None]) % stride)[:, keep].ravel()
    virtual = np.tile(w[keep], (ensemble, 1))
    virtual_gains = np.tile(gains[keep], ensemble)
    virtual_sees = np.tile(sees[keep], ensemble)
    out = np.full(stride, np.nan)
    for phi in range(stride) if phases is None else phases:
        out[phi] = _readout_accuracy_at(
            phi,
            virtual,
            virtual_gains,
            chunks,
            dim,
            virtual_offsets,
            overlap,
            rope_dim,
            virtual_sees,
            draws,
        )
    return out


def slot_accuracy(needle_weight, weight_norm2, chunks, dim, kappa=1.0):
    """acc of one head alone for a needle in a slot of weight `needle_weight` (THEORY 6.12).

    needle_weight alpha[phi], weight_norm2 |alpha|^2 (same shape), chunks N, dim d, kappa
    the needle-product attenuation: theory.accuracy.needle_accuracy (exact 2-D quadrature).
    """
    return needle_accuracy(needle_weight, weight_norm2, chunks, dim, kappa)


def head_phase_accuracy(
    pooling_weights, gain, chunks, dim, offsets=None, overlap=False, rope_dim=0
):
    """acc_h[phi]: each head's own accuracy at every phase, `(H, s)` (as if it read out alone).

    pooling_weights: (H, S) with S = s, or 2s with `overlap` ([previous | own] slots);
    gain: unused (one head's argmax does not see it); offsets: per-head chunk shift in
    tokens (default 0); rope_dim: RoPE-anchored rotary channels (0: none). A needle at phase
    phi sits at head phase hp = (phi - o_h) mod s; with overlap the better of its two slots.
    """
    del gain
    w = np.asarray(pooling_weights, float)
    heads, slots = w.shape
    stride = slots // 2 if overlap else slots
    offsets = np.zeros(heads, int) if offsets is None else np.asarray(offsets, int)
    phases = np.arange(stride)
    out = np.zeros((heads, stride))
    for h in range(heads):
        hp = (phases - offsets[h]) % stride
        norm2 = np.sum(w[h] ** 2)
        own = stride + hp if overlap else hp
        kappa = rope_attenuation_at(hp, rope_dim, dim) if rope_dim else 1.0
        competitors = chunks - 1 if overlap else chunks  # the alias entry is merged out
        acc = slot_accuracy(w[h, own], norm2, competitors, dim, kappa)
        if overlap:
            kappa_prev = rope_attenuation_at(hp - stride, rope_dim, dim) if rope_dim else 1.0
            prev = slot_accuracy(w[h, hp], norm2, competitors, dim, kappa_prev)
            acc = np.maximum(acc, prev)
        out[h] = acc
    return out


def best_head_accuracy(pooling_weights, gain, chunks, dim, **variant):
    """The best-head rule max_h acc_h[phi], `(s,)`: an approximation kept for comparison.

    Same arguments as head_phase_accuracy, plus `ensemble=K` (the best member of heads x
    chunkings). It overestimates a covering head diluted by the average and underestimates
    phases held weakly by several heads (module docstring); readout_accuracy replaces it.
    """
    ensemble = variant.pop("ensemble", 1)
    w = np.asarray(pooling_weights, float)
    stride = w.shape[1] // 2 if variant.get("overlap") else w.shape[1]
    base = np.zeros(w.shape[0], int) if variant.get("offsets") is None else variant.pop("offsets")
    rows = [
        head_phase_accuracy(
            w, gain, chunks, dim, offsets=np.asarray(base) + k * stride // ensemble, **variant
        )
        for k in range(ensemble)
    ]
    return np.max(np.concatenate(rows, axis=0), axis=0)


def ablation_effect(pooling_weights, gain, chunks, dim, **variant):
    """Predicted accuracy drop `(H, s)` from dropping head h from the head average.

    readout_accuracy with all heads minus readout_accuracy without head h (chance 1/N when
    no head is left). `variant`: offsets, overlap, rope_dim, ensemble, draws.
    """
    w = np.asarray(pooling_weights, float)
    heads = w.shape[0]
    full = readout_accuracy(w, gain, chunks, dim, **variant)
    out = np.zeros((heads, full.shape[0]))
    for h in range(heads):
        keep = np.arange(heads) != h
        out[h] = full - readout_accuracy(w, gain, chunks, dim, keep=keep, **variant)
    return out


def pooling_patch_effect(pooling_weights, gain, chunks, dim, value, draws=DRAWS):
    """Predicted drop `(H, s)` at phase phi from setting alpha_h[phi] to `value` (no renormalising).

    readout_accuracy of the intact weights minus that of the patched ones, at phase phi.
    """
    w = np.asarray(pooling_weights, float)
    heads, stride = w.shape
    full = readout_accuracy(w, gain, chunks, dim, draws=draws)
    out = np.zeros((heads, stride))
    for h in range(heads):
        for phi in range(stride):
            patched = w.copy()
            patched[h, phi] = value
            acc = readout_accuracy(patched, gain, chunks, dim, phases=[phi], draws=draws)
            out[h, phi] = full[phi] - acc[phi]
    return out


def activation_patch_effect(pooling_weights, gain, chunks, dim, **variant):
    """Predicted accuracy gained `(H, s)` by restoring head h's clean needle logit into a
    context whose needle token was replaced by a fresh key (the other heads see that key).

    readout_accuracy with only head h seeing the needle, minus readout_accuracy with none.
    """
    w = np.asarray(pooling_weights, float)
    heads = w.shape[0]
    corrupted = readout_accuracy(w, gain, chunks, dim, sees_needle=np.zeros(heads, bool), **variant)
    return np.stack(
        [
            readout_accuracy(w, gain, chunks, dim, sees_needle=np.arange(heads) == h, **variant)
            - corrupted
            for h in range(heads)
        ]
    )


def reduced_needle_mass(pooling_logits, gain, chunks, offsets=None, overlap=False, kappa=None):
    """Pbar[phi] at d = inf for the chunking variants (THEORY 5 with shifted/overlapping chunks).

    pooling_logits (H, S); gain (H,); offsets per-head shifts (static ints); kappa: None or
    a function rel -> attenuation (RoPE anchoring). Head h sees the needle at head phase
    hp = (phi - o_h) mod s with logit beta alpha_h[slot] kappa(rel); with overlap both
    slots hold it and the needle class has mass sum e^m / (sum e^m + N - 2).
    Returns (s,).
    """
    alpha = jax.nn.softmax(pooling_logits, axis=-1)
    heads, slots = alpha.shape
    stride = slots // 2 if overlap else slots
    offsets = [0] * heads if offsets is None else [int(o) for o in offsets]
    phases = np.arange(stride)
    masses = []
    for h in range(heads):
        hp = (phases - offsets[h]) % stride
        scale = (lambda rel: 1.0) if kappa is None else kappa
        own = stride + hp if overlap else hp
        m_own = gain[h] * alpha[h, own] * scale(hp)
        if overlap:
            m_prev = gain[h] * alpha[h, hp] * scale(hp - stride)
            top = jnp.exp(m_own) + jnp.exp(m_prev)
            masses.append(top / (top + chunks - 2.0))
        else:
            masses.append(retrieval_probability(m_own, chunks))
    return jnp.mean(jnp.stack(masses), axis=0)


@functools.partial(jit, static_argnames=("loss", "offsets", "overlap", "rope"))
def _flow_weights(a0, gain, chunks, steps, entropy_weight, dt, *, loss, offsets, overlap, rope):
    # One compilation per (heads, slots, loss, offsets, overlap, rope): the start, gain,
    # chunks, time and entropy weight are traced, so seeds and sweeps share it.
    heads = a0.shape[0]
    gains = jnp.full((heads,), gain)
    kappa = None
    if rope is not None:
        dim, rope_dim = rope
        kappa = functools.partial(rope_attenuation_at, rope_dim=rope_dim, dim=dim, xp=jnp)

    scale = (chunks - 1.0) / (chunks - 2.0) if overlap else chunks / (chunks - 1.0)

    def objective(a):
        pbar = reduced_needle_mass(a, gains, chunks, offsets, overlap, kappa)
        data = scale * jnp.mean((1 - pbar) ** 2) if loss == "mse" else -jnp.mean(jnp.log(pbar))
        logw = jax.nn.log_softmax(a, axis=-1)
        entropy = -jnp.sum(jnp.exp(logw) * logw, axis=-1)
        return data - entropy_weight * jnp.mean(entropy)

    grad = jax.grad(objective)
    final = jax.lax.fori_loop(0, steps, lambda _, x: x - dt * grad(x), a0)
    return jax.nn.softmax(final, axis=-1)


def reduced_flow_weights(
    pooling_logits,
    gain,
    chunks,
    time,
    loss="mse",
    offsets=None,
    overlap=False,
    rope=None,
    entropy_weight=0.0,
    dt=0.25,
):
    """Pooling weights after reduced gradient flow to `time` for the chunking variants.

    pooling_logits (H, S) the start (use the simulation's own start to predict its support);
    gain scalar; chunks N; time t = lr * steps; loss mse | ce; offsets, overlap as in
    reduced_needle_mass; rope = (dim, rope_dim) for RoPE anchoring; entropy_weight the
    phase-entropy regulariser. Loss: mse = c mean_phi (1 - Pbar)^2 (c = N/(N-1), or
    (N-1)/(N-2) with overlap: one distractor fewer), ce = -mean_phi log Pbar,
    minus entropy_weight * mean_h H(alpha_h). Explicit Euler with step dt (the flow's
    nonlinear scale is 1/lambda ~ 20, so dt = 0.25 resolves it). Returns (H, S) weights.
    """
    a0 = jnp.asarray(pooling_logits, jnp.float64)
    f64 = functools.partial(jnp.asarray, dtype=jnp.float64)
    weights = _flow_weights(
        a0,
        f64(gain),
        f64(chunks),
        jnp.asarray(int(round(time / dt))),
        f64(entropy_weight),
        f64(dt),
        loss=loss,
        offsets=None if offsets is None else tuple(int(o) for o in offsets),
        overlap=bool(overlap),
        rope=None if rope is None else tuple(rope),
    )
    return np.asarray(weights)


def chunking_cost(stride, heads=1, overlap=False, offset_ensemble=1, stagger=False):
    """Inference cost of a chunking, relative to plain chunks of `stride` tokens.

    cache_entries_per_token: entries each head keeps per token (1/s; K/s for K offset
    chunkings; overlap and stagger keep 1/s). compress_compute: token-pool operations per
    token relative to plain (2 with overlap: every token pooled into two windows; K for K
    chunkings). attention_compute: query-entry products relative to plain (K). Staggering
    costs nothing but a per-head boundary.
    """
    del heads, stagger
    k = offset_ensemble
    return {
        "cache_entries_per_token": k / stride,
        "compress_compute": float(k * (2 if overlap else 1)),
        "attention_compute": float(k),
    }

"""Predictions for interventions, RoPE anchoring and mitigations, from the pooling weights.

Finite-d accuracy of the head-averaged readout (derivation; docs/theory.md §3, §6.12, §7). Condition on
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

For one head the argmax does not see Z: the exact 2-D quadrature (theory.accuracy). For
several heads acc[phi] = E_rho E_{needle noise, distractors} 1[Pbar[needle] > max_c Pbar[c]],
an integral over the Gaussian law above, evaluated by Monte Carlo over it: DRAWS contexts
(rho from chi_d, the needle's chunk and n = N - 1 distractor classes, N - 2 with overlap,
the alias entry merged into the needle; each class's H logits drawn from their H-dim
Gaussian law) from a fixed seed, so the prediction is deterministic
and every call draws alike (common random numbers: ablation effects are differences of
correlated estimates). Its error is the binomial one of the contexts drawn (why not a
mean partition function: docs/theory_derivations.md §4).

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

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module
from weakspots.idealized.stagger import stagger_offsets
from weakspots.idealized.xla import jit

from .accuracy import needle_accuracy
from .reduced import retrieval_probability
from .rope import rope_attenuation_at

DRAWS = 16384  # contexts per phase: binomial error sqrt(acc (1 - acc) / DRAWS) <= 0.004
BLOCK = 2048  # contexts drawn at once
SEED = 20260101  # the contexts' fixed seed


def _entry_starts(phase, stride, offsets, overlap):
    # First token of each head's entry holding the needle, relative to the needle's chunk:
    # a chunking shifted by o starts its entries at c s + o, and the needle at phase < o
    # belongs to the entry that started one chunk earlier (idealized.toy.model.align_to_needle).
    offsets = np.asarray(offsets, int)
    own = offsets - np.where(phase < offsets, stride, 0)
    return own - stride if overlap else own


def _layout(phase, weights, offsets, overlap, rope_dim, dim):
    """Which tokens each needle entry and each distractor entry pools, for one needle phase."""
    heads, slots = weights.shape
    stride = slots // 2 if overlap else slots
    starts = _entry_starts(phase, stride, offsets, overlap)
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
    return needle_rows, column, needle_weight, kappa, entry_head, distractor_rows


def _readout_accuracies(
    phases, weights, gains, chunks, dim, offsets, overlap, rope_dim, sees, draws
):
    """acc at each of `phases` for H >= 1 heads, by Monte Carlo over the exact law (module
    docstring). Every phase, and every call, reads the same draws (common random numbers)."""
    layouts = [_layout(phi, weights, offsets, overlap, rope_dim, dim) for phi in phases]
    width = max(layout[0].shape[1] for layout in layouts)
    rows = np.stack([np.pad(x[0], ((0, 0), (0, width - x[0].shape[1]))) for x in layouts])
    # a distractor class's logits are b * (R u) for its rows R (H, T) and u ~ N(0, I_T):
    # drawn as b * (F w), w ~ N(0, I_H), with F F^T = R R^T (the same law, H normals, not T)
    factors = []
    for layout in layouts:
        eigenvalues, vectors = np.linalg.eigh(layout[5] @ layout[5].T)
        factors.append(vectors * np.sqrt(np.maximum(eigenvalues, 0.0)))
    entry_head = layouts[0][4]
    f32 = functools.partial(jnp.asarray, dtype=jnp.float32)
    wins = _context_wins(
        jax.random.key(SEED),
        f32(rows),
        jnp.asarray([x[1] for x in layouts]),
        f32(np.stack([x[2] for x in layouts])),
        f32(np.stack([x[3] for x in layouts])),
        jnp.asarray(sees[entry_head]),
        f32(np.stack(factors)),
        f32(gains[entry_head]),
        f32(gains),
        dim=int(dim),
        blocks=-(-int(draws) // BLOCK),
        distractors=int(chunks - 2 if overlap else chunks - 1),
        overlap=bool(overlap),
    )
    return np.asarray(wins, float) / (-(-int(draws) // BLOCK) * BLOCK)


@functools.partial(jit, static_argnames=("dim", "blocks", "distractors", "overlap"))
def _context_wins(
    key, rows, columns, needle_weight, kappa, sees, factors, entry_gain, gains, *,
    dim, blocks, distractors, overlap,
):  # fmt: skip
    # wins (P,): contexts (blocks x BLOCK) in which the needle class has the largest Pbar
    heads = gains.shape[0]

    def block(block_key):
        rho_key, u_key, v_key = jax.random.split(block_key, 3)
        # rho = sqrt(d) |q| ~ chi_d: the norm of d standard normals
        rho = jnp.linalg.norm(jax.random.normal(rho_key, (BLOCK, dim), jnp.float32), axis=-1)
        u = jax.random.normal(u_key, (BLOCK, rows.shape[-1]), jnp.float32)
        v = jax.random.normal(v_key, (BLOCK, distractors, heads), jnp.float32)
        scale = (rho / dim)[:, None]  # (K, 1): b = gain rho / d

        def at_phase(args):
            row, column, weight, k, factor = args
            # the needle token's product: rho kappa where the head sees it, else a fresh key's
            value = jnp.where(sees[None], rho[:, None] * k[None], u[:, column][:, None])
            z = entry_gain[None] * scale * (u @ row.T + weight[None] * value)  # (K, E)
            log_needle = jnp.logaddexp(z[:, :heads], z[:, heads:]) if overlap else z
            y = (gains[None] * scale)[:, None] * (v @ factor.T)  # (K, n, H): distractors
            log_norm = jnp.logaddexp(log_needle, jax.nn.logsumexp(y, axis=1))  # (K, H)
            needle = jnp.mean(jnp.exp(log_needle - log_norm), axis=-1)
            rival = jnp.max(jnp.mean(jnp.exp(y - log_norm[:, None]), axis=-1), axis=-1)
            return jnp.sum(needle > rival)

        return jax.lax.map(at_phase, (rows, columns, needle_weight, kappa, factors))

    return jnp.sum(jax.lax.map(block, jax.random.split(key, blocks)), axis=0)


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
    (default all; the others are nan); draws: contexts drawn per phase (a multiple of
    BLOCK). The exact law, integrated by Monte Carlo with a fixed seed (module docstring):
    binomial error sqrt(acc (1 - acc) / draws).
    """
    w = np.asarray(pooling_weights, float)
    heads, slots = w.shape
    stride = slots // 2 if overlap else slots
    gains = np.broadcast_to(np.asarray(gain, float), (heads,))
    base = np.zeros(heads, int) if offsets is None else np.asarray(offsets, int)
    keep = np.ones(heads, bool) if keep is None else np.asarray(keep, bool)
    sees = np.ones(heads, bool) if sees_needle is None else np.asarray(sees_needle, bool)
    shifts = np.asarray(stagger_offsets(stride, ensemble))
    virtual_offsets = ((base[None] + shifts[:, None]) % stride)[:, keep].ravel()
    virtual = np.tile(w[keep], (ensemble, 1))
    virtual_gains = np.tile(gains[keep], ensemble)
    virtual_sees = np.tile(sees[keep], ensemble)
    out = np.full(stride, np.nan)
    wanted = list(range(stride) if phases is None else phases)
    heads_left = virtual.shape[0]
    if heads_left == 0:
        out[wanted] = 1.0 / chunks
        return out
    if heads_left == 1 and not overlap and virtual_sees[0]:
        # one head: the partition function drops out, the exact quadrature
        for phi in wanted:
            slot = (phi - virtual_offsets[0]) % stride
            kappa = rope_attenuation_at(slot, rope_dim, dim) if rope_dim else 1.0
            norm2 = np.sum(virtual[0] ** 2)
            out[phi] = float(needle_accuracy(virtual[0, slot], norm2, chunks, dim, kappa))
        return out
    out[wanted] = _readout_accuracies(
        wanted, virtual, virtual_gains, chunks, dim, virtual_offsets, overlap, rope_dim,
        virtual_sees, draws,
    )  # fmt: skip
    return out


def slot_accuracy(needle_weight, weight_norm2, chunks, dim, kappa=1.0):
    """acc of one head alone for a needle in a slot of weight `needle_weight` (docs/theory.md §6.12).

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
            w, gain, chunks, dim, offsets=np.asarray(base) + shift, **variant
        )
        for shift in stagger_offsets(stride, ensemble)
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
    """Pbar[phi] at d = inf for the chunking variants (docs/theory.md §5 with shifted/overlapping chunks).

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


float64_module(__name__)  # 64-bit types inside these functions only

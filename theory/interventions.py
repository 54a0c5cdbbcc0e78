"""Predictions for interventions, RoPE anchoring and mitigations, from the pooling weights.

Finite-d accuracy of one head (THEORY 7, made exact by conditioning on |q|^2, THEORY 6.12).
Given r = |q|^2 (r ~ chi^2_d / d) the logits are independent Gaussians: the needle's is
N(beta r kappa alpha[phi], beta^2 r (|alpha|^2 - alpha[phi]^2) / d) and each of the N-1
distractors' is N(0, beta^2 r |alpha|^2 / d), so

    acc[phi] = E_r E_needle [ Phi(needle / sd_distractor)^(N-1) ],

a 2-D quadrature over rho = sqrt(r d) ~ chi_d and the needle's noise, shared with
theory.accuracy (needle_accuracy). `kappa` is the RoPE-anchoring attenuation of the
needle's own product (1 without RoPE; theory.rope.rope_attenuation_at).

Several heads ("best head" rule). The head average Pbar is dominated by the sharpest head:
a head that retrieves the needle puts mass ~ sigma_N(beta alpha) on it, while a head that
does not spreads its mass over distractors; so acc[phi] ~ max_h acc_h[phi]. Exact for one
head, an approximation for several (checked against simulation in tests/test_interventions.py).
Ablating head h removes it from the max; zeroing alpha_h[phi] (or setting it to 1/s)
changes head h's accuracy at phi; restoring head h's clean compressed key into a context
whose needle was replaced by noise gives back acc_h[phi] (other heads see no needle).

Chunking variants act on the phase each head sees: with boundaries shifted by `o` tokens
a needle at phase phi sits at head phase (phi - o) mod s (staggered heads, offset
ensembles); overlapping windows hold it in two entries (own-chunk slot s + hp,
previous-chunk slot hp), and the better of the two retrieves it.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .accuracy import needle_accuracy
from .mitigations import entropy_critical_weight
from .reduced import retrieval_probability
from .rope import ROPE_THETA, rope_attenuation_at


def rope_phase_scale(relative, dim, rope_dim, theta=ROPE_THETA):
    """kappa(rel) under RoPE anchoring: theory.rope.rope_attenuation_at(relative, rope_dim, dim).

    Kept for callers of this argument order (relative, dim, rope_dim).
    """
    return rope_attenuation_at(relative, rope_dim, dim, theta)


def slot_accuracy(needle_weight, weight_norm2, gain, chunks, dim, kappa=1.0):
    """acc of one head for a needle in a slot of weight `needle_weight` (exact, module docstring).

    needle_weight alpha[phi], weight_norm2 |alpha|^2 (same shape), gain beta (drops out of
    the argmax), chunks N, dim d, kappa the needle-product attenuation.
    theory.accuracy.needle_accuracy. Returns an array of the broadcast shape.
    """
    del gain
    return needle_accuracy(needle_weight, weight_norm2, chunks, dim, kappa)


def head_phase_accuracy(
    pooling_weights, gain, chunks, dim, offsets=None, overlap=False, rope_dim=0
):
    """acc_h[phi]: each head's own accuracy at every phase, `(H, s)`.

    pooling_weights: (H, S) with S = s, or 2s with `overlap` ([previous | own] slots);
    gain: scalar or (H,); offsets: per-head chunk shift in tokens (default 0); rope_dim:
    RoPE-anchored rotary channels (0: none). A needle at phase phi sits at head phase
    hp = (phi - o_h) mod s; with overlap it is retrieved by the better of its two slots.
    """
    w = np.asarray(pooling_weights, float)
    heads, slots = w.shape
    stride = slots // 2 if overlap else slots
    gains = np.broadcast_to(np.asarray(gain, float), (heads,))
    offsets = np.zeros(heads, int) if offsets is None else np.asarray(offsets, int)
    phases = np.arange(stride)
    out = np.zeros((heads, stride))
    for h in range(heads):
        hp = (phases - offsets[h]) % stride
        norm2 = np.sum(w[h] ** 2)
        own = stride + hp if overlap else hp
        kappa = rope_attenuation_at(hp, rope_dim, dim) if rope_dim else 1.0
        competitors = chunks - 1 if overlap else chunks  # the alias entry is merged out
        acc = slot_accuracy(w[h, own], norm2, gains[h], competitors, dim, kappa)
        if overlap:
            kappa_prev = rope_attenuation_at(hp - stride, rope_dim, dim) if rope_dim else 1.0
            prev = slot_accuracy(w[h, hp], norm2, gains[h], competitors, dim, kappa_prev)
            acc = np.maximum(acc, prev)
        out[h] = acc
    return out


def best_head_accuracy(pooling_weights, gain, chunks, dim, **variant):
    """Predicted per-phase accuracy `(s,)` of the head average: the best-head rule.

    Same arguments as head_phase_accuracy; add `ensemble=K` to average the readout over K
    chunkings shifted by k s // K (the best member of heads x chunkings retrieves).
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


phase_accuracy = best_head_accuracy
"""The best-head rule under this module's historical name (theory.phase_accuracy is one head's)."""


def ablation_effect(pooling_weights, gain, chunks, dim, **variant):
    """Predicted accuracy drop `(H, s)` from dropping head h from the head average.

    Best-head rule: acc without h is the max over the other heads (chance 1/N when none).
    """
    per_head = head_phase_accuracy(pooling_weights, gain, chunks, dim, **variant)
    full = per_head.max(axis=0)
    out = np.zeros_like(per_head)
    for h in range(per_head.shape[0]):
        rest = np.delete(per_head, h, axis=0)
        without = rest.max(axis=0) if rest.shape[0] else np.full(full.shape, 1.0 / chunks)
        out[h] = full - without
    return out


def pooling_patch_effect(pooling_weights, gain, chunks, dim, value):
    """Predicted drop `(H, s)` at phase phi from setting alpha_h[phi] to `value` (no renormalising)."""
    w = np.asarray(pooling_weights, float)
    heads, stride = w.shape
    per_head = head_phase_accuracy(w, gain, chunks, dim)
    full = per_head.max(axis=0)
    gains = np.broadcast_to(np.asarray(gain, float), (heads,))
    out = np.zeros((heads, stride))
    for h in range(heads):
        for phi in range(stride):
            patched = w[h].copy()
            patched[phi] = value
            acc_h = slot_accuracy(patched[phi], np.sum(patched**2), gains[h], chunks, dim)
            others = np.delete(per_head[:, phi], h)
            out[h, phi] = full[phi] - max(float(acc_h), *(others.tolist() or [0.0]))
    return out


def activation_patch_effect(pooling_weights, gain, chunks, dim, **variant):
    """Predicted accuracy gained `(H, s)` by restoring head h's clean compressed keys into a
    context whose needle token was replaced by noise: acc_h[phi] - 1/N (no other head sees it)."""
    return head_phase_accuracy(pooling_weights, gain, chunks, dim, **variant) - 1.0 / chunks


critical_phase_entropy = entropy_critical_weight
"""REG_c = max(0, H s lambda), theory.mitigations.entropy_critical_weight (kept as an alias)."""


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
    heads = a0.shape[0]
    gains = jnp.full((heads,), float(gain))
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

    grad = jax.jit(jax.grad(objective))
    steps = int(round(time / dt))

    @jax.jit
    def run(a):
        return jax.lax.fori_loop(0, steps, lambda _, x: x - dt * grad(x), a)

    return np.asarray(jax.nn.softmax(run(a0), axis=-1))


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

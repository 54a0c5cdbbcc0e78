"""The large-d reduced loss of docs/theory.md §5, as a differentiable jax function.

Parametrisation. ``pooling_logits`` (H, s) are the softmax-pool logits ``a_h``;
``gain`` (H,) is the gain ``beta_h`` itself (positive). A flow that learns the
gain integrates ``log_gain`` and passes ``exp(log_gain)`` here, so the loss is
one function of ``(pooling_logits, gain)`` whichever way the gain moves.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.precision import float64_module

PoolingLogits = Float[Array, "heads stride"]
PoolingWeights = Float[Array, "heads stride"]
Gains = Float[Array, " heads"]
PhaseScale = Float[Array, " stride"]

LOSSES = ("mse", "ce")


def retrieval_probability(logit, chunks):
    """sigma_N(m) = e^m / (e^m + N - 1): soft mass on the needle chunk (docs/theory.md §5).

    logit: any shape, the needle logit m (distractor logits are 0 at d = inf).
    Returns the same shape.
    """
    return jax.nn.sigmoid(logit - jnp.log(chunks - 1.0))


def mean_needle_probability(pooling_logits: PoolingLogits, gain: Gains, chunks, phase_scale=None):
    """Pbar[phi] = mean_h sigma_N(beta_h alpha_h[phi] kappa[phi]) at d = inf (docs/theory.md §5).

    pooling_logits: (H, s); gain: (H,); chunks: N; phase_scale: optional (s,) factor
    kappa[phi] on the needle logit (RoPE anchoring attenuation, theory.rope; 1 when None).
    Returns (s,).
    """
    pooling_weights = jax.nn.softmax(pooling_logits, axis=-1)
    needle_logit = gain[:, None] * pooling_weights
    if phase_scale is not None:
        needle_logit = needle_logit * phase_scale[None, :]
    return jnp.mean(retrieval_probability(needle_logit, chunks), axis=0)


def reduced_loss(
    pooling_logits: PoolingLogits,
    gain: Gains,
    chunks,
    loss: str = "mse",
    weight_decay=0.0,
    phase_scale=None,
    entropy_weight=0.0,
):
    """L_inf(a, beta) of docs/theory.md §5 (+ docs/theory.md §6.6 weight decay), differentiable in both.

    pooling_logits: (H, s) logits a_h; gain: (H,) gains beta_h > 0; chunks: N.
    loss: "mse" gives N/(N-1) mean_phi (1 - Pbar[phi])^2, "ce" gives mean_phi -log Pbar[phi].
    weight_decay: adds weight_decay/2 * sum_h beta_h^2 (docs/theory.md §6.6).
    phase_scale: optional (s,) needle-logit factor (RoPE anchoring, theory.rope).
    entropy_weight: adds -entropy_weight * mean_h H(alpha_h), the phase-entropy
    regulariser of theory.mitigations.
    Returns a scalar.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    pbar = mean_needle_probability(pooling_logits, gain, chunks, phase_scale)
    if loss == "mse":
        data = chunks / (chunks - 1.0) * jnp.mean((1.0 - pbar) ** 2)
    else:
        data = -jnp.mean(jnp.log(pbar))
    penalty = 0.5 * weight_decay * jnp.sum(gain**2)
    log_weights = jax.nn.log_softmax(pooling_logits, axis=-1)
    entropy = -jnp.sum(jnp.exp(log_weights) * log_weights, axis=-1)
    return data + penalty - entropy_weight * jnp.mean(entropy)


def centred_logits(pooling_logits):
    """P a = a - mean_phi a: the pooling logits with their mean over phases removed.

    pooling_logits: (..., s), numpy or jax. Equals log alpha - mean_phi log alpha for the
    softmax weights alpha, so it depends on the pooling weights only. Returns (..., s).
    """
    return pooling_logits - pooling_logits.mean(axis=-1, keepdims=True)


def specialization_order(pooling_logits: PoolingLogits):
    """delta = |P a|_F: Frobenius norm of the per-head centred pooling logits (theory.thresholds).

    pooling_logits: (..., H, s). Equals |log alpha - mean_phi log alpha|, so it depends on
    the pooling weights only; it is the order parameter of the specialisation event.
    Returns (...,).
    """
    centred = centred_logits(jnp.asarray(pooling_logits))
    return jnp.sqrt(jnp.sum(centred**2, axis=(-2, -1)))


float64_module(__name__)  # 64-bit types inside these functions only

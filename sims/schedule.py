"""The learning-rate schedule the decoder families train with."""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array

FINAL_LR_FRACTION = 0.1  # the cosine ends at lr / 10


def warmup_cosine(step, *, lr, warmup, steps, dtype=jnp.float32) -> Array:
    """Linear warmup over `warmup` steps, then cosine decay from `lr` to
    `FINAL_LR_FRACTION * lr` at `steps`; every argument may be an array (a sweep's)."""
    step = step.astype(dtype)
    warm = jnp.minimum(1.0, (step + 1.0) / jnp.maximum(warmup, 1.0))
    span = jnp.maximum(steps - warmup, 1.0)
    progress = jnp.clip((step - warmup) / span, 0.0, 1.0)
    cosine = FINAL_LR_FRACTION + (1 - FINAL_LR_FRACTION) * 0.5 * (1 + jnp.cos(jnp.pi * progress))
    return lr * warm * cosine


def warmup_constant(step, *, lr, warmup, dtype=jnp.float32) -> Array:
    """Linear warmup over `warmup` steps, then `lr` held to the end (a rate kept up through
    the induction transition)."""
    step = step.astype(dtype)
    return lr * jnp.minimum(1.0, (step + 1.0) / jnp.maximum(warmup, 1.0))

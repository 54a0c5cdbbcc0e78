"""The needle-retrieval task (THEORY.md section 2).

Keys `x[c, j] ~ N(0, I/d)` i.i.d.; the needle sits at chunk `c*` (uniform) and phase
`phi` (uniform, or fixed for phase-resolved evaluation); the query is `q = x[c*, phi]`;
the target is `c*`.

Two exact samplers. `keys=True` draws the real keys (`B N s d` numbers). Otherwise
only the inner products the logits of phase-weighted operators need are drawn:
conditional on `q`, every other key's `q . x[c, j]` is i.i.d. `N(0, |q|^2 / d)`, and
`|q|^2 ~ chi^2_d / d`, so `gram` has exactly the distribution of `q . x` at
`d`-times lower cost (`B N s` numbers).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from .config import ModelConfig


class Batch(eqx.Module):
    """A batch of retrieval problems; exactly one of `gram` or (`keys`, `query`) is set."""

    target: Int[Array, " B"]
    phase: Int[Array, " B"]
    gram: Float[Array, "B N s"] | None = None
    keys: Float[Array, "B N s d"] | None = None
    query: Float[Array, "B d"] | None = None
    rope_norms: Float[Array, "B R1"] | None = None
    """With `rope_anchor` on the inner-product path: the query's squared norm split into its
    non-rotary channels and each rotary pair (`idealized.model.anchored_self_product`)."""


def sample_batch(
    key: PRNGKeyArray,
    config: ModelConfig,
    batch: int,
    *,
    keys: bool,
    phase: int | Int[Array, ""] | None = None,
    dtype=jnp.float32,
) -> Batch:
    """`batch` needles; `phase=None` draws phases uniformly, else every needle sits at `phase`."""
    N, s, d = config.chunks, config.stride, config.dim
    k_target, k_phase, k_keys, k_norm = jax.random.split(key, 4)
    target = jax.random.randint(k_target, (batch,), 0, N)
    if phase is None:
        phases = jax.random.randint(k_phase, (batch,), 0, s)
    else:
        phases = jnp.full((batch,), phase, dtype=jnp.int32)
    rows = jnp.arange(batch)
    if keys:
        x = jax.random.normal(k_keys, (batch, N, s, d), dtype) / jnp.sqrt(jnp.asarray(d, dtype))
        return Batch(target=target, phase=phases, keys=x, query=x[rows, target, phases])
    rope_norms = None
    if config.rope_anchor:  # |q|^2 = plain part + one chi^2_2 / d per rotary pair, exactly
        pairs = config.rope_dim // 2
        k_norm, k_pairs = jax.random.split(k_norm)
        plain = jnp.zeros((batch, 1), dtype)
        if d > config.rope_dim:
            plain = jax.random.chisquare(k_norm, d - config.rope_dim, (batch, 1), dtype) / d
        rope_norms = jnp.concatenate(
            [plain, jax.random.chisquare(k_pairs, 2, (batch, pairs), dtype) / d], axis=1
        )
        norm2 = jnp.sum(rope_norms, axis=1)
    else:
        norm2 = jax.random.chisquare(k_norm, d, (batch,), dtype) / d
    scale = jnp.sqrt(norm2 / d)[:, None, None]
    gram = scale * jax.random.normal(k_keys, (batch, N, s), dtype)
    gram = gram.at[rows, target, phases].set(norm2)
    return Batch(target=target, phase=phases, gram=gram, rope_norms=rope_norms)

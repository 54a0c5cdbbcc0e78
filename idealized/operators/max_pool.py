"""`max_pool`: the channelwise maximum over a chunk of projected keys."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.operators.base import AbstractOperator, Pooled, noise
from weakspots.idealized.types import CompressedKeys, Keys


def max_pool(keys: Keys, projection: Float[Array, "d d"]) -> Pooled:
    """`K[c] = max_j (x[c, j] @ P)`, elementwise over channels."""
    return jnp.max(keys @ projection, axis=1)


class MaxPool(AbstractOperator):
    projection: Float[Array, "H d d"]
    name: ClassVar[str] = "max_pool"
    token_maps: ClassVar[int] = 1  # the projected keys (its backward reuses them)
    pool: ClassVar = staticmethod(max_pool)

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        H, d = config.heads, config.dim
        eye = jnp.broadcast_to(jnp.eye(d, dtype=dtype), (H, d, d))
        return cls(eye + noise(key, init_scale, (H, d, d), dtype) / jnp.sqrt(d))

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(max_pool, in_axes=(None, 0))(keys, self.projection)

    @classmethod
    def decoder_params(cls, *, stride, heads, d_model, head_dim, rank, overlap, rngs):
        """The identity projection per head (no draw)."""
        eye = jnp.eye(head_dim, dtype=jnp.float32)
        return {"projection": jnp.broadcast_to(eye, (heads, head_dim, head_dim))}

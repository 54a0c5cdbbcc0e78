"""`linear`: unconstrained weights per phase (a conv with kernel = stride = s); the toy only."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.operators.base import TOY, AbstractOperator, Pooled, noise
from weakspots.idealized.types import CompressedKeys, Keys, PoolingWeights


def linear_pool(keys: Keys, weights: Float[Array, " s"]) -> Pooled:
    """`K[c] = sum_j w[j] x[c, j]` with unconstrained `w` (a conv with kernel = stride = s)."""
    return jnp.einsum("j,cjd->cd", weights, keys)


class LinearPool(AbstractOperator):
    weights: Float[Array, "H s"]
    name: ClassVar[str] = "linear"
    phase_weighted: ClassVar[bool] = True
    families: ClassVar = (TOY,)
    pool: ClassVar = staticmethod(linear_pool)

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        s = config.slots
        return cls((1.0 + noise(key, init_scale, (config.heads, s), dtype)) / s)

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(linear_pool, in_axes=(None, 0))(keys, self.weights)

    def phase_weights(self) -> PoolingWeights:
        return self.weights

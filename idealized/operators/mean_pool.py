"""`mean_pool`: the control with no learnable phase preference."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from weakspots.idealized.operators.base import AbstractOperator, Pooled, uniform
from weakspots.idealized.types import CompressedKeys, Keys, PoolingWeights


def mean_pool(keys: Keys) -> Pooled:
    """`K[c] = mean_j x[c, j]`: the control with no learnable phase preference."""
    return jnp.mean(keys, axis=1)


class MeanPool(AbstractOperator):
    heads: int = eqx.field(static=True)
    stride: int = eqx.field(static=True)
    name: ClassVar[str] = "mean_pool"
    phase_weighted: ClassVar[bool] = True
    distribution: ClassVar[bool] = True  # uniform weights are a distribution...
    fixed_weights: ClassVar[bool] = True  # ...with no parameter to move it
    pool: ClassVar = staticmethod(mean_pool)

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        return cls(heads=config.heads, stride=config.slots)

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jnp.broadcast_to(mean_pool(keys), (self.heads, *keys.shape[::2]))

    def phase_weights(self) -> PoolingWeights:
        return jnp.full((self.heads, self.stride), 1.0 / self.stride)

    @classmethod
    def decoder_pooling_weights(cls, params, *, stride, heads, overlap):
        return uniform(heads, stride)

"""`softmax_pool`: learned positional pooling, one logit per head and phase (DeepSeek-V4's APE term)."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.operators.base import AbstractOperator, Pooled, noise
from weakspots.idealized.types import CompressedKeys, Keys, PoolingWeights


def softmax_pool(keys: Keys, pooling_logits: Float[Array, " s"]) -> Pooled:
    """`K[c] = sum_j softmax(a)[j] x[c, j]`: learned positional pooling (DeepSeek-V4's APE term)."""
    return jnp.einsum("j,cjd->cd", jax.nn.softmax(pooling_logits), keys)


class SoftmaxPool(AbstractOperator):
    pooling_logits: Float[Array, "H s"]
    name: ClassVar[str] = "softmax_pool"
    phase_weighted: ClassVar[bool] = True
    distribution: ClassVar[bool] = True
    position_parameters: ClassVar = (("pooling_logits",), -1)
    pool: ClassVar = staticmethod(softmax_pool)

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        return cls(noise(key, init_scale, (config.heads, config.slots), dtype))

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(softmax_pool, in_axes=(None, 0))(keys, self.pooling_logits)

    def phase_weights(self) -> PoolingWeights:
        return jax.nn.softmax(self.pooling_logits, axis=-1)

    @classmethod
    def decoder_params(cls, *, stride, heads, d_model, head_dim, rank, overlap, rngs):
        """Zero logits: uniform pooling, as the toy's start at `init_scale = 0` (no draw)."""
        return {"pooling_logits": jnp.zeros((heads, stride), jnp.float32)}

    @classmethod
    def decoder_pooling_weights(cls, params, *, stride, heads, overlap):
        return jax.nn.softmax(params["pooling_logits"], axis=-1)

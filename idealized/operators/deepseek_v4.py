"""`deepseek_v4`: DeepSeek-V4's compressor (gated per-channel pooling with a position bias,
RMSNorm, RoPE at the window start), per head; the pure operator is `idealized.deepseek_v4`."""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.deepseek_v4 import OVERLAP_RATIO, ape_pooling_weights, deepseek_v4
from weakspots.idealized.operators.base import AbstractOperator, complete, noise
from weakspots.idealized.types import CompressedKeys, Keys, PoolingWeights


class DeepSeekV4(AbstractOperator):
    """DeepSeek-V4's compressor per head; the output is scaled to unit norm (RMSNorm gives |K| = sqrt(d)).

    In the decoder it pools the layer input: per head `wkv` and `wgate` `(D, coff hd)`
    project the tokens and `ape` `(s, coff hd)` is the position bias (`coff = 2` with
    `overlap`); the one entry serves as key and value (DeepSeek-V4 shares it; the layer
    rotates the key copy to the window start).
    """

    wkv: Float[Array, "H d cd"]
    wgate: Float[Array, "H d cd"]
    ape: Float[Array, "H s cd"]
    rope_dim: int = eqx.field(static=True)
    name: ClassVar[str] = "deepseek_v4"
    token_maps: ClassVar[int] = 2  # per-channel scores and their softmax weights
    projections: ClassVar[int] = 2  # values and gate
    distribution: ClassVar[bool] = True
    position_parameters: ClassVar = (("ape",), -2)

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        """Identity values, zero gate and (at `init_scale = 0`) zero bias: uniform pooling."""
        H, s, d = config.heads, config.slots, config.dim
        eye = jnp.broadcast_to(jnp.eye(d, dtype=dtype), (H, d, d))
        coff = 2 if s == 4 else 1
        wkv = jnp.concatenate([eye] * coff, axis=-1)
        ape = jnp.broadcast_to(noise(key, init_scale, (H, s, 1), dtype), (H, s, coff * d))
        return cls(wkv, jnp.zeros_like(wkv), ape, rope_dim=config.rope_dim)

    def __call__(self, keys: Keys) -> CompressedKeys:
        chunks, stride, dim = keys.shape
        tokens = keys.reshape(chunks * stride, dim)

        def one_head(wkv, wgate, ape):
            return deepseek_v4(tokens, wkv, wgate, ape, ratio=stride, rope_dim=self.rope_dim)

        return jax.vmap(one_head)(self.wkv, self.wgate, self.ape) / jnp.sqrt(dim)

    def pooling_weights(self) -> PoolingWeights:
        """Own-block window weights from `ape` alone (gate excluded), averaged over channels."""
        overlap = self.ape.shape[1] == OVERLAP_RATIO
        return jax.vmap(ape_pooling_weights, in_axes=(0, None))(self.ape, overlap)

    @classmethod
    def decoder_params(cls, *, stride, heads, d_model, head_dim, rank, overlap, rngs):
        """`wkv` normal / sqrt(D) (one draw); gate and bias zero: uniform pooling."""
        width = (2 if overlap else 1) * head_dim
        wkv = jax.random.normal(rngs.params(), (heads, d_model, width), jnp.float32)
        return {
            "wkv": wkv / jnp.sqrt(d_model),
            "wgate": jnp.zeros((heads, d_model, width), jnp.float32),
            "ape": jnp.zeros((heads, stride, width), jnp.float32),
        }

    @classmethod
    def decoder_pool(cls, params, x, keys, values, *, stride, overlap):
        """One entry per head and window from the layer input `x`, as key and as value."""

        def one(tokens, wkv, wgate, ape):
            return deepseek_v4(tokens, wkv, wgate, ape, ratio=stride, overlap=overlap)

        per_head = jax.vmap(one, in_axes=(None, 0, 0, 0))
        entries = jax.vmap(per_head, in_axes=(0, None, None, None))(
            complete(x, stride), params["wkv"], params["wgate"], params["ape"]
        )
        entries = entries.transpose(0, 2, 1, 3)
        return entries, entries

    @classmethod
    def decoder_pooling_weights(cls, params, *, stride, heads, overlap):
        return jax.vmap(ape_pooling_weights, in_axes=(0, None))(params["ape"], overlap)

"""The multi-head retrieval model with chunk-compressed keys (THEORY.md section 3).

Per head h: `z_h[c] = gain_h * (q @ Wq_h) . (K_h[c] @ Wk_h)`, `P_h = softmax_c(z_h)`,
`Pbar = mean_h P_h`. The reduced model fixes `Wq_h^T Wk_h = I` (no projections).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .compression import AbstractCompressor, init_compressor
from .config import ModelConfig
from .types import Gram, Keys, Logits, PoolingWeights, Query


class RetrievalModel(eqx.Module):
    """An immutable pytree; ensembles come from vmapping `init_model` over keys.

    The gain is stored as `log_gain` so that a learned gain stays positive; a fixed
    gain is the same array behind `stop_gradient`, so sweeping it needs no recompile.
    """

    compressor: AbstractCompressor
    log_gain: Float[Array, " H"]
    query_projection: Float[Array, "H d d"] | None
    key_projection: Float[Array, "H d d"] | None
    learn_gain: bool = eqx.field(static=True)

    @property
    def gain(self) -> Float[Array, " H"]:
        gain = jnp.exp(self.log_gain)
        return gain if self.learn_gain else jax.lax.stop_gradient(gain)

    @property
    def uses_gram(self) -> bool:
        """True when the logits depend on the keys only through `q . x[c, j]`."""
        return self.query_projection is None and self.compressor.phase_weighted

    def pooling_weights(self) -> PoolingWeights | None:
        return self.compressor.pooling_weights()

    def logits_from_gram(self, gram: Gram) -> Logits:
        """`z_h[c] = gain_h sum_j w_h[j] gram[c, j]`, exact for phase-weighted operators."""
        weights = self.compressor.phase_weights()
        return self.gain[:, None] * jnp.einsum("hj,cj->hc", weights, gram)

    def logits_from_keys(self, keys: Keys, query: Query) -> Logits:
        compressed = self.compressor(keys)
        if self.query_projection is None:
            q = jnp.broadcast_to(query, (compressed.shape[0], query.shape[0]))
        else:
            q = jnp.einsum("e,hed->hd", query, self.query_projection)
            compressed = jnp.einsum("hce,hed->hcd", compressed, self.key_projection)
        return self.gain[:, None] * jnp.einsum("hd,hcd->hc", q, compressed)

    def decayed(self) -> list[Array]:
        """The weights that weight decay penalises: the gain (if learned) and the projections."""
        leaves = [self.gain] if self.learn_gain else []
        if self.query_projection is not None:
            leaves += [self.query_projection, self.key_projection]
        return leaves


def init_model(
    key: PRNGKeyArray, config: ModelConfig, gain, init_scale, dtype=jnp.float32
) -> RetrievalModel:
    """A fresh model; `gain` and `init_scale` are scalars or 0-d arrays (vmappable)."""
    H, d = config.heads, config.dim
    compressor = init_compressor(key, config, jnp.asarray(init_scale, dtype), dtype)
    log_gain = jnp.full((H,), jnp.log(jnp.asarray(gain, dtype)), dtype)
    projection = None
    if config.learn_projections:
        projection = jnp.broadcast_to(jnp.eye(d, dtype=dtype), (H, d, d))
    return RetrievalModel(
        compressor=compressor,
        log_gain=log_gain,
        query_projection=projection,
        key_projection=projection,
        learn_gain=config.learn_gain,
    )

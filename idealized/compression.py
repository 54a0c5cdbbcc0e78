"""Compression operators: each maps a chunk of `s` keys to one cache entry (docs/theory.md §3).

The plain functions act on one context's keys `(N, s, d)` and return `(N, d)`.
The `*Compressor` modules hold per-head parameters (leading axis H) and return
`(H, N, d)`. Compressors that are linear in the keys with one weight per phase
(`softmax_pool`, `mean_pool`, `linear`) expose `phase_weights()`, which lets the
model compute logits from query-key inner products alone (see `idealized.task`).
"""

from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .config import ModelConfig
from .deepseek_v4 import OVERLAP_RATIO, ape_pooling_weights
from .deepseek_v4 import deepseek_v4 as deepseek_v4
from .types import CompressedKeys, Keys, PoolingWeights

Pooled = Float[Array, "N d"]


def softmax_pool(keys: Keys, pooling_logits: Float[Array, " s"]) -> Pooled:
    """`K[c] = sum_j softmax(a)[j] x[c, j]`: learned positional pooling (DeepSeek-V4's APE term)."""
    return jnp.einsum("j,cjd->cd", jax.nn.softmax(pooling_logits), keys)


def mean_pool(keys: Keys) -> Pooled:
    """`K[c] = mean_j x[c, j]`: the control with no learnable phase preference."""
    return jnp.mean(keys, axis=1)


def linear_pool(keys: Keys, weights: Float[Array, " s"]) -> Pooled:
    """`K[c] = sum_j w[j] x[c, j]` with unconstrained `w` (a conv with kernel = stride = s)."""
    return jnp.einsum("j,cjd->cd", weights, keys)


def max_pool(keys: Keys, projection: Float[Array, "d d"]) -> Pooled:
    """`K[c] = max_j (x[c, j] @ P)`, elementwise over channels."""
    return jnp.max(keys @ projection, axis=1)


def phase_maps(
    left: Float[Array, "*B s d r"], right: Float[Array, "*B s d r"]
) -> Float[Array, "*B s d d"]:
    """`P_j = I/s + right_j @ left_j^T`: each phase's map under `low_rank` (leading axes batch)."""
    stride, dim = left.shape[-3:-1]
    eye = jnp.eye(dim, dtype=left.dtype).reshape((1,) * (left.ndim - 2) + (dim, dim))
    return eye / stride + jnp.einsum("...jdr,...jer->...jde", right, left)


def low_rank(keys: Keys, left: Float[Array, "s d r"], right: Float[Array, "s d r"]) -> Pooled:
    """`K[c] = sum_j x[c, j] @ P_j` with `P_j = I/s + right_j @ left_j^T` (rank-r corrections).

    One product of each flattened chunk `(s d,)` with the stacked maps `(s d, d)`: the
    sum over phases and channels is a single contraction over contiguous axes, where the
    factored order (`x_j @ right_j`, then `left_j^T`) batches over the middle phase axis
    and makes XLA copy the keys into phase-major layouts, forward and backward (3.7x
    slower per canonical training step; `benchmarks/operator_step.py`).
    """
    chunks, stride, dim = keys.shape
    maps = phase_maps(left, right)
    return keys.reshape(chunks, stride * dim) @ maps.reshape(stride * dim, dim)


class AbstractCompressor(eqx.Module):
    """Per-head compression: `(N, s, d)` keys to `(H, N, d)` compressed keys."""

    phase_weighted: ClassVar[bool] = False
    """True when `K_h[c] = sum_j w[h, j] x[c, j]`; then `phase_weights()` returns `w`."""

    @abc.abstractmethod
    def __call__(self, keys: Keys) -> CompressedKeys: ...

    def phase_weights(self) -> PoolingWeights | None:
        """`w[h, j]` with `K_h[c] = sum_j w[h, j] x[c, j]`, or None if not of that form."""
        return None

    def pooling_weights(self) -> PoolingWeights | None:
        """The per-phase weights the metrics report (None where the operator has none)."""
        return self.phase_weights()


class SoftmaxPool(AbstractCompressor):
    pooling_logits: Float[Array, "H s"]
    phase_weighted: ClassVar[bool] = True

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(softmax_pool, in_axes=(None, 0))(keys, self.pooling_logits)

    def phase_weights(self) -> PoolingWeights:
        return jax.nn.softmax(self.pooling_logits, axis=-1)


class MeanPool(AbstractCompressor):
    heads: int = eqx.field(static=True)
    stride: int = eqx.field(static=True)
    phase_weighted: ClassVar[bool] = True

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jnp.broadcast_to(mean_pool(keys), (self.heads, *keys.shape[::2]))

    def phase_weights(self) -> PoolingWeights:
        return jnp.full((self.heads, self.stride), 1.0 / self.stride)


class LinearPool(AbstractCompressor):
    weights: Float[Array, "H s"]
    phase_weighted: ClassVar[bool] = True

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(linear_pool, in_axes=(None, 0))(keys, self.weights)

    def phase_weights(self) -> PoolingWeights:
        return self.weights


class MaxPool(AbstractCompressor):
    projection: Float[Array, "H d d"]

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(max_pool, in_axes=(None, 0))(keys, self.projection)


class LowRank(AbstractCompressor):
    left: Float[Array, "H s d r"]
    right: Float[Array, "H s d r"]

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(low_rank, in_axes=(None, 0, 0))(keys, self.left, self.right)

    def pooling_weights(self) -> PoolingWeights:
        """Each phase's share of the mean squared singular value of `P_j` (uniform at init)."""
        maps = jax.vmap(phase_maps)(self.left, self.right)
        power = jnp.sum(maps**2, axis=(-2, -1))
        return power / jnp.sum(power, axis=-1, keepdims=True)


class DeepSeekV4(AbstractCompressor):
    """DeepSeek-V4's compressor per head; the output is scaled to unit norm (RMSNorm gives |K| = sqrt(d))."""

    wkv: Float[Array, "H d cd"]
    wgate: Float[Array, "H d cd"]
    ape: Float[Array, "H s cd"]
    rope_dim: int = eqx.field(static=True)

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


def init_compressor(
    key: PRNGKeyArray, config: ModelConfig, init_scale, dtype=jnp.float32
) -> AbstractCompressor:
    """Fresh per-head compressor; `init_scale` (an array) sets the symmetry-breaking noise.

    At `init_scale = 0` every operator starts at (or, for `max_pool`, near) uniform pooling.
    """
    H, s, d = config.heads, config.slots, config.dim  # slots: 2 * stride with overlap
    noise = lambda shape: init_scale * jax.random.normal(key, shape, dtype)  # noqa: E731
    eye = jnp.broadcast_to(jnp.eye(d, dtype=dtype), (H, d, d))
    match config.operator:
        case "softmax_pool":
            return SoftmaxPool(noise((H, s)))
        case "mean_pool":
            return MeanPool(heads=H, stride=s)
        case "linear":
            return LinearPool((1.0 + noise((H, s))) / s)
        case "max_pool":
            return MaxPool(eye + noise((H, d, d)) / jnp.sqrt(d))
        case "low_rank":
            r = config.rank
            k_right = jax.random.fold_in(key, 1)
            right = jax.random.normal(k_right, (H, s, d, r), dtype) / jnp.sqrt(d)
            return LowRank(left=noise((H, s, d, r)) / jnp.sqrt(d), right=right)
        case "deepseek_v4":
            coff = 2 if s == 4 else 1
            wkv = jnp.concatenate([eye] * coff, axis=-1)
            ape = jnp.broadcast_to(noise((H, s, 1)), (H, s, coff * d))
            return DeepSeekV4(wkv, jnp.zeros_like(wkv), ape, rope_dim=config.rope_dim)
    raise AssertionError(config.operator)  # unreachable: ModelConfig validates operator

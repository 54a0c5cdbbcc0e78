"""`low_rank`: per phase `P_j = I/s + right_j left_j^T`, rank-r corrections to mean pooling."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.operators.base import AbstractOperator, Pooled, noise
from weakspots.idealized.types import CompressedKeys, Keys, PoolingWeights


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
    and makes XLA copy the keys into phase-major layouts, forward and backward
    (`benchmarks/operator_step.py` times both).
    """
    chunks, stride, dim = keys.shape
    maps = phase_maps(left, right)
    return keys.reshape(chunks, stride * dim) @ maps.reshape(stride * dim, dim)


def power_shares(left: Float[Array, "H s d r"], right: Float[Array, "H s d r"]) -> PoolingWeights:
    """Each phase's share of the mean squared singular value of `P_j`, per head."""
    maps = jax.vmap(phase_maps)(left, right)
    power = jnp.sum(maps**2, axis=(-2, -1))
    return power / jnp.sum(power, axis=-1, keepdims=True)


class LowRank(AbstractOperator):
    left: Float[Array, "H s d r"]
    right: Float[Array, "H s d r"]
    name: ClassVar[str] = "low_rank"
    distribution: ClassVar[bool] = True
    position_parameters: ClassVar = (("left", "right"), -3)
    pool: ClassVar = staticmethod(low_rank)

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        H, s, d, r = config.heads, config.slots, config.dim, config.rank
        k_right = jax.random.fold_in(key, 1)
        right = jax.random.normal(k_right, (H, s, d, r), dtype) / jnp.sqrt(d)
        return cls(left=noise(key, init_scale, (H, s, d, r), dtype) / jnp.sqrt(d), right=right)

    def __call__(self, keys: Keys) -> CompressedKeys:
        return jax.vmap(low_rank, in_axes=(None, 0, 0))(keys, self.left, self.right)

    def pooling_weights(self) -> PoolingWeights:
        """Each phase's share of the mean squared singular value of `P_j` (uniform at init)."""
        return power_shares(self.left, self.right)

    @classmethod
    def decoder_params(cls, *, stride, heads, d_model, head_dim, rank, overlap, rngs):
        """`left = 0` (mean pooling at init), `right` normal / sqrt(hd): one draw."""
        shape = (heads, stride, head_dim, rank)
        left = jnp.zeros(shape, jnp.float32)
        right = jax.random.normal(rngs.params(), shape, jnp.float32) / jnp.sqrt(head_dim)
        return {"left": left, "right": right}

    @classmethod
    def decoder_pooling_weights(cls, params, *, stride, heads, overlap):
        return power_shares(params["left"], params["right"])

"""The abstract compression operator: what every operator file defines.

An operator maps each chunk of `s` keys to one cache entry (docs/theory.md §3). Its class
states the facts the rest of the code asks about (`name`, `phase_weighted`,
`distribution`, `fixed_weights`, `position_parameters`, `families`) and holds both forms:

* the toy's: the class itself is an equinox module whose fields are the per-head
  parameters (leading axis H); `init` draws them, `__call__` maps `(N, s, d)` keys to
  `(H, N, d)`;
* the decoder's: `decoder_params` draws the parameters of one layer (named as the
  fields; `idealized.decoder.attention.Compressor` holds them as `nnx.Param`s) and
  `decoder_pool` applies the operator window by window to `(B, T, H, hd)` heads.

Final classes subclass `AbstractOperator` and are listed in `registry.py`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.types import CompressedKeys, Keys, PoolingWeights

if TYPE_CHECKING:
    from weakspots.idealized.toy.config import ModelConfig

Pooled = Float[Array, "N d"]
Heads = Float[Array, "B T H hd"]
Entries = Float[Array, "B C H hd"]
Params = dict[str, jax.Array]

TOY, DECODER = "toy", "decoder"
FAMILIES = (TOY, DECODER)


def noise(key, init_scale, shape, dtype) -> jax.Array:
    """`init_scale * N(0, 1)` of `shape`: the symmetry-breaking noise of a toy init."""
    return init_scale * jax.random.normal(key, shape, dtype)


def complete(y: Float[Array, "B T ..."], stride: int) -> Float[Array, "B C*s ..."]:
    """The tokens of the complete windows: a last, partial window makes no entry (no query
    could see it: entry `w` is visible from `t` only when `w < (t + 1) // s`)."""
    return y[:, : (y.shape[1] // stride) * stride]


def windows(y: Heads, stride: int) -> Float[Array, "B H C s hd"]:
    """Each head's complete windows of `stride` tokens."""
    y = complete(y, stride)
    batch, length, heads, width = y.shape
    return y.reshape(batch, length // stride, stride, heads, width).transpose(0, 3, 1, 2, 4)


def pool_heads(operator, windows: Float[Array, "B H C s hd"], *params) -> Entries:
    """`operator(windows[b, h], *params[h])` for every sequence b and head h, as `(B, C, H, hd)`."""
    per_head = jax.vmap(operator)
    pooled = jax.vmap(per_head, in_axes=(0,) + (None,) * len(params))(windows, *params)
    return pooled.transpose(0, 2, 1, 3)


class AbstractOperator(eqx.Module):
    """A compression operator; as a module, the toy's per-head compressor `(N, s, d) -> (H, N, d)`."""

    name: ClassVar[str]
    """The operator's name: the value of `--operator`."""
    phase_weighted: ClassVar[bool] = False
    """`K_h[c] = sum_j w[h, j] x[c, j]` (then `phase_weights()` returns `w`): the logits need
    only the inner products `q . x`; otherwise they need the keys themselves."""
    distribution: ClassVar[bool] = False
    """The pooling weights form a distribution over phases (the phase-entropy regulariser's domain)."""
    fixed_weights: ClassVar[bool] = False
    """The pooling weights have no parameter (a regulariser of them changes nothing)."""
    position_parameters: ClassVar[tuple[tuple[str, ...], int] | None] = None
    """The decoder's learned position parameters, `(names, phase axis counted from the right)`."""
    families: ClassVar[tuple[str, ...]] = FAMILIES
    """The model families that support the operator (`toy`, `decoder`)."""
    dense: ClassVar[bool] = False
    """Keeps every token (stride 1): the decoder's dense control."""
    token_maps: ClassVar[int] = 0
    """Maps of every token a toy step holds per head (the trainer's memory estimate)."""
    projections: ClassVar[int] = 1
    """`d x d` projections a real-key toy step applies per needle (the cost estimate)."""
    pool: ClassVar[Callable[..., Pooled]]
    """The pure per-head operator: `(C, s, d)` keys and one head's parameters to `(C, d)`."""

    @classmethod
    def needs_keys(cls) -> bool:
        """The logits need the keys themselves, not only the inner products `q . x`."""
        return not cls.phase_weighted

    # ------------------------------------------------------------------- the toy's form

    @classmethod
    @abc.abstractmethod
    def init(cls, key, config: ModelConfig, init_scale, dtype) -> AbstractOperator:
        """Fresh per-head parameters for `config` (`init_scale` an array: the noise's scale)."""

    @abc.abstractmethod
    def __call__(self, keys: Keys) -> CompressedKeys: ...

    def phase_weights(self) -> PoolingWeights | None:
        """`w[h, j]` with `K_h[c] = sum_j w[h, j] x[c, j]`, or None if not of that form."""
        return None

    def pooling_weights(self) -> PoolingWeights | None:
        """The per-phase weights the metrics report (None where the operator has none)."""
        return self.phase_weights()

    # --------------------------------------------------------------- the decoder's form

    @classmethod
    def decoder_params(
        cls, *, stride: int, heads: int, d_model: int, head_dim: int, rank: int, overlap: bool, rngs
    ) -> Params:
        """One layer's parameters by name, drawn in this order from `rngs` (none by default)."""
        return {}

    @classmethod
    def decoder_pool(
        cls, params: Params, x, keys: Heads, values: Heads, *, stride: int, overlap: bool
    ) -> tuple[Entries, Entries]:
        """Compressed keys and values: `pool` on every head's windows of keys and of values."""
        pool = lambda y: pool_heads(cls.pool, windows(y, stride), *params.values())  # noqa: E731
        return pool(keys), pool(values)

    @classmethod
    def decoder_pooling_weights(
        cls, params: Params, *, stride: int, heads: int, overlap: bool
    ) -> Float[Array, "H s"] | None:
        """Each head's weight per phase where the operator has one, else None."""
        return None


def uniform(heads: int, stride: int, dtype=jnp.float32) -> Float[Array, "H s"]:
    """Weight `1/s` on every phase of every head."""
    return jnp.full((heads, stride), 1.0 / stride, dtype)

"""DeepSeek-V4's KV compressor at toy scale (docs/theory.md §3, operator `deepseek_v4`).

One compressed key per block of `ratio` tokens: a per-channel softmax over the window
positions of (token gate score + learned per-position bias `ape`) pools the projected
values; the pooled vector is RMS-normalised and its last `rope_dim` channels are rotated
to the block's first position.

Semantics checked against public DeepSeek-V4 `Compressor` inference code (the reference
`inference/model.py` `overlap_transform`, and an MLX port of it), which agree on:

* `score = x @ wgate`, reshaped to `(blocks, ratio, coff * head_dim)`, then `+ ape`
  (shape `(ratio, coff * head_dim)`) BEFORE any overlap rearrangement;
* `overlap_transform(t, fill)` builds a `(blocks, 2 * ratio, head_dim)` window with
  `new[:, ratio:] = t[:, :, head_dim:]` (own block, second half of the columns) and
  `new[1:, :ratio] = t[:-1, :, :head_dim]` (previous block, first half), the rest
  `fill`: `-inf` for scores and `0` for values, so block 0 sees only its own tokens;
* softmax over the window axis per channel, `sum_p w[p, ch] * kv[p, ch]`; without
  overlap the pooled vector is cut to its first `head_dim` channels (here `coff = 1`, so
  that is all of them);
* then RMSNorm over `head_dim`, then RoPE in the interleaved ("traditional", pairs
  `(2i, 2i+1)`) layout on the last `rope_dim` channels at position `block * ratio`.

The toy version drops what does not change the operator: the RMSNorm weight is fixed
to one, there is no decode-time state, and no quantisation.
"""

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from weakspots.idealized.rope import ROPE_THETA, rope_frequencies

__all__ = ["ape_pooling_weights", "deepseek_v4", "interleaved_rope", "rms_norm"]

#: The only ratio DeepSeek-V4 compresses with overlapping windows.
OVERLAP_RATIO = 4


def _overlap_window(
    blocks: Float[Array, "C m 2d"], head_dim: int, fill: float
) -> Float[Array, "C 2m d"]:
    """Window of 2m slots per block: previous block via the first half, own via the second."""
    own = blocks[:, :, head_dim:]
    prev = blocks[:-1, :, :head_dim]
    first = jnp.full((1, *prev.shape[1:]), fill, dtype=blocks.dtype)
    return jnp.concatenate([jnp.concatenate([first, prev], axis=0), own], axis=1)


def _window_pool(score: Float[Array, "C p d"], kv: Float[Array, "C p d"]) -> Float[Array, "C d"]:
    """`sum_p softmax_p(score)[p] kv[p]` per channel, as `sum_p e[p] kv[p] / sum_p e[p]`.

    `e = exp(score - max_p score)`: the same value and gradient as softmax then sum (the
    shift cancels, so it carries no gradient), with fewer passes over the window in the
    backward pass (`benchmarks/operator_step.py` times both). Every block has at least
    its own `ratio` finite slots, so the -inf masks give `e = 0`.
    """
    top = jax.lax.stop_gradient(jnp.max(score, axis=1, keepdims=True))
    e = jnp.exp(score - top)
    return jnp.sum(e * kv, axis=1) / jnp.sum(e, axis=1)


def rms_norm(y: Float[Array, "*C d"], eps: float) -> Float[Array, "*C d"]:
    """`y / sqrt(mean(y^2) + eps)` over the last axis (RMSNorm with unit weight)."""
    return y / jnp.sqrt(jnp.mean(y * y, axis=-1, keepdims=True) + eps)


def interleaved_rope(
    y: Float[Array, "C r"], positions: Float[Array, " C"], theta: float = ROPE_THETA
) -> Float[Array, "C r"]:
    """Rotate pairs `(2i, 2i+1)` of `y[c]` by `positions[c] * theta**(-2i/r)` (RoPE, interleaved)."""
    rope_dim = y.shape[-1]
    freqs = rope_frequencies(rope_dim, theta, dtype=y.dtype, xp=jnp)
    angles = positions[:, None] * freqs[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    even, odd = y[:, 0::2], y[:, 1::2]
    rotated = jnp.stack([even * cos - odd * sin, even * sin + odd * cos], axis=-1)
    return rotated.reshape(y.shape)


_interleaved_rope = interleaved_rope  # the name `idealized.toy.model` imports


def deepseek_v4(
    x: Float[Array, "T dim"],
    wkv: Float[Array, "dim cd"],
    wgate: Float[Array, "dim cd"],
    ape: Float[Array, "ratio cd"],
    *,
    ratio: int,
    eps: float = 1e-6,
    rope_dim: int = 0,
    rope_theta: float = ROPE_THETA,
    overlap: bool | None = None,
) -> Float[Array, "C d"]:
    """Compress `T` tokens into `T // ratio` keys the way DeepSeek-V4's Compressor does.

    Arguments:
        x: `(T, dim)` token features; `T` a positive multiple of `ratio`.
        wkv, wgate: `(dim, coff * head_dim)` value and gate projections (`x @ W`), with
            `coff = 2` with overlapping windows and `1` otherwise.
        ape: `(ratio, coff * head_dim)` learned per-position bias added to the gate score.
        ratio: tokens per block (static).
        eps: RMSNorm epsilon.
        rope_dim: number of trailing channels rotated by RoPE (even, `<= head_dim`;
            0 disables it).
        rope_theta: RoPE base; pair `i` turns at frequency `rope_theta**(-2i/rope_dim)`.
        overlap: pool overlapping windows of `2 * ratio` tokens (static); by default
            DeepSeek-V4's choice, overlap exactly when `ratio == 4`.

    Returns:
        `(T // ratio, head_dim)` compressed keys `K[c]`:

            w[c, p, ch] = softmax_p(score[c, p, ch] + ape[p, ch])
            K[c, ch]    = RoPE_{c * ratio}(RMSNorm(sum_p w[c, p, ch] kv[c, p, ch]))

        where for `ratio == 4` the window `p` runs over 8 slots (previous block through
        columns `[:head_dim]`, own block through `[head_dim:]`; block 0's previous slots
        masked), and otherwise over the block's own `ratio` tokens.

    Raises:
        ValueError: on inconsistent shapes, `T` not a positive multiple of `ratio`, or a
            bad `rope_dim`. Checks use static shapes only, so the function jits and vmaps.
    """
    if not isinstance(ratio, int) or ratio < 1:
        raise ValueError(f"ratio must be a positive int, got {ratio!r}")
    if x.ndim != 2:
        raise ValueError(f"x must be (T, dim), got shape {x.shape}")
    T, dim = x.shape
    if T == 0 or T % ratio != 0:
        raise ValueError(f"T = {T} tokens is not a positive multiple of ratio = {ratio}")
    if overlap is None:
        overlap = ratio == OVERLAP_RATIO
    coff = 2 if overlap else 1
    if wkv.ndim != 2 or wkv.shape[0] != dim or wkv.shape[1] % coff != 0:
        raise ValueError(
            f"wkv must be (dim, coff*head_dim) = ({dim}, {coff}*head_dim) for overlap={overlap}, "
            f"got {wkv.shape}"
        )
    width = wkv.shape[1]
    head_dim = width // coff
    if wgate.shape != wkv.shape:
        raise ValueError(f"wgate must have the shape of wkv {wkv.shape}, got {wgate.shape}")
    if ape.shape != (ratio, width):
        raise ValueError(f"ape must be (ratio, coff*head_dim) = {(ratio, width)}, got {ape.shape}")
    if rope_dim < 0 or rope_dim % 2 != 0 or rope_dim > head_dim:
        raise ValueError(f"rope_dim must be even and in [0, head_dim={head_dim}], got {rope_dim}")

    n_blocks = T // ratio
    kv = (x @ wkv).reshape(n_blocks, ratio, width)
    score = (x @ wgate).reshape(n_blocks, ratio, width) + ape[None]
    if coff == 2:
        kv = _overlap_window(kv, head_dim, 0.0)
        score = _overlap_window(score, head_dim, -jnp.inf)
    pooled = _window_pool(score, kv)

    keys = rms_norm(pooled, eps)
    if rope_dim:
        positions = jnp.arange(n_blocks, dtype=keys.dtype) * ratio
        rotated = interleaved_rope(keys[:, head_dim - rope_dim :], positions, rope_theta)
        keys = jnp.concatenate([keys[:, : head_dim - rope_dim], rotated], axis=1)
    return keys


def ape_pooling_weights(
    ape: Float[Array, "*B ratio cd"], overlap: bool
) -> Float[Array, "*B ratio"]:
    """Own-block window weights from `ape` alone (gate excluded), averaged over channels.

    With overlap the window is `[previous block | own block]` over `2 * ratio` slots, and
    the own block's share is returned (it sums to less than one). Leading axes (heads,
    runs) are batch axes.
    """
    ratio = ape.shape[-2]
    if overlap:
        dim = ape.shape[-1] // 2
        window = jnp.concatenate([ape[..., :dim], ape[..., dim:]], axis=-2)
        weights = jax.nn.softmax(window, axis=-2)[..., ratio:, :]
    else:
        weights = jax.nn.softmax(ape, axis=-2)
    return jnp.mean(weights, axis=-1)

"""The pieces both decoder attention layers share (`idealized.decoder.attention`'s `Attention`,
`idealized.decoder.v4_attention`'s `V4Attention`): RoPE on heads, the visibility masks of
compressed entries and of the local window, the banded local branch, the dense layout of
the attention weights and the masked softmax with its hand-written backward.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from weakspots.idealized.deepseek_v4 import interleaved_rope
from weakspots.idealized.operators.base import Entries, Heads
from weakspots.idealized.rope import ROPE_THETA

MASKED = -1e30  # a finite "minus infinity": rows with nothing visible stay finite (output 0)


def rotate(
    y: Heads, positions: Float[Array, " T"], rope_dim: int, theta: float = ROPE_THETA
) -> Heads:
    """RoPE (interleaved pairs, base `theta`) on the last `rope_dim` channels of every head,
    token `i` at `positions[i]`."""
    if rope_dim == 0:
        return y
    batch, length, heads, width = y.shape
    tail = y[..., width - rope_dim :].transpose(1, 0, 2, 3).reshape(length, -1, rope_dim)
    turn = lambda rows: interleaved_rope(rows, positions, theta)  # noqa: E731
    rotated = jax.vmap(turn, in_axes=1, out_axes=1)(tail)
    rotated = rotated.reshape(length, batch, heads, rope_dim).transpose(1, 0, 2, 3)
    return jnp.concatenate([y[..., : width - rope_dim], rotated], axis=-1)


def compressed_visibility(length: int, stride: int) -> Float[Array, "T C"]:
    """`mask[t, w] = w < (t + 1) // s`: a query sees only complete windows."""
    t = jnp.arange(length, dtype=jnp.int32)[:, None]
    w = jnp.arange(length // stride, dtype=jnp.int32)[None, :]
    return w < (t + 1) // stride


def staggered_visibility(length: int, stride: int, offsets) -> Float[Array, "H T C"]:
    """`mask[h, t, w] = o_h + (w + 1) s - 1 <= t`: head h's entry w once its window is complete.

    With every offset 0 each head's mask is `compressed_visibility(length, stride)`.
    """
    t = jnp.arange(length, dtype=jnp.int32)[None, :, None]
    w = jnp.arange(length // stride, dtype=jnp.int32)[None, None, :]
    last = jnp.asarray(offsets, jnp.int32)[:, None, None] + (w + 1) * stride - 1
    return last <= t


def shift_heads(y: Heads, offsets) -> Heads:
    """Head h's tokens moved `o_h` positions earlier, zeros after the end: `y'[:, t, h] = y[:, t + o_h, h]`."""
    shifted = [
        jnp.pad(y[:, o:, h], ((0, 0), (0, o), (0, 0))) if o else y[:, :, h]
        for h, o in enumerate(offsets)
    ]
    return jnp.stack(shifted, axis=2)


def rotate_staggered(entries: Entries, stride: int, offsets, rope_dim: int) -> Entries:
    """RoPE on head h's entry w at its window's first position `o_h + w s`."""
    starts = jnp.arange(entries.shape[1], dtype=jnp.float32) * stride
    heads = [rotate(entries[:, :, h : h + 1], starts + o, rope_dim) for h, o in enumerate(offsets)]
    return jnp.concatenate(heads, axis=2)


def local_visibility(length: int, window: int) -> Float[Array, "T T"]:
    """`mask[t, u] = 0 <= t - u < window`: the last `window` tokens, the query's own included."""
    t = jnp.arange(length, dtype=jnp.int32)[:, None]
    u = jnp.arange(length, dtype=jnp.int32)[None, :]
    return (u <= t) & (t - u < window)


def _blocks(length: int, window: int) -> tuple[int, int]:
    """Block size and block count of the banded local branch: blocks of `min(window, T)` queries."""
    size = min(window, length)
    return size, -(-length // size)


def local_band_visibility(length: int, window: int) -> Float[Array, "T 2W"]:
    """The local mask in the banded layout of `local_keys`: query `t` in block `i = t // W`
    holds in slot `j` the key `u = (i - 1) W + j`; visible when `0 <= u` and `0 <= t - u < window`."""
    size, _ = _blocks(length, window)
    t = jnp.arange(length, dtype=jnp.int32)[:, None]
    u = (t // size - 1) * size + jnp.arange(2 * size, dtype=jnp.int32)[None, :]
    return (u >= 0) & (u <= t) & (t - u < window)


def cut_band(length: int, window: int, spans: Int[Array, "B 2"]) -> Bool[Array, "B T 2W"]:
    """The edges a span cut removes, in the banded layout of `local_band_visibility`: query `t`
    after its row's span `[lo, hi]` reading a key `u` inside it (`t > hi`, `lo <= u <= hi`)."""
    size, _ = _blocks(length, window)
    t = jnp.arange(length, dtype=jnp.int32)[:, None]
    u = (t // size - 1) * size + jnp.arange(2 * size, dtype=jnp.int32)[None, :]
    lo, hi = spans[:, 0, None, None], spans[:, 1, None, None]
    return (t[None] > hi) & (u[None] >= lo) & (u[None] <= hi)


def local_keys(y: Float[Array, "B H T hd"], window: int) -> Float[Array, "B H n 2W hd"]:
    """The keys (or values) each block of W queries may see: its own block and the one before.

    `T` is padded to `n W` (`W = min(window, T)`) and one block of zeros goes in front, so
    block `i` holds tokens `(i - 1) W ... (i + 1) W - 1`.
    """
    size, count = _blocks(y.shape[2], window)
    padded = jnp.pad(y, ((0, 0), (0, 0), (size, count * size - y.shape[2]), (0, 0)))
    blocks = padded.reshape(*y.shape[:2], count + 1, size, y.shape[-1])
    return jnp.concatenate([blocks[:, :, :-1], blocks[:, :, 1:]], axis=3)


def _query_blocks(q: Float[Array, "B H T ..."], window: int) -> Float[Array, "B H n W ..."]:
    size, count = _blocks(q.shape[2], window)
    pad = [(0, 0), (0, 0), (0, count * size - q.shape[2])] + [(0, 0)] * (q.ndim - 3)
    return jnp.pad(q, pad).reshape(*q.shape[:2], count, size, *q.shape[3:])


def local_scores(
    q: Float[Array, "B H T hd"], k: Float[Array, "B H T hd"], window: int
) -> Float[Array, "B H T 2W"]:
    """`q . k` of each query against the 2W keys of its band (`local_keys`); mask with
    `local_band_visibility`. Exact: the band holds every key of the last `window` tokens."""
    scores = jnp.einsum("bhnqd,bhnkd->bhnqk", _query_blocks(q, window), local_keys(k, window))
    return scores.reshape(*scores.shape[:2], -1, scores.shape[-1])[:, :, : q.shape[2]]


def local_mix(probs: Float[Array, "B H T 2W"], v: Float[Array, "B H T hd"], window: int) -> Heads:
    """The banded attention weights applied to the values, as `(B, T, H, hd)`."""
    mixed = jnp.einsum("bhnqk,bhnkd->bnqhd", _query_blocks(probs, window), local_keys(v, window))
    return mixed.reshape(mixed.shape[0], -1, *mixed.shape[3:])[:, : v.shape[2]]


def band_to_dense(probs: Float[Array, "B H T 2W"], window: int) -> Float[Array, "B H T T"]:
    """Banded local weights scattered to the dense layout `[t, u]` (zero outside the band)."""
    length = probs.shape[2]
    size, _ = _blocks(length, window)
    t = jnp.arange(length, dtype=jnp.int32)[:, None]
    slot = jnp.arange(length, dtype=jnp.int32)[None, :] - (t // size - 1) * size
    inside = (slot >= 0) & (slot < 2 * size)
    dense = jnp.take_along_axis(probs, jnp.clip(slot, 0, 2 * size - 1)[None, None], axis=-1)
    return jnp.where(inside, dense, 0.0)


def dense_weights(parts: list[Array], local_window: int) -> Float[Array, "B H T K"]:
    """Attention weights in the dense layout: the compressed entries' parts, then the local
    band's (last, when `local_window`) spread over all T tokens."""
    parts = list(parts)
    if local_window:
        parts[-1] = band_to_dense(parts[-1], local_window)
    return jnp.concatenate(parts, axis=-1)


def _masked_exp(scores, mask):
    scores = jnp.where(mask, scores, MASKED)
    e = jnp.exp(scores - jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True)))
    e = jnp.where(mask, e, 0.0)
    return e, jnp.sum(e, axis=-1, keepdims=True)


@jax.custom_vjp
def masked_softmax(scores: Float[Array, "... K"], mask) -> Float[Array, "... K"]:
    """Softmax over the visible entries; a row with none visible is all zeros.

    Its backward is autodiff's of this forward, operation for operation (so gradients are
    the same to the bit), written out so that it keeps only `e` and the row sums from the
    forward and reads no mask: where an entry is masked, `e` is 0 and so is its gradient."""
    return _masked_softmax_forward(scores, mask)[0]


def _masked_softmax_forward(scores, mask):
    e, total = _masked_exp(scores, mask)
    return e / jnp.where(total > 0, total, 1.0), (e, total)


def _masked_softmax_backward(residuals, g):
    # autodiff of `e / d` (jax's div rule: g / d, and -(g d^-2) e summed into d), then `exp`'s
    # rule (times e); the same operations in the same order, so the same rounding
    e, total = residuals
    visible = total > 0
    d = jnp.where(visible, total, 1.0)
    g_total = jnp.where(
        visible, jnp.sum(-((g * jax.lax.integer_pow(d, -2)) * e), -1, keepdims=True), 0.0
    )
    return (g / d + g_total) * e, None


masked_softmax.defvjp(_masked_softmax_forward, _masked_softmax_backward)

"""Compressed causal attention as a flax.nnx layer (the decoder family's attention).

Each head's keys and values are packed every `s` tokens into one entry by a compressor
that applies a registered operator of `idealized.operators` window by window, so the toy
and the decoder share one definition of each operator. A
query at position `t` sees entry `w` only when its window is complete,
`w < (t + 1) // s`, plus (optionally) the last `local_window` tokens uncompressed; one
softmax runs over both. RoPE rotates queries and local keys to their own positions and
each compressed key to its window's first position, `w * s`. The operator `none`
keeps every token, which makes the layer standard causal attention (the dense control).

Staggered windows (`stagger_offsets`, as the toy's `stagger`): head h's windows start at
`o_h + w s`, `o_h = h s // H`. The first `o_h` tokens make no entry of head h (they stay
readable through the local branch, as a last partial window is), so head h has `C - 1`
complete windows when `o_h > 0`; its entry slot `C - 1` is padding no query sees. Entry
`w` of head h is visible from `t` when its last token is, `o_h + (w + 1) s - 1 <= t`, and
its key is rotated to its window's first position `o_h + w s`.

Shapes: B sequences, T tokens, D model width, H heads, hd head width, C = T // s entries.

Selection (`index_topk > 0`, no stagger): DeepSeek-V4's Lightning Indexer
(`idealized.decoder.v4_attention.LightningIndexer`, with its own overlapping V4 compressor)
scores every entry for every query from the detached layer input, and the compressed branch
reads only the visible entries among each query's top `index_topk`, as V4's csa layer
(`V4Attention`) does; the choice passes no gradient, the indexer learns from its KL to the
main attention (`indexer_kl`, captured as `IndexerStat`).

Everything a study may want to change is an attribute: `compressor` (replace it),
`local_window`, `rope_compressed`, `use_compressed` (switch a branch off), `indexer` (None:
every visible entry read), `hidden_entries` (`(B, C)`, True: the entry is hidden from every
query and from the indexer) and `cut_spans` (`(B, 2)` token spans `[lo, hi]`: no query after
`hi` reads a token of its span through the local branch). Inside
`nnx.capture(..., nnx.Intermediate)` (see `idealized.decoder.model.trace`) the layer sows its
compressed entries, attention weights and, with an indexer, the entries it kept
(`idealized.decoder.sow`).
"""

from __future__ import annotations

import abc

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float, Int

from weakspots.idealized.decoder.sow import sow
from weakspots.idealized.deepseek_v4 import interleaved_rope
from weakspots.idealized.operators.base import DECODER, Entries, Heads
from weakspots.idealized.operators.registry import lookup
from weakspots.idealized.rope import ROPE_THETA
from weakspots.idealized.stagger import stagger_offsets as stagger_offsets

Tokens = Float[Array, "B T D"]
MASKED = -1e30  # a finite "minus infinity": rows with nothing visible stay finite (output 0)


class AbstractCompressor(nnx.Module):
    """Per-head compression of a sequence's keys and values, `(B, T, H, hd)` to `(B, T//s, H, hd)`."""

    stride: int

    @abc.abstractmethod
    def __call__(self, x: Tokens, keys: Heads, values: Heads) -> tuple[Entries, Entries]:
        """Compressed keys and values (keys before RoPE) from the layer input `x` and its heads."""

    def pooling_weights(self) -> Float[Array, "H s"] | None:
        """Each head's weight per phase where the operator has one, else None."""
        return None


class Compressor(AbstractCompressor):
    """A registered operator's decoder form (`idealized.operators`), for one layer.

    Its parameters (`AbstractOperator.decoder_params`) are `nnx.Param` attributes named as
    the operator's fields (`compressor.pooling_logits`, `.ape`, ...: the paths checkpoints
    and interventions use). `operator = none` keeps every token (stride 1): the dense control.
    """

    def __init__(
        self,
        operator: str,
        *,
        stride: int,
        heads: int,
        d_model: int,
        head_dim: int,
        rank: int = 4,
        overlap: bool = False,
        rngs: nnx.Rngs,
    ):
        spec = lookup(operator, DECODER)
        self.operator, self.heads, self.overlap = operator, heads, overlap
        self.stride = 1 if spec.dense else stride
        sizes = dict(heads=heads, d_model=d_model, head_dim=head_dim, rank=rank, overlap=overlap)
        params = spec.decoder_params(stride=self.stride, rngs=rngs, **sizes)
        self.parameter_names = tuple(params)
        for name, value in params.items():  # named attributes: the state's paths
            setattr(self, name, nnx.Param(value))

    def _params(self) -> dict[str, jax.Array]:
        return {name: getattr(self, name)[...] for name in self.parameter_names}

    def __call__(self, x, keys, values):
        return lookup(self.operator).decoder_pool(
            self._params(), x, keys, values, stride=self.stride, overlap=self.overlap
        )

    def pooling_weights(self):
        return lookup(self.operator).decoder_pooling_weights(
            self._params(), stride=self.stride, heads=self.heads, overlap=self.overlap
        )


def make_compressor(operator: str, **sizes) -> AbstractCompressor:
    """A fresh compressor by operator name (the registry's decoder operators; `sizes` are
    `Compressor`'s keyword arguments); a `ConfigError` on an unknown one."""
    return Compressor(operator, **sizes)


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


def staggered_entries(
    compressor: AbstractCompressor, x: Tokens, keys: Heads, values: Heads, offsets
) -> tuple[Entries, Entries]:
    """The compressor applied to head h's windows `[o_h + w s, o_h + (w + 1) s)`, `(B, C, H, hd)`.

    Entries of windows that run past the sequence are computed from zero padding; no query
    sees them (`staggered_visibility`). Operators that pool the layer input (deepseek_v4)
    are not staggered.
    """
    return compressor(x, shift_heads(keys, offsets), shift_heads(values, offsets))


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


class Attention(nnx.Module):
    """Multi-head causal attention over compressed entries and/or a local window of tokens.

    Arguments:
        d_model, heads: model width D and heads H (head width `D // H`).
        compressor: the compressed branch (`None`: no compressed branch; operator `none`: dense).
        local_window: the uncompressed branch sees the last `local_window` tokens (0: none).
        rope_dim: RoPE channels per head.
        stagger: head h's compressed windows start `h s // H` tokens later (module docstring).
        index_topk: compressed entries each query keeps by DeepSeek-V4's Lightning Indexer
            (0: no indexer, every visible entry read; not with `stagger`).
        index_heads, index_dim: the indexer's heads and head width; its RoPE covers
            `min(rope_dim, index_dim)` channels (even), base `ROPE_THETA`.
        index_pairs: each kept entry read with the one before it (not V4's;
            `v4_attention.paired_entries`).

    Call: `x (B, T, D) -> (B, T, D)`; `T` a multiple of the compressor's stride. Sows
    `compressed_keys`, `compressed_values` (B, C, H, hd, keys before RoPE), `attention`
    (B, H, T, K) and, with an indexer, `selected` (B, T, C bool: the entries kept per query).
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        *,
        compressor: AbstractCompressor | None,
        local_window: int,
        rope_dim: int,
        stagger: bool = False,
        index_topk: int = 0,
        index_heads: int = 4,
        index_dim: int = 16,
        index_pairs: bool = False,
        rngs: nnx.Rngs,
    ):
        if compressor is None and local_window == 0:
            raise ValueError("attention needs a compressed branch or a local window")
        if index_topk and (compressor is None or stagger):
            raise ValueError("the indexer selects unstaggered compressed entries: needs a "
                             "compressor and no stagger")  # fmt: skip
        self.heads, self.head_dim = heads, d_model // heads
        self.rope_dim = rope_dim
        linear = lambda: nnx.Linear(d_model, d_model, use_bias=False, rngs=rngs)  # noqa: E731
        self.query, self.key, self.value, self.out = linear(), linear(), linear(), linear()
        self.compressor = compressor
        self.local_window = local_window
        self.use_compressed = compressor is not None
        self.rope_compressed = True
        self.hidden_entries = self.cut_spans = None
        stride = compressor.stride if compressor is not None else 1
        self.offsets = stagger_offsets(stride, heads) if stagger else None
        self.index_topk, self.index_pairs = index_topk, index_pairs
        if index_topk:  # last: the parameters above draw as in a layer without an indexer
            # imported here: v4_attention imports this module
            from weakspots.idealized.decoder.v4_attention import LightningIndexer

            width = min(rope_dim, index_dim - index_dim % 2)
            self.indexer = LightningIndexer(
                stride, d_model, d_model, index_heads, index_dim, width, ROPE_THETA, rngs=rngs
            )
        else:
            self.indexer = None

    def _heads(self, y: Tokens) -> Heads:
        return y.reshape(*y.shape[:2], self.heads, self.head_dim)

    def __call__(self, x: Tokens) -> Tokens:
        batch, length, _ = x.shape
        positions = jnp.arange(length, dtype=jnp.float32)
        q = rotate(self._heads(self.query(x)), positions, self.rope_dim)
        k, v = self._heads(self.key(x)), self._heads(self.value(x))
        scores, masks, values = [], [], []
        scale = 1.0 / jnp.sqrt(jnp.float32(self.head_dim))
        if self.use_compressed:
            stride = self.compressor.stride
            if self.offsets is None:
                ck, cv = self.compressor(x, k, v)
            else:
                ck, cv = staggered_entries(self.compressor, x, k, v, self.offsets)
            sow(self, "compressed_keys", lambda: ck)
            sow(self, "compressed_values", lambda: cv)
            if self.rope_compressed and self.offsets is not None:
                ck = rotate_staggered(ck, stride, self.offsets, self.rope_dim)
            elif self.rope_compressed:
                starts = jnp.arange(length // stride, dtype=jnp.float32) * stride
                ck = rotate(ck, starts, self.rope_dim)
            scores.append(jnp.einsum("bthd,bchd->bhtc", q, ck) * scale)
            if self.indexer is not None:
                masks.append(self._selected(x, scores[-1])[:, None])
            elif self.offsets is None:
                masks.append(compressed_visibility(length, stride))
            else:
                masks.append(staggered_visibility(length, stride, self.offsets))
            values.append(cv)
        if self.local_window:
            local_scores, local_mask, local_values = self._local_branch(q, k, v, positions)
            scores.append(local_scores * scale)
            masks.append(local_mask)
        # every mask (B or 1, H or 1, T, K): per-head ones come from staggered windows,
        # per-row ones from the indexer and the edits `hidden_entries` and `cut_spans`
        masks = [m[None, None] if m.ndim == 2 else m[None] if m.ndim == 3 else m for m in masks]
        if self.hidden_entries is not None and self.use_compressed:
            masks[0] = masks[0] & ~self.hidden_entries[:, None, None, :]
        if self.cut_spans is not None and self.local_window:
            masks[-1] = masks[-1] & ~cut_band(length, self.local_window, self.cut_spans)[:, None]
        lead = tuple(max(m.shape[i] for m in masks) for i in (0, 1))
        masks = [jnp.broadcast_to(m, (*lead, *m.shape[-2:])) for m in masks]
        mask = jnp.concatenate(masks, axis=-1)
        probs = masked_softmax(jnp.concatenate(scores, axis=-1), mask)
        splits = [m.shape[-1] for m in masks]
        parts = jnp.split(probs, [sum(splits[: i + 1]) for i in range(len(splits) - 1)], axis=-1)
        sow(self, "attention", lambda: dense_weights(parts, self.local_window))
        heads = sum(
            jnp.einsum("bhtc,bchd->bthd", p, val)
            for p, val in zip(parts[: len(values)], values, strict=True)
        )
        if self.local_window:
            heads = heads + local_mix(parts[-1], local_values, self.local_window)
        return self.out(heads.reshape(batch, length, -1))

    def _selected(self, x: Tokens, logits: Float[Array, "B H T C"]) -> Bool[Array, "B T C"]:
        """The visible entries among each query's top `index_topk` by the indexer's scores
        (hidden entries gone for the indexer too), as `V4Attention` selects them."""
        from weakspots.idealized.decoder.v4_attention import indexer_selection

        visible = compressed_visibility(x.shape[1], self.compressor.stride)
        seen = visible
        if self.hidden_entries is not None:
            seen = visible[None] & ~self.hidden_entries[:, None, :]
        detached = jax.lax.stop_gradient(x)
        index_scores = self.indexer(detached, detached)
        return indexer_selection(
            self, index_scores, logits, visible, seen, self.index_topk, self.index_pairs
        )

    def _local_branch(self, q: Heads, k: Heads, v: Heads, positions):
        """The uncompressed branch in the banded layout (`local_scores`): unscaled scores
        `(B, H, T, 2W)`, their mask `(T, 2W)`, and the values head-major `(B, H, T, hd)`."""
        keys = rotate(k, positions, self.rope_dim).transpose(0, 2, 1, 3)
        scores = local_scores(q.transpose(0, 2, 1, 3), keys, self.local_window)
        mask = local_band_visibility(q.shape[1], self.local_window)
        return scores, mask, v.transpose(0, 2, 1, 3)

    def pooling_weights(self) -> Float[Array, "H s"] | None:
        return self.compressor.pooling_weights() if self.use_compressed else None

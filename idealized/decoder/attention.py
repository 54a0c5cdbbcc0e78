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
from jaxtyping import Array, Bool, Float

# The primitives both attention layers share, re-exported: studies and tests read them here.
from weakspots.idealized.decoder.primitives import MASKED as MASKED
from weakspots.idealized.decoder.primitives import band_to_dense as band_to_dense
from weakspots.idealized.decoder.primitives import compressed_visibility as compressed_visibility
from weakspots.idealized.decoder.primitives import cut_band as cut_band
from weakspots.idealized.decoder.primitives import dense_weights as dense_weights
from weakspots.idealized.decoder.primitives import local_band_visibility as local_band_visibility
from weakspots.idealized.decoder.primitives import local_keys as local_keys
from weakspots.idealized.decoder.primitives import local_mix as local_mix
from weakspots.idealized.decoder.primitives import local_scores as local_scores
from weakspots.idealized.decoder.primitives import local_visibility as local_visibility
from weakspots.idealized.decoder.primitives import masked_softmax as masked_softmax
from weakspots.idealized.decoder.primitives import rotate as rotate
from weakspots.idealized.decoder.primitives import rotate_staggered as rotate_staggered
from weakspots.idealized.decoder.primitives import shift_heads as shift_heads
from weakspots.idealized.decoder.primitives import staggered_visibility as staggered_visibility
from weakspots.idealized.decoder.sow import sow
from weakspots.idealized.decoder.v4_attention import LightningIndexer, indexer_selection
from weakspots.idealized.operators.base import DECODER, Entries, Heads
from weakspots.idealized.operators.registry import lookup
from weakspots.idealized.rope import ROPE_THETA
from weakspots.idealized.stagger import stagger_offsets as stagger_offsets

Tokens = Float[Array, "B T D"]


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


def staggered_entries(
    compressor: AbstractCompressor, x: Tokens, keys: Heads, values: Heads, offsets
) -> tuple[Entries, Entries]:
    """The compressor applied to head h's windows `[o_h + w s, o_h + (w + 1) s)`, `(B, C, H, hd)`.

    Entries of windows that run past the sequence are computed from zero padding; no query
    sees them (`staggered_visibility`). Operators that pool the layer input (deepseek_v4)
    are not staggered.
    """
    return compressor(x, shift_heads(keys, offsets), shift_heads(values, offsets))


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

"""DeepSeek-V4's attention as a flax.nnx layer, every part a switch (`docs/v4_attention.md`).

One layer of kind `sliding` (the last `window` tokens only), `csa` (compressed sparse
attention: entries of overlapping windows of `2 m` tokens every `m`, a Lightning Indexer
keeping each query's top-k entries) or `hca` (heavily compressed attention: entries of
disjoint windows of `m'` tokens, no indexer), as `DeepseekV4Attention` of transformers'
`models/deepseek_v4` computes it with no cache (`weakspots.interop.hf` loads its weights
here and the tests agree with it):

* queries: `q_a -> RMSNorm -> q_b` (the low-rank path, `q_rank > 0`) or one projection,
  then, with `qk_norm`, an unweighted RMSNorm per head;
* keys = values: `kv_heads` heads (`shared_kv`: one, multi-query; otherwise one per query
  head) of one projection, RMS-normalised with `qk_norm`; RoPE on the last `rope_dim`
  channels at the token's position, base `rope_theta`;
* compressed entries (`csa`, `hca`): per KV head, `idealized.deepseek_v4`'s gated
  per-channel softmax pool with position bias (`overlap` for CSA), RMSNorm with a learned
  weight, RoPE at the window's first position `w m`; visible from `t` when
  `w < (t + 1) // m`;
* the indexer (`csa`, `index_topk > 0`): its own compressor at `index_dim`, queries
  `index_heads` x `index_dim` from the query path, scores
  `I[t, w] = sum_h wt_h(x_t) relu(q_h(t) . k_w) / sqrt(index_dim n_I)`; the main
  attention sees only the visible entries among each query's top `index_topk` (no
  gradient through the choice);
* one softmax over the local window (`local_window` tokens, the query's own included),
  the compressed entries and, with `sink`, a learned per-head logit that takes mass but
  carries no value; scale `head_dim ** -0.5`;
* the output's rope slice rotated back by the query's position (the values carry RoPE,
  K = V), then `o_groups` groups of heads each projected to `o_rank`, then mixed to `D`
  (`o_groups = 0`: one projection).

Edits set `hidden_entries` `(B, C)` (those entries gone for the indexer and the attention)
and `cut_spans` `(B, 2)` (the local branch's edges from later queries into each row's span
cut), as in `idealized.decoder.attention`.

Inside `nnx.capture(..., nnx.Intermediate)` the layer sows (`idealized.decoder.sow`)
`attention` (B, H, T, C + T: compressed entries, then the local tokens in the dense
layout), `compressed_keys` / `compressed_values` (B, C, H, hd, before RoPE) and, with an
indexer, `selected` (B, T, C bool: the entries each query's top-k keeps); inside
`nnx.capture(..., IndexerStat)` it sows `indexer_kl` and `indexer_recall`
(`indexer_statistics`), which the trainer adds to its loss (`indexer_selection`, shared
with the project's `compressed` layer).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float

from weakspots.idealized.decoder.primitives import (
    MASKED,
    compressed_visibility,
    cut_band,
    dense_weights,
    local_band_visibility,
    local_mix,
    local_scores,
    masked_softmax,
    rotate,
)
from weakspots.idealized.decoder.sow import capturing, sow
from weakspots.idealized.deepseek_v4 import ape_pooling_weights, deepseek_v4, rms_norm
from weakspots.idealized.operators.base import complete
from weakspots.idealized.rope import ROPE_THETA

V4_LAYER_KINDS = ("sliding", "csa", "hca")
EPS = 1e-6  # DeepSeek-V4's rms_norm_eps

Tokens = Float[Array, "B T D"]
Entries = Float[Array, "B C G hd"]


class IndexerStat(nnx.Intermediate):
    """What the indexer reports for training (`nnx.capture(..., IndexerStat)`): its KL and recall."""


def _normal(rngs: nnx.Rngs, shape, fan_in: int) -> Array:
    return jax.random.normal(rngs.params(), shape, jnp.float32) / jnp.sqrt(jnp.float32(fan_in))


def _linear(d_in: int, d_out: int, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(d_in, d_out, use_bias=False, rngs=rngs)


class WeightedRMSNorm(nnx.Module):
    """`rms_norm(y) * weight` over the last axis, weight `shape` (ones at init), as V4's RMSNorm."""

    def __init__(self, *shape: int):
        self.weight = nnx.Param(jnp.ones(shape, jnp.float32))

    def __call__(self, y):
        weight = self.weight[...]
        return rms_norm(y, EPS) * weight.reshape((1,) * (y.ndim - weight.ndim) + weight.shape)


class V4Compressor(nnx.Module):
    """DeepSeek-V4's compressor per KV head: `(B, T, D)` to `(B, T // m, G, width)` entries (before RoPE).

    Per head g, `wkv`, `wgate` `(D, coff width)` and the position bias `ape` `(m, coff width)`
    (`coff = 2` with `overlap`) feed `idealized.deepseek_v4.deepseek_v4` (the gated
    per-channel softmax pool and its RMSNorm), then the learned norm weight `(G, width)`
    scales it. Gate and bias start at zero (uniform pooling).
    """

    def __init__(self, ratio: int, kv_heads: int, d_model: int, width: int, overlap: bool, *, rngs):
        self.stride, self.overlap = ratio, overlap
        cols = (2 if overlap else 1) * width
        self.wkv = nnx.Param(_normal(rngs, (kv_heads, d_model, cols), d_model))
        self.wgate = nnx.Param(jnp.zeros((kv_heads, d_model, cols), jnp.float32))
        self.ape = nnx.Param(jnp.zeros((kv_heads, ratio, cols), jnp.float32))
        self.norm = WeightedRMSNorm(kv_heads, width)

    def __call__(self, x: Tokens) -> Entries:
        def one(tokens, wkv, wgate, ape):
            return deepseek_v4(
                tokens, wkv, wgate, ape, ratio=self.stride, eps=EPS, overlap=self.overlap
            )

        per_head = jax.vmap(one, in_axes=(None, 0, 0, 0))
        entries = jax.vmap(per_head, in_axes=(0, None, None, None))(
            complete(x, self.stride), self.wkv[...], self.wgate[...], self.ape[...]
        )  # (B, G, C, width)
        return entries.transpose(0, 2, 1, 3) * self.norm.weight[...][None, None]

    def pooling_weights(self) -> Float[Array, "G m"]:
        return ape_pooling_weights(self.ape[...], self.overlap)


class LightningIndexer(nnx.Module):
    """V4's Lightning Indexer: scores `(B, T, C)` of every query against every compressed index key.

    `I[t, w] = sum_h wt_h(x_t) / sqrt(n_I) * relu(q_h(t) . k_w) / sqrt(index_dim)`, with
    `k_w` from its own overlapping compressor (one head, `index_dim` channels, RoPE at
    `w m`) and `q_h(t)` projected from the query path's input (RoPE at `t`).
    """

    def __init__(
        self,
        ratio: int,
        d_model: int,
        query_input: int,
        heads: int,
        width: int,
        rope_dim: int,
        rope_theta: float,
        *,
        rngs,
    ):
        self.heads, self.width, self.rope_dim, self.rope_theta = heads, width, rope_dim, rope_theta
        self.compressor = V4Compressor(ratio, 1, d_model, width, True, rngs=rngs)
        self.query = _linear(query_input, heads * width, rngs)
        self.head_weights = _linear(d_model, heads, rngs)

    def __call__(self, x: Tokens, query_input: Float[Array, "B T r"]) -> Float[Array, "B T C"]:
        batch, length, _ = x.shape
        stride = self.compressor.stride
        keys = self.compressor(x)[:, :, 0]  # (B, C, width)
        starts = jnp.arange(keys.shape[1], dtype=jnp.float32) * stride
        keys = rotate(keys[:, :, None], starts, self.rope_dim, self.rope_theta)[:, :, 0]
        q = self.query(query_input).reshape(batch, length, self.heads, self.width)
        q = rotate(q, jnp.arange(length, dtype=jnp.float32), self.rope_dim, self.rope_theta)
        scores = jax.nn.relu(jnp.einsum("bthd,bcd->bthc", q, keys)) / jnp.sqrt(
            jnp.float32(self.width)
        )
        weights = self.head_weights(x) / jnp.sqrt(jnp.float32(self.heads))  # (B, T, n_I)
        return jnp.einsum("bthc,bth->btc", scores, weights)


def top_k_mask(scores: Float[Array, "B T C"], visible: Bool[Array, "T C"], k: int):
    """The visible entries among each query's `k` highest scores (future entries never count).

    `visible` `(T, C)`, or `(B, T, C)` per row."""
    k = min(k, scores.shape[-1])
    visible = visible if visible.ndim == 3 else visible[None]
    masked = jnp.where(visible, scores, -jnp.inf)
    _, picks = jax.lax.top_k(masked, k)
    chosen = jnp.sum(jax.nn.one_hot(picks, scores.shape[-1], dtype=jnp.int32), axis=-2) > 0
    return chosen & visible


def indexer_statistics(
    main_logits: Float[Array, "B H T C"],
    index_scores: Float[Array, "B T C"],
    visible: Bool[Array, "T C"],
    k: int,
) -> tuple[Array, Array]:
    """The indexer's training loss and recall against the main attention, as DeepSeek trains it.

    `p[t] = mean_h softmax_visible(main_logits[h, t])` (stop-gradient: the main attention's
    distribution over the visible compressed entries, as if it saw them all) is the target;
    `KL(p[t] || softmax_visible(index_scores[t]))` averaged over queries that see an entry
    is the loss. Recall: the fraction of the `k` entries with the largest `p[t]` that the
    indexer's top `k` also holds, over queries that see more than `k` entries (1 where none
    does: nothing was left out).
    """
    target = jax.lax.stop_gradient(jnp.mean(masked_softmax(main_logits, visible[None, None]), 1))
    seen = jnp.any(visible, axis=-1)  # (T,)
    log_q = jax.nn.log_softmax(jnp.where(visible[None], index_scores, MASKED), axis=-1)
    terms = jnp.where(visible[None], target * (jnp.log(jnp.maximum(target, 1e-30)) - log_q), 0.0)
    kl = jnp.sum(jnp.sum(terms, -1) * seen[None]) / jnp.maximum(
        seen.sum() * index_scores.shape[0], 1
    )
    main = top_k_mask(target, visible, k)
    found = top_k_mask(index_scores, visible, k)
    contested = (jnp.sum(visible, -1) > min(k, visible.shape[-1]))[None]  # (1, T)
    hits = jnp.sum(main & found, -1) / jnp.maximum(jnp.sum(main, -1), 1)
    rows = jnp.sum(contested) * index_scores.shape[0]
    recall = jnp.where(rows > 0, jnp.sum(hits * contested) / jnp.maximum(rows, 1), 1.0)
    return kl, recall


def paired_entries(
    selected: Bool[Array, "B T C"], seen: Bool[Array, "T C"] | Bool[Array, "B T C"]
) -> Bool[Array, "B T C"]:
    """`selected` with the entry before each selected one added where `seen`: entry c - 1
    is read whenever entry c is (with overlapping windows, both entries that pool window
    c - 1 are then read together; `V4Switches.indexer_pairs`)."""
    before = jnp.pad(selected[..., 1:], [(0, 0)] * (selected.ndim - 1) + [(0, 1)])
    return (selected | before) & (seen if seen.ndim == 3 else seen[None])


def indexer_selection(
    module: nnx.Module,
    index_scores: Float[Array, "B T C"],
    main_logits: Float[Array, "B H T C"],
    visible: Bool[Array, "T C"],
    seen: Bool[Array, "T C"] | Bool[Array, "B T C"],
    k: int,
    pairs: bool = False,
) -> Bool[Array, "B T C"]:
    """The entries the main attention of `module` reads: `top_k_mask(index_scores, seen, k)`,
    each with the entry before it when `pairs` (`paired_entries`).

    `visible` is the causal mask, `seen` it less the entries an edit hides. Sows the mask
    as `selected` (`nnx.Intermediate`) and, inside `nnx.capture(..., IndexerStat)`,
    `indexer_kl` and `indexer_recall` (`indexer_statistics` of the main logits over `visible`).
    The layers with an indexer (`V4Attention`, the project's `Attention`) share it.
    """
    selected = top_k_mask(index_scores, seen, k)
    if pairs:
        selected = paired_entries(selected, seen)
    sow(module, "selected", lambda: selected)
    if capturing(module, IndexerStat):
        kl, recall = indexer_statistics(main_logits, index_scores, visible, k)
        module.sow(IndexerStat, "indexer_kl", kl)
        module.sow(IndexerStat, "indexer_recall", recall)
    return selected


class V4Attention(nnx.Module):
    """DeepSeek-V4's attention layer (module docstring), `x (B, T, D) -> (B, T, D)`.

    Arguments:
        d_model, heads, head_dim: model width D, query heads H, head width hd.
        kind: `sliding`, `csa` or `hca` (`V4_LAYER_KINDS`).
        ratio: tokens per compressed entry m (csa, hca).
        local_window: tokens of the uncompressed branch (the query's own included; 0: none,
            not for `sliding`).
        rope_dim: RoPE channels at the end of each head (even; <= index_dim with an indexer).
        rope_theta: RoPE base of this layer (V4: 10000 sliding, `compress_rope_theta` else).
        shared_kv: one KV head for all queries (else one per query head).
        qk_norm: unweighted RMSNorm per query head, weighted RMSNorm on the KV heads.
        sink: a learned per-head sink logit in the softmax.
        index_topk: entries each query keeps by the indexer (csa; 0: no indexer, all visible).
        index_heads, index_dim: the indexer's heads and head width.
        index_pairs: not V4's: each kept entry read with the one before it (`paired_entries`).
        q_rank: rank of the low-rank query path (0: one projection).
        o_groups, o_rank: grouped low-rank output projection (0: one projection).
        separate_values: not V4's: values from a projection (and compressor) of their own,
            without RoPE, in place of K = V (a diagnostic).
    """

    def __init__(
        self,
        d_model: int,
        heads: int,
        head_dim: int,
        *,
        kind: str,
        ratio: int = 4,
        local_window: int = 0,
        rope_dim: int = 0,
        rope_theta: float = ROPE_THETA,
        shared_kv: bool = True,
        qk_norm: bool = True,
        sink: bool = True,
        index_topk: int = 0,
        index_heads: int = 4,
        index_dim: int = 16,
        index_pairs: bool = False,
        q_rank: int = 0,
        o_groups: int = 0,
        o_rank: int = 0,
        separate_values: bool = False,
        rngs: nnx.Rngs,
    ):
        if kind not in V4_LAYER_KINDS:
            raise ValueError(f"kind is one of {V4_LAYER_KINDS}, got {kind!r}")
        if kind == "sliding" and local_window < 1:
            raise ValueError("a sliding layer needs local_window >= 1")
        if o_groups and heads % o_groups:
            raise ValueError(f"o_groups ({o_groups}) must divide heads ({heads})")
        self.kind, self.heads, self.head_dim = kind, heads, head_dim
        self.kv_heads = 1 if shared_kv else heads
        self.local_window, self.rope_dim, self.rope_theta = local_window, rope_dim, rope_theta
        self.qk_norm, self.o_groups = qk_norm, o_groups
        self.hidden_entries = self.cut_spans = None  # edits (`idealized.decoder.attention`)
        self.index_topk = index_topk if kind == "csa" else 0
        self.index_pairs = index_pairs
        if q_rank:
            self.q_a = _linear(d_model, q_rank, rngs)
            self.q_a_norm = WeightedRMSNorm(q_rank)
            self.q_b = _linear(q_rank, heads * head_dim, rngs)
        else:
            self.q_a = self.q_a_norm = None
            self.q_b = _linear(d_model, heads * head_dim, rngs)
        self.kv = _linear(d_model, self.kv_heads * head_dim, rngs)
        self.kv_norm = WeightedRMSNorm(self.kv_heads, head_dim) if qk_norm else None
        self.sinks = nnx.Param(jnp.zeros((heads,), jnp.float32)) if sink else None
        if kind == "sliding":
            self.compressor = None
        else:
            overlap = kind == "csa"
            self.compressor = V4Compressor(
                ratio, self.kv_heads, d_model, head_dim, overlap, rngs=rngs
            )
        if self.index_topk:
            self.indexer = LightningIndexer(
                ratio, d_model, q_rank or d_model, index_heads, index_dim, rope_dim, rope_theta,
                rngs=rngs,
            )  # fmt: skip
        else:
            self.indexer = None
        # Not V4's (K = V there): a value projection, and compressor, of their own.
        self.v = _linear(d_model, self.kv_heads * head_dim, rngs) if separate_values else None
        self.v_compressor = (
            V4Compressor(ratio, self.kv_heads, d_model, head_dim, kind == "csa", rngs=rngs)
            if separate_values and self.compressor is not None
            else None
        )
        if o_groups:
            group_in = heads * head_dim // o_groups
            self.o_a = nnx.Param(_normal(rngs, (o_groups, group_in, o_rank), group_in))
            self.o_b = _linear(o_groups * o_rank, d_model, rngs)
        else:
            self.o_a = None
            self.o_b = _linear(heads * head_dim, d_model, rngs)

    @property
    def stride(self) -> int:
        return self.compressor.stride if self.compressor is not None else 1

    def _per_query_head(self, y: Float[Array, "B N G hd"]) -> Float[Array, "B N H hd"]:
        return jnp.broadcast_to(y, (*y.shape[:2], self.heads, y.shape[-1]))

    def __call__(self, x: Tokens) -> Tokens:
        batch, length, _ = x.shape
        hd = self.head_dim
        positions = jnp.arange(length, dtype=jnp.float32)
        turn = lambda y, at: rotate(y, at, self.rope_dim, self.rope_theta)  # noqa: E731
        query_input = self.q_a_norm(self.q_a(x)) if self.q_a is not None else x
        q = self.q_b(query_input).reshape(batch, length, self.heads, hd)
        if self.qk_norm:
            q = rms_norm(q, EPS)
        q = turn(q, positions)
        kv = self.kv(x).reshape(batch, length, self.kv_heads, hd)
        if self.kv_norm is not None:
            kv = self.kv_norm(kv)
        kv = self._per_query_head(turn(kv, positions))
        values = kv  # K = V, RoPE'd
        if self.v is not None:
            values = self._per_query_head(self.v(x).reshape(batch, length, self.kv_heads, hd))
        scale = 1.0 / jnp.sqrt(jnp.float32(hd))
        scores, masks = [], []
        entries = None
        if self.compressor is not None and length >= self.stride:
            entries = self.compressor(x)  # (B, C, G, hd)
            sow(self, "compressed_keys", lambda: self._per_query_head(entries))
            raw_values = self.v_compressor(x) if self.v_compressor is not None else entries
            sow(self, "compressed_values", lambda: self._per_query_head(raw_values))
            starts = jnp.arange(entries.shape[1], dtype=jnp.float32) * self.stride
            entries = self._per_query_head(turn(entries, starts))
            entry_values = entries  # K = V, RoPE'd
            if self.v_compressor is not None:
                entry_values = self._per_query_head(raw_values)
            logits = jnp.einsum("bthd,bchd->bhtc", q, entries) * scale
            visible = compressed_visibility(length, self.stride)
            seen = visible  # hidden entries: gone for the indexer too
            if self.hidden_entries is not None:
                seen = visible[None] & ~self.hidden_entries[:, None, :]
            mask = jnp.broadcast_to(seen[..., None, :, :], (batch, 1, *visible.shape))
            if self.indexer is not None:
                index_scores = self.indexer(
                    jax.lax.stop_gradient(x), jax.lax.stop_gradient(query_input)
                )
                mask = indexer_selection(
                    self, index_scores, logits, visible, seen, self.index_topk, self.index_pairs
                )[:, None]
            scores.append(logits)
            masks.append(mask)
        if self.local_window:
            keys = kv.transpose(0, 2, 1, 3)
            scores.append(local_scores(q.transpose(0, 2, 1, 3), keys, self.local_window) * scale)
            band = local_band_visibility(length, self.local_window)
            band = jnp.broadcast_to(band, (batch, 1, *band.shape))
            if self.cut_spans is not None:
                band = band & ~cut_band(length, self.local_window, self.cut_spans)[:, None]
            masks.append(band)
        sink = self.sinks[...] if self.sinks is not None else jnp.zeros((self.heads,))
        scores.append(jnp.broadcast_to(sink[None, :, None, None], (batch, self.heads, length, 1)))
        masks.append(jnp.full((batch, 1, length, 1), self.sinks is not None))
        masks = [jnp.broadcast_to(m, (batch, self.heads, *m.shape[2:])) for m in masks]
        probs = masked_softmax(jnp.concatenate(scores, -1), jnp.concatenate(masks, -1))
        splits = [m.shape[-1] for m in masks]
        parts = jnp.split(probs, [sum(splits[: i + 1]) for i in range(len(splits) - 1)], -1)
        out = jnp.zeros((batch, length, self.heads, hd), jnp.float32)
        if entries is not None:
            out = out + jnp.einsum("bhtc,bchd->bthd", parts[0], entry_values)
        if self.local_window:
            out = out + local_mix(parts[-2], values.transpose(0, 2, 1, 3), self.local_window)
        if len(parts) > 1:
            sow(self, "attention", lambda: dense_weights(parts[:-1], self.local_window))
        if self.v is None:
            out = turn(out, -positions)  # the values carry RoPE (K = V): undo it at the query
        if self.o_a is not None:
            grouped = out.reshape(batch, length, self.o_groups, -1)
            mixed = jnp.einsum("btgi,gir->btgr", grouped, self.o_a[...])
            return self.o_b(mixed.reshape(batch, length, -1))
        return self.o_b(out.reshape(batch, length, -1))

    def pooling_weights(self) -> Float[Array, "H m"] | None:
        """Each query head's compressor pooling weight per phase (its KV head's); None for sliding."""
        if self.compressor is None:
            return None
        weights = self.compressor.pooling_weights()
        return jnp.broadcast_to(weights, (self.heads, weights.shape[-1]))

"""The multi-head retrieval model with chunk-compressed keys (docs/theory.md §3).

Per head h: `z_h[c] = gain_h * (q @ Wq_h) . (K_h[c] @ Wk_h)`, `P_h = softmax_c(z_h)`,
`Pbar = mean_h P_h`. The reduced model fixes `Wq_h^T Wk_h = I` (no projections).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from weakspots.idealized.deepseek_v4 import _interleaved_rope
from weakspots.idealized.rope import ROPE_THETA as ROPE_THETA
from weakspots.idealized.rope import rope_frequencies as rope_frequencies
from weakspots.idealized.stagger import stagger_offsets
from weakspots.idealized.toy.compression import AbstractCompressor, init_compressor
from weakspots.idealized.toy.config import ModelConfig
from weakspots.idealized.types import Gram, Keys, Logits, PoolingWeights, Query


def shift_tokens(x: Float[Array, "N s ..."], offset: int) -> Float[Array, "N s ..."]:
    """Chunk the context (a ring of `N s` tokens) so that entry e starts at token `e s + offset`."""
    if offset == 0:
        return x
    n, s = x.shape[:2]
    flat = x.reshape((n * s, *x.shape[2:]))
    return jnp.roll(flat, -offset, axis=0).reshape(x.shape)


def overlap_windows(x: Float[Array, "N s ..."]) -> Float[Array, "N 2s ..."]:
    """Windows of `2s` tokens with stride `s`: [previous chunk | own chunk] (a ring, no masking)."""
    return jnp.concatenate([jnp.roll(x, 1, axis=0), x], axis=1)


def rope_rotate(x: Float[Array, "C d"], positions, rope_dim: int) -> Float[Array, "C d"]:
    """Rotate the last `rope_dim` channels (interleaved pairs, as DeepSeek-V4) to `positions`."""
    dim = x.shape[-1]
    positions = jnp.asarray(positions, x.dtype)
    rotated = _interleaved_rope(x[:, dim - rope_dim :], positions, ROPE_THETA)
    return jnp.concatenate([x[:, : dim - rope_dim], rotated], axis=1)


def anchored_self_product(rope_norms: Float[Array, " R1"], relative) -> Float[Array, ""]:
    """`q . R(-rel) q` for a query whose squared norms are `rope_norms`.

    `rope_norms = (|q_plain|^2, |q_pair_0|^2, ...)`: the non-rotary channels and each
    rotary pair. A key equal to the query, anchored `relative` tokens before it, gives
    `|q_plain|^2 + sum_i |q_pair_i|^2 cos(relative * theta_i)`.
    """
    rope_dim = 2 * (rope_norms.shape[0] - 1)
    freqs = rope_frequencies(rope_dim, dtype=rope_norms.dtype, xp=jnp)
    angles = jnp.asarray(relative, rope_norms.dtype) * freqs
    return rope_norms[0] + jnp.sum(rope_norms[1:] * jnp.cos(angles))


def align_to_needle(logits: Float[Array, " N"], position, offset: int, stride: int):
    """Relabel the entries of a chunking shifted by `offset` so the needle's entry is `c*`.

    The needle at token `p = c* s + phi` lies in entry `c*` when `phi >= offset`, else in
    `c* - 1`; rolling by one in the latter case puts it at `c*` (a bijection on entries, so
    distractors stay distractors: the readout is by content, not by token index).
    """
    if offset:
        logits = jnp.roll(logits, (position % stride < offset).astype(jnp.int32))
    return logits


def merge_overlap_alias(logits: Float[Array, " N"], position, stride: int) -> Float[Array, " N"]:
    """With overlapping windows the needle also lies in entry `c* + 1` (its previous-chunk
    slots): both entries hold the answer, so their probability is merged into `c*`."""
    needle = position // stride
    alias = (needle + 1) % logits.shape[0]
    merged = jnp.logaddexp(logits[needle], logits[alias])
    excluded = -0.5 * jnp.finfo(logits.dtype).max
    return logits.at[needle].set(merged).at[alias].set(excluded)


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
    rope_dim: int = eqx.field(static=True, default=0)
    rope_anchor: bool = eqx.field(static=True, default=False)
    stagger: bool = eqx.field(static=True, default=False)
    overlap: bool = eqx.field(static=True, default=False)
    phase_entropy: float = eqx.field(static=True, default=0.0)
    offset_ensemble: int = eqx.field(static=True, default=1)

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
        # `gram @ w.T` contracts the gram's minor axis as it lies in memory; written as
        # `w @ gram.T`, XLA:CPU copies every drawn gram into the transposed layout first.
        return self.gain[:, None] * (gram @ weights.T).T

    def logits_from_keys(self, keys: Keys, query: Query) -> Logits:
        compressed = self.compressor(keys)
        if self.query_projection is None:
            q = jnp.broadcast_to(query, (compressed.shape[0], query.shape[0]))
        else:
            q = jnp.einsum("e,hed->hd", query, self.query_projection)
            compressed = jnp.einsum("hce,hed->hcd", compressed, self.key_projection)
        return self.gain[:, None] * jnp.einsum("hd,hcd->hc", q, compressed)

    @property
    def needs_position(self) -> bool:
        """True when the logits depend on the needle's position (stagger, overlap, rope_anchor)."""
        return self.rope_anchor or self.stagger or self.overlap

    def head_offsets(self, stride: int, extra: int = 0) -> tuple[int, ...]:
        """Each head's chunk-boundary shift in tokens: `h s // H` under `stagger` (plus `extra`)."""
        heads = self.log_gain.shape[0]
        shifts = stagger_offsets(stride, heads) if self.stagger else (0,) * heads
        return tuple((o + extra) % stride for o in shifts)

    def logits_at(
        self,
        position,
        gram: Gram | None = None,
        keys: Keys | None = None,
        query: Query | None = None,
        extra_offset: int = 0,
        rope_norms: Float[Array, " R1"] | None = None,
    ) -> Logits:
        """`(H, N)` logits for a needle at token `position`, entries aligned so the needle's is `c*`.

        The general path behind `stagger`, `overlap`, `rope_anchor` and offset ensembles
        (`extra_offset` shifts every head's chunking): head h chunks the ring of tokens
        from `head_offsets[h]`, optionally into overlapping windows, and with
        `rope_anchor` its compressed key of entry e is rotated to `e s` and the query to
        its own position in the same chunking. Pass `gram` (phase-weighted operators) or
        `keys` and `query`. Under `rope_anchor` the gram path is exact too: rotating an
        independent isotropic key leaves `q . x` distributed as before, so only the
        needle's own product changes, to `anchored_self_product(rope_norms, rel)` with
        `rel` its offset from the entry's anchor (`idealized.toy.task` draws `rope_norms`).
        """
        source = gram if gram is not None else keys
        chunks, stride = source.shape[:2]
        offsets = self.head_offsets(stride, extra_offset)
        heads = []
        cache: dict[int, Array] = {}
        for h, offset in enumerate(offsets):
            if offset not in cache:
                shifted = shift_tokens(source, offset)
                cache[offset] = overlap_windows(shifted) if self.overlap else shifted
            chunked = cache[offset]
            if gram is not None:
                weights = self.compressor.phase_weights()[h]
                z = jnp.einsum("j,cj->c", weights, chunked)
            else:
                z = self._key_logits(h, chunked, query, (position - offset) % (chunks * stride))
            z = align_to_needle(z, position, offset, stride)
            if gram is not None and self.rope_anchor:
                z = z + self._anchored_needle_correction(h, gram, position, offset, rope_norms)
            z = self.gain[h] * z
            if self.overlap:
                z = merge_overlap_alias(z, position, stride)
            heads.append(z)
        return jnp.stack(heads)

    def _anchored_needle_correction(self, h, gram, position, offset, rope_norms):
        # The aligned needle entry c* holds the needle at its own-chunk slot, anchored
        # `head_phase` tokens earlier; with overlap, entry c* + 1 holds it at its
        # previous-chunk slot, anchored `s - head_phase` tokens later.
        chunks, stride = gram.shape
        needle = position // stride
        head_phase = (position - offset) % stride
        plain = gram[needle, position % stride]
        weights = self.compressor.phase_weights()[h]
        own = stride + head_phase if self.overlap else head_phase
        delta = jnp.zeros((chunks,), gram.dtype)
        own_value = anchored_self_product(rope_norms, head_phase)
        delta = delta.at[needle].add(weights[own] * (own_value - plain))
        if self.overlap:
            prev_value = anchored_self_product(rope_norms, head_phase - stride)
            alias = (needle + 1) % chunks
            delta = delta.at[alias].add(weights[head_phase] * (prev_value - plain))
        return delta

    def _key_logits(self, h: int, chunked, query: Query, local_position) -> Float[Array, " N"]:
        compressed = self.compressor(chunked)[h]
        q = query
        if self.query_projection is not None:
            q = query @ self.query_projection[h]
            compressed = compressed @ self.key_projection[h]
        if self.rope_anchor:
            stride = chunked.shape[1] // 2 if self.overlap else chunked.shape[1]
            starts = jnp.arange(compressed.shape[0]) * stride
            compressed = rope_rotate(compressed, starts, self.rope_dim)
            q = rope_rotate(q[None], local_position[None], self.rope_dim)[0]
        return compressed @ q

    def inference_logits(
        self, position, gram=None, keys=None, query=None, rope_norms=None
    ) -> Logits:
        """`(K H, N)`: the logits of every head under each of the `offset_ensemble` K chunkings.

        Chunking k is shifted by `k s // K` tokens; `head_average` over all K H rows is the
        ensembled readout. With K = 1 and no chunking variant this is the plain model.
        """
        source = gram if gram is not None else keys
        stride = source.shape[1]
        members = [
            self.logits_at(position, gram, keys, query, shift, rope_norms)
            for shift in stagger_offsets(stride, self.offset_ensemble)
        ]
        return jnp.concatenate(members, axis=0)

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
        rope_dim=config.rope_dim,
        rope_anchor=config.rope_anchor,
        stagger=config.stagger,
        overlap=config.overlap,
        phase_entropy=float(config.phase_entropy),
        offset_ensemble=config.offset_ensemble,
    )


def run_keys(seed) -> tuple[PRNGKeyArray, PRNGKeyArray]:
    """The two keys a run with this seed draws from: (its initial model, its minibatches)."""
    model_key, data_key = jax.random.split(jax.random.key(seed))
    return model_key, data_key


def initial_pooling_logits(
    seed, heads: int, stride: int, init_scale, dtype=jnp.float32
) -> Float[Array, "H s"]:
    """The initial `softmax_pool` logits `(H, s)` of the run with this seed: `init_scale * N(0, 1)`.

    Drawn as the trainer draws them (`init_model` from `run_keys(seed)[0]`, float32 by
    default), so a flow from these logits starts where that SGD run starts (bit for bit
    when both are compiled). seed, init_scale: scalars or 0-d arrays (vmappable).
    """
    # The pooling logits do not depend on d; dim=1 keeps the unused identity maps small.
    config = ModelConfig(stride=stride, heads=heads, dim=1)
    model = init_model(run_keys(seed)[0], config, 1.0, init_scale, dtype)
    return model.compressor.pooling_logits

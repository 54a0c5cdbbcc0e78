"""A trained decoder's forward on the recall task, shared by training and evaluation: a live
model from a run's parameter state (`merge`), the query section's logits, and the one
first-query score (`first_query_hits`)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Int

from weakspots.idealized.decoder.config import DecoderConfig, LMConfig
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.decoder.recall import RecallBatch

# The decoder's programs compile with XLA's default options rather than `idealized.xla.jit`'s:
# the older CPU emitters that speed up the toy's sampler compile these programs about twice
# as slowly and run them no faster (`python -m weakspots.benchmarks.lm_throughput --compiler-options`).
jit = jax.jit


@functools.lru_cache(maxsize=32)
def graphdef(config: DecoderConfig) -> nnx.GraphDef:
    """The static graph of every decoder of this structure."""
    abstract = nnx.eval_shape(lambda: Decoder(config, rngs=nnx.Rngs(0)))
    return nnx.split(abstract)[0]


def merge(config: DecoderConfig, params: nnx.State) -> Decoder:
    """A live decoder from one run's parameter state."""
    return nnx.merge(graphdef(config), params)


def query_logits(config: LMConfig, params: nnx.State, tokens: Int[Array, "B T"]) -> Array:
    """Logits `(B, T - context_len, vocab)` of the query section alone: every scored position
    (`RecallBatch.scored`, `first_query`) lies there, after the task's context."""
    return merge(config.decoder, params)(tokens, start=config.task.context_len)


def query_part(config: LMConfig, y: Array) -> Array:
    """`y`'s query section (positions from the task's `context_len` on)."""
    return y[:, config.task.context_len :]


def first_query_hits(logits: Array, targets: Array, first_query: Array) -> Array:
    """Per sequence `(B,)`: every value token of the first query predicted (argmax).

    `logits` `(B, T', V)`, `targets` and `first_query` `(B, T')` on the same positions.
    """
    hit = jnp.argmax(logits, axis=-1) == targets
    return jnp.all(hit | ~first_query, axis=-1)


def first_query_correct_from_logits(config: LMConfig, logits: Array, batch: RecallBatch) -> Array:
    """`first_query_hits` of the query section's `logits` (`query_logits`) on `batch`."""
    return first_query_hits(
        logits, query_part(config, batch.targets), query_part(config, batch.first_query)
    )


def first_query_correct(config: LMConfig, params: nnx.State, batch: RecallBatch) -> Array:
    """Per sequence, whether every value token of the first query is predicted (argmax)."""
    return first_query_correct_from_logits(config, query_logits(config, params, batch.tokens), batch)

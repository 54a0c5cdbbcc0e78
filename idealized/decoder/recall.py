"""Multi-query associative recall: the decoder family's long-context retrieval task.

A sequence (`RecallTask`, lengths in tokens) is a context of `context_len` filler tokens
holding `pairs` facts, each a key (`key_len` tokens) directly followed by its value
(`value_len` tokens), placed without overlap; then a query section in which every fact
appears once more, in random order, key then value. The model is scored on predicting
each queried value token from the tokens before it (teacher forcing within a value).
All key tokens of a sequence are distinct, so each query has one answer.

Training draws fact placements uniformly over all non-overlapping arrangements
(`sample_batch`). Evaluation places the first-queried fact at a chosen start and the
others uniformly around it (`placed_starts`, exact), so accuracy can be resolved by the
phase of the queried value, of its key, and by whether the fact straddles a window.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Int, PRNGKeyArray

from weakspots.idealized.decoder.config import RecallTask
from weakspots.idealized.toy.task import random_words


class RecallBatch(eqx.Module):
    """Token ids `(B, T)`, next-token targets `(B, T)` and the positions scored `(B, T)`.

    `targets[b, t] = tokens[b, t + 1]`; `scored[b, t]` marks the positions whose next
    token is a queried value token. `first_query` marks those of the first query alone
    (the fact whose placement evaluation controls).
    """

    tokens: Int[Array, "B T"]
    targets: Int[Array, "B T"]
    scored: Bool[Array, "B T"]
    first_query: Bool[Array, "B T"]


def _uniforms(words: Array) -> Array:
    """Uniforms on `[0, 1)` from the top 24 bits of 32-bit words (exact in float32)."""
    return (words >> np.uint32(8)).astype(jnp.float32) * np.float32(2.0**-24)


def _random_subset(words: Array, size: int) -> Int[Array, " size"]:
    """A uniformly random `size`-subset of `range(len(words))`, in random order.

    The indices of the `size` largest of i.i.d. uniform words (`top_k`, one partial sort);
    ties between 24-bit uniforms are broken by index, a bias of order `len(words)^2 / 2^24`.
    """
    return jax.lax.top_k(_uniforms(words), size)[1]


def _below(words: Array, bound: int) -> Int[Array, "*shape"]:
    """Integers uniform on `range(bound)` (`floor(u * bound)`, bias at most `bound / 2^24`)."""
    return jnp.floor(_uniforms(words) * bound).astype(jnp.int32)


def words_per_sequence(task: RecallTask) -> int:
    """32-bit random words one sequence consumes: its draws are all cut from one array."""
    free = task.context_len - task.pairs * task.fact_len
    return (
        (free + task.pairs)
        + task.key_vocab
        + task.pairs * task.value_len
        + task.seq_len
        + task.pairs
    )


def _split_words(task: RecallTask, words: Array) -> dict[str, Array]:
    free = task.context_len - task.pairs * task.fact_len
    sizes = {
        "starts": free + task.pairs,
        "keys": task.key_vocab,
        "values": task.pairs * task.value_len,
        "filler": task.seq_len,
        "order": task.pairs,
    }
    out, at = {}, 0
    for name, size in sizes.items():
        out[name] = words[at : at + size]
        at += size
    return out


def sample_starts(words: Array, task: RecallTask) -> Int[Array, " P"]:
    """Fact starts, ascending, uniform over the non-overlapping arrangements in the context.

    Stars and bars: with `G = context_len - P L` free tokens, an arrangement is a
    `P`-subset `b` of `range(G + P)`, and block `i` (0-based) starts at `b_i + i (L - 1)`.
    `words`: `G + P` random words.
    """
    chosen = jnp.sort(_random_subset(words, task.pairs)).astype(jnp.int32)
    return chosen + jnp.arange(task.pairs, dtype=jnp.int32) * (task.fact_len - 1)


def assemble(
    task: RecallTask,
    starts: Int[Array, " P"],
    words: Array,
    *,
    first: int | None = None,
) -> tuple[Int[Array, " T"], Bool[Array, " T"], Bool[Array, " T"]]:
    """One sequence: facts at `starts` (fact i at `starts[i]`), its tokens cut from random `words`.

    `words`: `words_per_sequence(task)` random 32-bit words. `first`: the fact queried
    first (random when None). Returns the tokens `(T,)`, the positions scored (those whose
    next token is a queried value token) and those of the first query alone.
    """
    P, kl, L, ctx = task.pairs, task.key_len, task.fact_len, task.context_len
    draws = _split_words(task, words)
    F, K = task.filler_vocab, task.key_vocab
    keys = _random_subset(draws["keys"], P * kl).reshape(P, kl).astype(jnp.int32) + F
    values = _below(draws["values"], task.value_vocab).reshape(P, task.value_len)
    facts = jnp.concatenate([keys, values + F + K], axis=1)  # (P, L)
    tokens = _below(draws["filler"], F)
    offsets = jnp.arange(L, dtype=jnp.int32)
    where = (starts.astype(jnp.int32)[:, None] + offsets[None, :]).reshape(-1)
    tokens = tokens.at[where].set(facts.reshape(-1))
    if first is None:
        order = _random_subset(draws["order"], P).astype(jnp.int32)
    else:
        rest = jnp.asarray([i for i in range(P) if i != first], jnp.int32)
        shuffled = rest[_random_subset(draws["order"][: P - 1], P - 1)]
        order = jnp.concatenate([jnp.asarray([first], jnp.int32), shuffled])
    tokens = tokens.at[ctx:].set(facts[order].reshape(-1))
    position = jnp.arange(task.seq_len, dtype=jnp.int32)
    in_query = (position >= ctx) & (position < task.seq_len - 1)
    slot, offset = (position - ctx + 1) // L, (position - ctx + 1) % L
    scored = in_query & (offset >= kl)  # the next token is a value token
    return tokens, scored, scored & (slot == 0)


def _batch(tokens, scored, first_query) -> RecallBatch:
    targets = jnp.concatenate([tokens[:, 1:], tokens[:, -1:]], axis=1)
    return RecallBatch(tokens, targets, scored, first_query)


def sample_batch(key: PRNGKeyArray, task: RecallTask, batch: int) -> RecallBatch:
    """`batch` training sequences, facts placed uniformly (`sample_starts`)."""
    words = random_words(key, (batch, words_per_sequence(task)))

    def one(w):
        starts = sample_starts(_split_words(task, w)["starts"], task)
        return assemble(task, starts, w)

    return _batch(*jax.vmap(one)(words))


def placed_batch(key: PRNGKeyArray, task: RecallTask, starts: Int[Array, "B P"]) -> RecallBatch:
    """Sequences with facts at the given starts; fact 0 is queried first."""
    words = random_words(key, (starts.shape[0], words_per_sequence(task)))
    return _batch(*jax.vmap(lambda w, s: assemble(task, s, w, first=0))(words, starts))


def _arrangements(cells: int, blocks: int, length: int) -> int:
    """Ways to place `blocks` non-overlapping blocks of `length` in `cells` tokens."""
    free = cells - blocks * length
    return math.comb(free + blocks, blocks) if free >= 0 else 0


def _uniform_blocks(rng: np.random.Generator, cells: int, blocks: int, length: int) -> np.ndarray:
    free = cells - blocks * length
    chosen = np.sort(rng.choice(free + blocks, size=blocks, replace=False))
    return chosen + np.arange(blocks) * (length - 1)


def placed_starts(rng: np.random.Generator, task: RecallTask, start: int) -> np.ndarray:
    """Fact starts `(P,)` with fact 0 at `start` and the others uniform over the arrangements left.

    Exact: the number `k` of other facts before fact 0 is drawn with probability
    proportional to the arrangements it allows on each side, then each side is a
    uniform arrangement (stars and bars).
    """
    L, P, ctx = task.fact_len, task.pairs, task.context_len
    if not 0 <= start <= ctx - L:
        raise ValueError(f"fact start {start} outside [0, {ctx - L}]")
    right = ctx - start - L
    counts = np.array(
        [_arrangements(start, k, L) * _arrangements(right, P - 1 - k, L) for k in range(P)],
        dtype=np.float64,
    )
    k = int(rng.choice(P, p=counts / counts.sum()))
    before = _uniform_blocks(rng, start, k, L)
    after = start + L + _uniform_blocks(rng, right, P - 1 - k, L)
    return np.concatenate([[start], before, after]).astype(np.int32)


def value_starts(task: RecallTask) -> np.ndarray:
    """Every position the first token of a fact's value can take in the context."""
    return np.arange(task.key_len, task.context_len - task.value_len + 1)

"""`idealized.decoder.recall`: the associative-recall sequences, their placement samplers, their scoring."""

import collections
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.decoder import recall
from weakspots.idealized.decoder.config import LMConfig, RecallTask

TASK = RecallTask(
    seq_len=40, pairs=3, key_len=2, value_len=2, key_vocab=8, value_vocab=5, filler_vocab=3
)


def facts_of(tokens, task, starts):
    return [tuple(tokens[s : s + task.fact_len]) for s in starts]


@pytest.fixture(scope="module")
def batch():
    sample = jax.jit(recall.sample_batch, static_argnums=(1, 2))
    return jax.tree.map(np.asarray, sample(jax.random.key(0), TASK, 64))


def test_sequences_hold_the_facts_and_query_each_once(batch):
    F, K = TASK.filler_vocab, TASK.key_vocab
    ctx, L, kl = TASK.context_len, TASK.fact_len, TASK.key_len
    for tokens, scored, first in zip(batch.tokens, batch.scored, batch.first_query, strict=True):
        context = tokens[:ctx]
        is_key = (context >= F) & (context < F + K)
        assert is_key.sum() == TASK.pairs * kl
        assert len(set(context[is_key].tolist())) == TASK.pairs * kl  # distinct key tokens
        queries = [tuple(tokens[ctx + i * L : ctx + (i + 1) * L]) for i in range(TASK.pairs)]
        starts = [
            i for i in range(ctx - L + 1) if tuple(context[i : i + L]) in queries and is_key[i]
        ]
        assert sorted(facts_of(context, TASK, starts)) == sorted(queries)  # each fact queried once
        assert scored.sum() == TASK.pairs * TASK.value_len and first.sum() == TASK.value_len
        for t in np.flatnonzero(scored):
            assert tokens[t + 1] >= F + K  # a value token follows every scored position
        np.testing.assert_array_equal(
            np.flatnonzero(first), ctx + kl - 1 + np.arange(TASK.value_len)
        )
    np.testing.assert_array_equal(batch.targets[:, :-1], batch.tokens[:, 1:])


def test_training_placement_is_uniform_over_arrangements():
    """Stars and bars against enumeration: 2 facts of 2 tokens in 7 tokens (10 arrangements)."""
    task = RecallTask(seq_len=7 + 2 * 2, pairs=2, key_len=1, value_len=1, key_vocab=4)
    arrangements = [
        a for a in itertools.combinations(range(6), 2) if a[1] - a[0] >= 2
    ]  # all non-overlapping starts
    draws = 5000
    words = jax.random.bits(jax.random.key(1), (draws, task.context_len), jnp.uint32)
    free = task.context_len - task.pairs * task.fact_len
    starts = jax.jit(jax.vmap(lambda w: recall.sample_starts(w[: free + task.pairs], task)))(words)
    counts = collections.Counter(map(tuple, np.asarray(starts).tolist()))
    assert set(counts) == set(arrangements)
    p = 1 / len(arrangements)
    sigma = np.sqrt(draws * p * (1 - p))
    for a in arrangements:  # 4 sigma: a false alarm about once in 16000 arrangements
        assert abs(counts[a] - draws * p) < 4 * sigma


@pytest.mark.parametrize("start", [0, 3, 6])
def test_placed_starts_are_uniform_given_the_first_fact(start):
    """Exact conditional sampler against enumeration of every arrangement with fact 0 at `start`."""
    task = RecallTask(seq_len=12 + 3 * 2, pairs=3, key_len=1, value_len=1, key_vocab=4)
    L, ctx = task.fact_len, task.context_len
    valid = []
    for others in itertools.combinations(range(ctx - L + 1), 2):
        blocks = sorted([start, *others])
        if all(b - a >= L for a, b in itertools.pairwise(blocks)):
            valid.append(tuple(others))
    rng = np.random.default_rng(3)
    draws = 3000
    counts = collections.Counter(
        tuple(sorted(recall.placed_starts(rng, task, start)[1:].tolist())) for _ in range(draws)
    )
    assert set(counts) == set(valid)
    p = 1 / len(valid)
    sigma = np.sqrt(draws * p * (1 - p))
    for v in valid:
        assert abs(counts[v] - draws * p) < 4 * sigma


def test_placed_batch_puts_the_first_query_at_the_chosen_fact():
    rng = np.random.default_rng(0)
    starts = np.stack([recall.placed_starts(rng, TASK, s) for s in (0, 5, 17)])
    batch = jax.tree.map(
        np.asarray, recall.placed_batch(jax.random.key(2), TASK, jnp.asarray(starts))
    )
    ctx, L = TASK.context_len, TASK.fact_len
    for tokens, s in zip(batch.tokens, starts, strict=True):
        np.testing.assert_array_equal(tokens[ctx : ctx + L], tokens[s[0] : s[0] + L])


def test_config_errors_name_the_flag():
    from weakspots.idealized.toy.config import ConfigError

    with pytest.raises(ConfigError, match="--key-vocab"):
        LMConfig(pairs=8, key_len=9)
    with pytest.raises(ConfigError, match="--seq-len"):
        LMConfig(seq_len=130)
    with pytest.raises(ConfigError, match="--layout"):
        LMConfig(layout="sliding,banana")

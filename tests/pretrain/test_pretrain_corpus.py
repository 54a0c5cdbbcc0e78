"""The pretraining corpus and its tokenizer: deterministic, in the vocabulary, rewards
recalling a name after its animal, and never shows the lookup's format."""

import numpy as np
import pytest

from weakspots.idealized.pretrain import corpus
from weakspots.idealized.pretrain.tokenizer import Tokenizer
from weakspots.sims.pretrain import lookup


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.default()


@pytest.fixture(scope="module")
def sample(tokenizer):
    """A large sample: 768 documents of 513 tokens (about 0.4M tokens) from 3 steps."""
    return np.concatenate([corpus.batch_at(tokenizer, 11, step, 256, 512) for step in range(3)])


def test_tokenizer_vocabulary(tokenizer):
    assert 2000 <= tokenizer.vocab_size <= 5000
    keys, values = set(tokenizer.key_ids), set(tokenizer.value_ids)
    assert len(keys) >= lookup.RECORDS and len(values) >= lookup.RECORDS and not keys & values
    for i in [*tokenizer.key_ids, *tokenizer.value_ids]:  # one token each, both ways
        assert tokenizer.encode(tokenizer.decode([i])) == [i]
    assert tokenizer.encode("the cat bob zzzz") == [
        tokenizer.ids["the"],
        tokenizer.ids["cat"],
        tokenizer.ids["bob"],
        tokenizer.unk_id,
    ]
    assert Tokenizer.default() is tokenizer


def test_batches_are_deterministic_and_resumable(tokenizer):
    stream = corpus.batches(tokenizer, seed=5, batch=4, length=64)
    first = [next(stream) for _ in range(3)]
    resumed = next(corpus.batches(tokenizer, seed=5, batch=4, length=64, start_step=2))
    np.testing.assert_array_equal(first[2], resumed)
    np.testing.assert_array_equal(first[0], corpus.batch_at(tokenizer, 5, 0, 4, 64))
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[0], corpus.batch_at(tokenizer, 6, 0, 4, 64))


def test_documents_are_full_rows_of_known_words(tokenizer, sample):
    assert sample.dtype == np.int32 and sample.shape == (768, 513)
    assert np.all(sample[:, 0] == tokenizer.doc_id)
    body = sample[:, 1:]
    assert body.min() > tokenizer.doc_id and body.max() < tokenizer.vocab_size  # no specials
    text = tokenizer.decode(sample[0])
    assert tokenizer.encode(text) == sample[0].tolist()


def test_a_name_after_its_animal_is_recalled_from_earlier(tokenizer, sample):
    """Within a document every animal directly followed by a name is followed by the same
    name, and most such pairs repeat a pair seen earlier: copying them lowers the loss."""
    keys, values = tokenizer.key_ids, tokenizer.value_ids
    pairs = repeats = 0
    for row in sample[:64]:
        seen: dict[int, int] = {}
        at = np.flatnonzero(np.isin(row[:-1], keys) & np.isin(row[1:], values))
        for t in at:
            key, value = int(row[t]), int(row[t + 1])
            if key in seen:
                assert seen[key] == value
                repeats += 1
            seen[key] = value
            pairs += 1
    assert pairs > 64 * 10
    assert repeats / pairs > 0.5


def test_the_corpus_never_shows_the_lookup_format(tokenizer, sample):
    """No run of 4 (key, value) pairs, each pair adjacent and at most one token between
    pairs (the lookup has 64 with none between), in ~0.4M tokens; rosters give 3."""
    keys, values = tokenizer.key_ids, tokenizer.value_ids
    assert corpus.lookup_runs(sample, keys, values, pairs=4, max_gap=0).size == 0
    assert corpus.lookup_runs(sample, keys, values, pairs=4, max_gap=1).size == 0
    assert corpus.lookup_runs(sample, keys, values, pairs=3, max_gap=0).size > 0


def test_the_scan_finds_the_format_where_it_is_planted(tokenizer, sample):
    keys, values = tokenizer.key_ids, tokenizer.value_ids
    planted = sample[:4].copy()
    prompt = lookup.design("prefix", prompts_per_residue=2, modulus=2)[0]
    records = prompt.tokens[prompt.target_position - 2 * prompt.target_record :][:8]
    planted[2, 100:108] = records  # 4 records side by side, as the lookup shows them
    found = corpus.lookup_runs(planted, keys, values, pairs=4)
    assert found.tolist() == [[2, 100]]
    spaced = sample[:1].copy()
    for j in range(4):  # 4 pairs, one filler token between pairs
        spaced[0, 200 + 3 * j : 203 + 3 * j] = [records[2 * j], records[2 * j + 1], 0]
    assert corpus.lookup_runs(spaced, keys, values, pairs=4, max_gap=0).size == 0
    assert corpus.lookup_runs(spaced, keys, values, pairs=4, max_gap=1).tolist() == [[0, 200]]
    # every lookup prompt is found, in both paddings' demonstrations at least
    for padding in lookup.PADDINGS:
        prompts = lookup.design(padding, prompts_per_residue=2, modulus=4)
        rows = np.stack([p.tokens for p in prompts])
        hits = corpus.lookup_runs(rows, keys, values, pairs=4, max_gap=0)
        assert set(hits[:, 0]) == set(range(len(prompts)))


def test_describe_is_plain_data(tokenizer):
    import json

    described = corpus.describe(tokenizer)
    assert json.loads(json.dumps(described))["vocab_size"] == tokenizer.vocab_size

"""`sims.decoder.checkpoint`: a stored decoder loads as saved; outcomes drawn on the shared
evaluation set (files written before each run had its own) are scored again on load."""

import json

import jax
import numpy as np

from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.decoder import checkpoint
from weakspots.sims.decoder.evaluate import config_evaluation_set, evaluate_many
from weakspots.sims.decoder.train import LMHistory, LMHyper, LMResult, init

CONFIG = LMConfig(
    seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, d_model=16, layers=1,
    heads=2, rope_dim=4, window=4, steps=2, eval_every=1, batch=4, eval_batch=8,
    eval_samples=1, seed=3,
)  # fmt: skip


def _result(outcomes) -> LMResult:
    state = init(CONFIG, jax.tree.map(lambda x: x[0], LMHyper.stack([CONFIG])))
    zeros = np.zeros((1,))
    return LMResult(
        config=CONFIG,
        history=LMHistory(zeros.astype(int), zeros, zeros, zeros),
        params=state.params,
        step_loss=np.zeros(2),
        outcomes=outcomes,
        wall_seconds=0.0,
        tokens_per_second=0.0,
    )


def test_stale_outcomes_are_scored_again_on_their_runs_own_sequences(tmp_path):
    size = config_evaluation_set(CONFIG).value_start.size
    stored = np.arange(size) % 3 == 0  # not what the model answers
    path = checkpoint.save(tmp_path, _result(stored))
    np.testing.assert_array_equal(checkpoint.load(tmp_path, CONFIG).outcomes, stored)
    with np.load(path) as data:
        arrays = dict(data)
    meta = json.loads(bytes(arrays["meta"]).decode())
    del meta["evaluation"]  # as written before runs had their own sequences
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path, **arrays)
    loaded = checkpoint.load(tmp_path, CONFIG)
    params = jax.tree.map(lambda x: x[None], loaded.params)
    expected = evaluate_many(CONFIG, params, seeds=[CONFIG.seed])[0]
    np.testing.assert_array_equal(loaded.outcomes, expected)
    assert not np.array_equal(expected, stored)

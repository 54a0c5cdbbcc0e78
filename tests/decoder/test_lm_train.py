"""`sims.decoder.train`: many decoders under one compile, determinism, the schedule, the FLOP count."""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from fixtures import jaxpr_dot_flops
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.decoder.recall import sample_batch
from weakspots.sims.decoder import train as lm_train

TINY = LMConfig(
    seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, layers=1, d_model=16, heads=2,
    rope_dim=4, window=4, steps=6, eval_every=3, batch=4, eval_batch=8, eval_samples=1,
)  # fmt: skip


@pytest.fixture(scope="module")
def batches():
    """Run B (seed 1, another lr) trained beside A, then in the other slot beside C."""
    a, b, c = TINY, TINY.replace(seed=1, lr=1e-2), TINY.replace(seed=2, warmup=2)
    return lm_train.train_many([a, b]), lm_train.train_many([b, c])


def test_a_run_does_not_depend_on_the_runs_batched_with_it(batches):
    first, second = batches
    np.testing.assert_array_equal(first[1].step_loss, second[0].step_loss)
    np.testing.assert_array_equal(first[1].outcomes, second[0].outcomes)
    assert not np.allclose(first[0].step_loss, first[1].step_loss)
    assert not np.allclose(second[0].step_loss, second[1].step_loss)


def test_hyperparameters_share_one_compiled_program(batches):
    before = lm_train._advance_many._cache_size()
    lm_train.train_many([TINY.replace(lr=5e-3, weight_decay=0.1, clip=0.5, seed=3), TINY])
    assert lm_train._advance_many._cache_size() == before


def test_summary_has_the_json_keys(batches):
    summary = batches[0][0].summary()
    for key in (
        "phase_accuracy", "phase_accuracy_by_key_phase", "straddle_accuracy", "mean_accuracy",
        "delta_max", "psc", "harmonic_spectrum", "pooling_weights", "final_loss",
        "wall_seconds", "tokens_per_second",
    ):  # fmt: skip
        assert key in summary
    assert len(summary["phase_accuracy"]) == TINY.stride
    assert np.asarray(summary["pooling_weights"][0]).shape == (TINY.heads, TINY.stride)


def test_learning_rate_schedule():
    config = TINY.replace(steps=110)
    hyper = lm_train.LMHyper.stack([config.replace(lr=1.0, warmup=10)])
    hyper = jax.tree.map(lambda x: x[0], hyper)
    lr = lambda s: float(lm_train.learning_rate(config, hyper, jnp.asarray(s)))  # noqa: E731
    assert lr(0) == pytest.approx(0.1)
    assert lr(9) == pytest.approx(1.0)
    assert lr(60) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)), rel=1e-6)
    assert lr(110) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "layout, window, local_window",
    [("sliding,compressed", 4, 0), ("dense,compressed", 4, 0), ("sliding,compressed", 5, 3)],
)
def test_flop_count_matches_the_dots_of_the_forward(layout, window, local_window):
    """`model_flops_per_step / 3` against the dot_generals of the training loss's forward
    (mean pooling has none); window 5 pads T = 32 to whole blocks of the local branch."""
    config = TINY.replace(layers=2, layout=layout, mlp=2, window=window, local_window=local_window)
    state = nnx.split(Decoder(config.decoder, rngs=nnx.Rngs(0)))[1]
    batch = sample_batch(jax.random.key(0), config.task, config.batch)
    counted = jaxpr_dot_flops(partial(lm_train.sequence_loss, config.static), state, batch)
    assert lm_train.model_flops_per_step(config) / 3 == pytest.approx(counted, rel=1e-12)


@pytest.mark.slow
def test_loss_on_the_query_logits_equals_the_loss_on_every_logit():
    """`sequence_loss` unembeds only the query section; every scored position lies there,
    so the mean over the full logits is the same number (float32 rounding of a mean of
    O(1) terms: 1e-6)."""
    config = TINY.static
    batch = sample_batch(jax.random.key(3), config.task, 16)
    context = config.task.context_len
    assert not np.asarray(batch.scored[:, :context]).any()
    params = nnx.split(Decoder(config.decoder, rngs=nnx.Rngs(1)))[1]
    logits = lm_train.merge(config.decoder, params)(batch.tokens)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, batch.targets)
    full = np.sum(np.asarray(losses) * np.asarray(batch.scored)) / np.sum(batch.scored)
    got = float(lm_train.sequence_loss(config, params, batch))
    assert got == pytest.approx(float(full), abs=1e-6)
    hit = np.asarray(jnp.argmax(logits, axis=-1) == batch.targets) | ~np.asarray(batch.first_query)
    np.testing.assert_array_equal(
        np.asarray(lm_train.first_query_correct(config, params, batch)), hit.all(axis=-1)
    )


@pytest.mark.slow
def test_tiny_decoder_learns_recall():
    """A small decoder answers most queries after 3000 steps (chance is 1 / value_vocab).

    Recall is learned late: held-out accuracy sits near 0.5 for the first ~1000 steps
    (0.54 at 600, 0.62 at 1500), then rises to 0.84 at 3000.
    """
    config = LMConfig(
        seq_len=64, pairs=2, d_model=32, heads=2, rope_dim=8, steps=3000, eval_every=500,
        batch=32, eval_samples=4, lr=3e-3,
    )  # fmt: skip
    result = lm_train.train(config)
    assert result.history.eval_accuracy[-1] > 0.8


def test_runs_in_sequence_train_as_the_vmapped_runs(monkeypatch):
    """The two ways `_advance_many` advances its runs (vmapped, or in turn for large steps)
    give the same losses, up to float32 rounding of different fusions (1e-5 on O(1) losses)."""
    config = TINY.static
    hyper = lm_train.LMHyper.stack([config, config.replace(seed=1, lr=1e-2)])
    held_out = lm_train.held_out_batch(config)
    outcomes = {}
    for threshold in (float("inf"), 0.0):
        monkeypatch.setattr(lm_train, "SEQUENTIAL_FLOPS", threshold)
        assert lm_train.runs_in_sequence(config) == (threshold == 0.0)
        states = lm_train._init_many(config, hyper)
        lm_train._advance_many._clear_cache()
        _, losses, record = lm_train._advance_many(config, states, hyper, held_out)
        outcomes[threshold] = np.concatenate([np.asarray(losses).ravel(), np.ravel(record[0])])
    lm_train._advance_many._clear_cache()
    np.testing.assert_allclose(outcomes[0.0], outcomes[float("inf")], atol=1e-5, rtol=0)

"""Mitigations: exactness of the staggered/overlapping paths, ensembles and the entropy threshold."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.compression import LinearPool
from weakspots.idealized.toy.config import ConfigError, ModelConfig, TrainConfig
from weakspots.idealized.toy.loss import batch_logits, objective, phase_entropy
from weakspots.idealized.toy.model import init_model
from weakspots.idealized.toy.task import Batch, sample_batch
from weakspots.sims.toy.interventions import ablate, compare_mitigations
from weakspots.theory import interventions as theory
from weakspots.theory.mitigations import entropy_critical_weight
from weakspots.theory.thresholds import growth_rate


@pytest.mark.parametrize("variant", [{"heads": 3, "stagger": True}, {"heads": 2, "overlap": True}])
def test_gram_path_equals_real_keys(variant):
    config = ModelConfig(**variant)
    model = init_model(jax.random.key(0), config, 16.0, 0.5)
    b = sample_batch(jax.random.key(1), config, 16, keys=True)
    gram = jnp.einsum("bd,bcjd->bcj", b.query, b.keys)
    real = np.asarray(batch_logits(model, b))
    fast = np.asarray(batch_logits(model, Batch(target=b.target, phase=b.phase, gram=gram)))
    np.testing.assert_allclose(fast, real, rtol=1e-5, atol=1e-5)


def test_offset_ensemble_covers_every_phase_as_predicted():
    config = TrainConfig(offset_ensemble=8, eval_samples=256)
    weights = np.full((1, 8), 0.01)
    weights[0, 0] = 0.93
    model = init_model(jax.random.key(0), config.model, config.gain, 0.0)
    model = eqx.tree_at(
        lambda m: m.compressor, model, LinearPool(jnp.asarray(weights, jnp.float32))
    )
    from weakspots.sims.toy.train import evaluate

    acc, _ = evaluate(config, model)
    predicted = theory.readout_accuracy(weights, config.gain, config.chunks, config.dim, ensemble=8)
    np.testing.assert_allclose(np.asarray(acc), predicted, atol=0.1)
    plain, _ = evaluate(
        config.replace(offset_ensemble=1), dataclasses.replace(model, offset_ensemble=1)
    )
    assert np.asarray(plain)[1:].max() < 0.1  # without the ensemble only phase 0 is retrieved


@pytest.mark.slow
def test_overlap_accuracy_matches_prediction():
    config = TrainConfig(overlap=True, eval_samples=256)
    weights = np.full((1, 16), 0.01)
    weights[0, [9, 3]] = 0.43  # own-chunk slot of phase 1, previous-chunk slot of phase 3
    model = init_model(jax.random.key(0), config.model, config.gain, 0.0)
    model = eqx.tree_at(
        lambda m: m.compressor, model, LinearPool(jnp.asarray(weights, jnp.float32))
    )
    report = ablate(config, model, 256)
    np.testing.assert_allclose(
        report["phase_accuracy"], report["predicted_phase_accuracy"], atol=0.1
    )


def test_phase_entropy_term_is_the_mean_entropy():
    config = ModelConfig(phase_entropy=0.3, heads=2)
    model = init_model(jax.random.key(0), config, 16.0, 1.0)
    w = np.asarray(model.pooling_weights(), float)
    assert float(phase_entropy(model)) == pytest.approx(
        -np.mean(np.sum(w * np.log(w), -1)), rel=1e-5
    )
    batch = sample_batch(jax.random.key(1), config, 32, keys=False)
    plain = dataclasses.replace(model, phase_entropy=0.0)
    diff = float(objective(plain, batch, "mse", 0.0) - objective(model, batch, "mse", 0.0))
    assert diff == pytest.approx(0.3 * float(phase_entropy(model)), rel=1e-4)
    with pytest.raises(ConfigError, match="^--phase-entropy:"):
        ModelConfig(phase_entropy=0.1, operator="max_pool")


def test_critical_phase_entropy_separates_growth_from_decay():
    # Reduced flow from a small perturbation: below REG_c it grows, above it decays.
    stride, chunks, gain = 8, 64, 16.0
    reg_c = entropy_critical_weight(stride, chunks, gain)
    assert reg_c == pytest.approx(stride * float(growth_rate(stride, chunks, gain)))
    a0 = 1e-3 * np.random.default_rng(0).standard_normal((1, stride))
    spread0 = np.ptp(np.exp(a0))
    for reg, grows in ((0.8 * reg_c, True), (1.2 * reg_c, False)):
        w = theory.reduced_flow_weights(a0, gain, chunks, 40.0, entropy_weight=reg)
        assert (np.ptp(w) * stride > spread0) == grows


def test_costs_scale_with_the_ensemble_and_overlap():
    plain = theory.chunking_cost(8)
    assert plain["cache_entries_per_token"] == pytest.approx(1 / 8)
    ens = theory.chunking_cost(8, offset_ensemble=4)
    assert ens["cache_entries_per_token"] == pytest.approx(4 * plain["cache_entries_per_token"])
    assert (
        theory.chunking_cost(8, overlap=True)["compress_compute"] == 2 * plain["compress_compute"]
    )


@pytest.mark.slow
def test_mitigations_agree_with_predictions_on_the_canonical_config():
    rows = compare_mitigations(
        TrainConfig(eval_samples=1024),
        {
            "baseline": {},
            "phase_entropy": {"phase_entropy": 1.0},
            "offset_ensemble": {"offset_ensemble": 8},
        },
        [0, 1, 2],
    )
    base_m, base_p = (
        rows["baseline"]["delta_max"]["mean"],
        rows["baseline"]["predicted_delta_max"]["mean"],
    )
    for name in ("phase_entropy", "offset_ensemble"):
        measured = rows[name]["delta_max"]["mean"] - base_m
        predicted = rows[name]["predicted_delta_max"]["mean"] - base_p
        assert np.sign(measured) == np.sign(predicted) and abs(measured - predicted) < 0.2
    assert rows["offset_ensemble"]["delta_max"]["mean"] < 0.1

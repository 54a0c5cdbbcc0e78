"""theory.interventions.readout_accuracy: the head-averaged readout against the trainer's own
evaluation of a model with the same pooling weights, at the noise of both."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.compression import LinearPool
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.model import init_model
from weakspots.sims.toy.train import evaluate
from weakspots.theory.interventions import DRAWS, readout_accuracy

# Two heads at s=5, N=40, d=48, gain 9: head 0 spreads over three phases, head 1 over two.
WEIGHTS = np.array([[0.33, 0.33, 0.33, 0.005, 0.005], [0.0033, 0.0033, 0.0033, 0.495, 0.495]])
WEIGHTS = WEIGHTS / WEIGHTS.sum(axis=1, keepdims=True)
CONTEXTS = DRAWS  # the prediction's draws per phase
PRECISE = 4 * DRAWS  # for the 40,000-needle comparison
SIGMAS = 4.0  # z-score allowed on each phase (5 phases: a false alarm ~3e-4 per run)


def _measured(config, weights):
    model = init_model(jax.random.key(0), config.model, config.gain, 0.0)
    model = eqx.tree_at(
        lambda m: m.compressor, model, LinearPool(jnp.asarray(weights, jnp.float32))
    )
    accuracy, _ = evaluate(config, model)
    return np.asarray(accuracy, float)


def _assert_within_noise(predicted, measured, needles, contexts=CONTEXTS):
    # binomial errors of both: the prediction's draws and the evaluation's needles
    variance = predicted * (1 - predicted) * (1 / contexts + 1 / needles)
    z = np.abs(predicted - measured) / np.sqrt(np.maximum(variance, 1e-12))
    assert np.all(z < SIGMAS), (predicted, measured, z)


def test_identical_heads_reproduce_the_exact_single_head_quadrature():
    w = np.array([[0.3, 0.3, 0.3, 0.02, 0.02, 0.02, 0.02, 0.02]])
    exact = readout_accuracy(w, 16.0, 64, 64)  # one head: the 2-D quadrature
    two = readout_accuracy(np.concatenate([w, w]), 16.0, 64, 64)
    se = np.sqrt(exact * (1 - exact) / CONTEXTS)
    assert np.all(np.abs(two - exact) < SIGMAS * np.maximum(se, 1.0 / CONTEXTS))


def test_two_heads_match_the_trainers_evaluation():
    config = TrainConfig(stride=5, chunks=40, dim=48, heads=2, gain=9.0, eval_samples=4000)
    predicted = readout_accuracy(WEIGHTS, config.gain, config.chunks, config.dim)
    _assert_within_noise(predicted, _measured(config, WEIGHTS), config.eval_samples)


@pytest.mark.slow  # about 1 min on 2 cores
def test_two_heads_match_forty_thousand_needles():
    """Head 0's three phases (the weak ones) are exchangeable: their mean over 3 x 40,000
    needles against the prediction at four times the default draws. The exact law gives
    0.873 there; a mean partition function gave 0.885-0.894 (docs/theory_derivations.md)."""
    config = TrainConfig(stride=5, chunks=40, dim=48, heads=2, gain=9.0, eval_samples=40_000)
    predicted = readout_accuracy(WEIGHTS, config.gain, config.chunks, config.dim, draws=PRECISE)
    measured = _measured(config, WEIGHTS)
    contexts = PRECISE
    _assert_within_noise(predicted, measured, config.eval_samples, contexts)
    p = predicted[:3].mean()
    # the prediction's three phases share their draws (correlated): their mean's error is
    # at most one phase's; the measurement's three are independent
    se = math.sqrt(p * (1 - p) * (1 / contexts + 1 / (3 * config.eval_samples)))
    assert abs(p - measured[:3].mean()) < SIGMAS * se

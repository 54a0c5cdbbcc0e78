import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.config import ModelConfig
from weakspots.idealized.toy.loss import objective, retrieval_loss
from weakspots.idealized.toy.model import init_model
from weakspots.idealized.toy.task import sample_batch


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_losses_against_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 7)) * 3
    pbar = _softmax(logits).mean(axis=0)
    onehot = np.eye(7)[4]
    assert float(retrieval_loss(jnp.asarray(logits), 4, "mse")) == pytest.approx(
        np.sum((pbar - onehot) ** 2)
    )
    assert float(retrieval_loss(jnp.asarray(logits), 4, "ce")) == pytest.approx(-np.log(pbar[4]))


def test_weight_decay_penalises_the_learned_gain():
    config = ModelConfig(stride=4, chunks=6, dim=8, learn_gain=True)
    model = init_model(jax.random.key(0), config, 3.0, 0.0, jnp.float64)
    batch = sample_batch(jax.random.key(1), config, 8, keys=False, dtype=jnp.float64)
    diff = objective(model, batch, "mse", 0.2) - objective(model, batch, "mse", 0.0)
    assert float(diff) == pytest.approx(0.5 * 0.2 * 3.0**2)


def _reduced_loss(alpha, gain, chunks):
    """docs/theory.md §5 written out independently: N/(N-1) mean_phi (1 - sigma_N(gain a))^2."""
    sigma = np.exp(gain * alpha) / (np.exp(gain * alpha) + chunks - 1)
    return chunks / (chunks - 1) * np.mean((1 - sigma) ** 2)


@pytest.mark.slow
def test_expected_loss_approaches_the_reduced_loss_as_d_grows():
    """The finite-d expected loss tends to L_inf with a gap that shrinks like 1/d."""
    chunks, stride, gain = 16, 4, 8.0
    logits = jnp.array([[1.0, 0.2, -0.5, 0.0]])
    target = _reduced_loss(np.asarray(jax.nn.softmax(logits[0])), gain, chunks)
    gaps = {}
    for d in (64, 256, 1024):
        config = ModelConfig(stride=stride, chunks=chunks, dim=d)
        model = init_model(jax.random.key(0), config, gain, 0.0, jnp.float64)
        model = eqx.tree_at(lambda m: m.compressor.pooling_logits, model, logits)
        batch = sample_batch(jax.random.key(d), config, 200_000, keys=False, dtype=jnp.float64)
        gaps[d] = float(objective(model, batch, "mse", 0.0)) - target
        # Monte Carlo standard error is about 3e-4 at this sample size.
        assert abs(gaps[d]) < 5.0 / d + 1.5e-3, (d, gaps[d])
    assert gaps[64] > gaps[256] > gaps[1024]
    assert 2.5 < gaps[64] / gaps[256] < 6.0  # 1/d: a factor 4 per factor 4 in d

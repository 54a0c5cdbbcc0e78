"""RoPE anchoring: the exact inner-product path against real rotated keys, and kappa."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.config import ConfigError, ModelConfig, TrainConfig
from weakspots.idealized.toy.loss import batch_logits
from weakspots.idealized.toy.model import init_model
from weakspots.idealized.toy.task import Batch, sample_batch
from weakspots.sims.toy.interventions import predicted_phase_accuracy
from weakspots.sims.toy.train import train_many
from weakspots.theory.rope import rope_attenuation_at


@pytest.mark.parametrize(
    "variant", [{}, {"heads": 3, "stagger": True}, {"heads": 2, "overlap": True}]
)
@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_needle_product_gram_path_equals_rotated_keys(variant):
    # With every key but the needle zero, both paths compute only the needle's own product.
    config = ModelConfig(rope_anchor=True, rope_dim=32, **variant)
    model = init_model(jax.random.key(0), config, 16.0, 0.5)
    b = sample_batch(jax.random.key(1), config, 16, keys=True)
    rows = jnp.arange(16)
    keys = jnp.zeros_like(b.keys).at[rows, b.target, b.phase].set(b.query)
    q, d = b.query, config.dim
    norms = jnp.concatenate(
        [
            jnp.sum(q[:, : d - 32] ** 2, 1, keepdims=True),
            jnp.sum(q[:, d - 32 :].reshape(16, 16, 2) ** 2, -1),
        ],
        axis=1,
    )
    real = batch_logits(model, Batch(target=b.target, phase=b.phase, keys=keys, query=q))
    gram = jnp.einsum("bd,bcjd->bcj", q, keys)
    fast = batch_logits(model, Batch(target=b.target, phase=b.phase, gram=gram, rope_norms=norms))
    finite = real > -1e30
    np.testing.assert_allclose(np.asarray(fast)[finite], np.asarray(real)[finite], atol=1e-5)


def test_kappa_is_the_mean_anchored_self_product():
    dim, rope_dim = 64, 32
    config = ModelConfig(rope_anchor=True, rope_dim=rope_dim, dim=dim)
    b = sample_batch(jax.random.key(2), config, 20000, keys=False)
    from weakspots.idealized.toy.model import anchored_self_product

    for phase in range(8):
        values = jax.vmap(lambda r, phase=phase: anchored_self_product(r, phase))(b.rope_norms)
        assert float(jnp.mean(values)) == pytest.approx(
            rope_attenuation_at(phase, rope_dim, dim), abs=0.01
        )


def test_rope_anchor_needs_rotary_channels_and_keeps_the_fast_path():
    with pytest.raises(ConfigError, match="^--rope-anchor:"):
        TrainConfig(rope_anchor=True)
    assert ModelConfig(rope_anchor=True, rope_dim=8).uses_gram


@pytest.mark.slow
def test_weak_phases_are_the_predicted_ones_across_seeds():
    configs = [
        TrainConfig(rope_anchor=True, rope_dim=32, seed=s, eval_samples=1024) for s in range(4)
    ]
    for config, result in zip(configs, train_many(configs), strict=True):
        measured = np.asarray(result.summary()["phase_accuracy"]) < 0.5
        predicted = predicted_phase_accuracy(config) < 0.5
        np.testing.assert_array_equal(measured, predicted)

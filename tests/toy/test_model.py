import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.config import ModelConfig
from weakspots.idealized.toy.loss import head_average, objective
from weakspots.idealized.toy.model import init_model
from weakspots.idealized.toy.task import sample_batch


@pytest.mark.parametrize("operator", ["softmax_pool", "mean_pool", "linear"])
def test_inner_product_path_equals_real_keys(operator):
    config = ModelConfig(stride=4, chunks=6, dim=8, heads=3, operator=operator)
    model = init_model(jax.random.key(0), config, 5.0, 0.7, jnp.float64)
    batch = sample_batch(jax.random.key(1), config, 16, keys=True, dtype=jnp.float64)
    gram = jnp.einsum("bcjd,bd->bcj", batch.keys, batch.query)
    assert model.uses_gram and config.uses_gram
    for b in range(4):
        np.testing.assert_allclose(
            model.logits_from_gram(gram[b]),
            model.logits_from_keys(batch.keys[b], batch.query[b]),
            rtol=1e-12,
            atol=1e-12,
        )


def test_permuting_heads_permutes_logits_and_keeps_readout():
    config = ModelConfig(stride=4, chunks=6, dim=8, heads=3)
    model = init_model(jax.random.key(0), config, 5.0, 1.0, jnp.float64)
    model = eqx.tree_at(lambda m: m.log_gain, model, jnp.log(jnp.array([2.0, 5.0, 9.0])))
    perm = jnp.array([2, 0, 1])
    permuted = eqx.tree_at(
        lambda m: (m.compressor.pooling_logits, m.log_gain),
        model,
        (model.compressor.pooling_logits[perm], model.log_gain[perm]),
    )
    gram = sample_batch(jax.random.key(2), config, 1, keys=False, dtype=jnp.float64).gram[0]
    z, zp = model.logits_from_gram(gram), permuted.logits_from_gram(gram)
    np.testing.assert_allclose(zp, z[perm], rtol=1e-12)
    np.testing.assert_allclose(head_average(zp), head_average(z), rtol=1e-12)


@pytest.mark.parametrize("learn_gain", [False, True])
def test_gain_gets_a_gradient_only_when_learned(learn_gain):
    config = ModelConfig(stride=4, chunks=6, dim=8, learn_gain=learn_gain)
    model = init_model(jax.random.key(0), config, 5.0, 0.3, jnp.float64)
    batch = sample_batch(jax.random.key(1), config, 32, keys=False, dtype=jnp.float64)
    grads = eqx.filter_grad(objective)(model, batch, "mse", 0.1)
    assert (np.abs(grads.log_gain).max() > 0) == learn_gain
    assert np.abs(grads.compressor.pooling_logits).max() > 0
    np.testing.assert_allclose(model.gain, [5.0])


@pytest.mark.slow
def test_identity_projections_change_nothing_at_init():
    plain = ModelConfig(stride=4, chunks=6, dim=8, heads=2)
    projected = ModelConfig(stride=4, chunks=6, dim=8, heads=2, learn_projections=True)
    a = init_model(jax.random.key(0), plain, 5.0, 0.3, jnp.float64)
    b = init_model(jax.random.key(0), projected, 5.0, 0.3, jnp.float64)
    assert not b.uses_gram and not projected.uses_gram
    batch = sample_batch(jax.random.key(1), projected, 4, keys=True, dtype=jnp.float64)
    np.testing.assert_allclose(
        a.logits_from_keys(batch.keys[0], batch.query[0]),
        b.logits_from_keys(batch.keys[0], batch.query[0]),
        rtol=1e-12,
    )

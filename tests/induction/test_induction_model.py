"""idealized.induction: the model's losses against the closed form and its invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.idealized import induction
from weakspots.idealized.toy.config import ConfigError

population_loss = jax.jit(induction.population_loss, static_argnums=1)
context_losses = jax.jit(induction.context_losses)
position_losses = jax.jit(induction.position_losses, static_argnums=1)


def _gates(seed, heads, stride, scale=1.0):
    return induction.StaticGates(scale * jax.random.normal(jax.random.key(seed), (heads, 2, stride)))


def test_static_population_loss_is_the_closed_form():
    config = induction.InductionConfig(stride=5, heads=3, chunks=6, vocab=300, gamma=4.0, beta=1.7, kappa=0.5)
    gates = _gates(1, 3, 5)
    w = np.asarray(gates.weights())
    got = float(population_loss(gates, config.chunks, induction.scales(config)))
    assert got == pytest.approx(theory.induction_population_loss(w[:, 0], w[:, 1], 6, 300, 4.0, 1.7), rel=1e-12)


def test_every_context_and_chunk_gives_static_gates_the_same_loss():
    config = induction.InductionConfig(stride=4, heads=2, chunks=5, vocab=100)
    gates = _gates(2, 2, 4)
    sc = induction.scales(config)
    contexts = induction.sample_contexts(jax.random.key(0), config, 3)
    per = jnp.stack([context_losses(gates, t, sc) for t in contexts])
    np.testing.assert_allclose(per, jnp.broadcast_to(per[0, 0], per.shape), rtol=1e-12)
    np.testing.assert_allclose(
        position_losses(gates, config.chunks, sc), per[0, 0], rtol=1e-12
    )


def test_permuting_heads_leaves_the_loss_unchanged():
    config = induction.InductionConfig(stride=4, heads=3, chunks=4, vocab=64)
    gates = _gates(3, 3, 4)
    sc = induction.scales(config)
    swapped = induction.StaticGates(gates.logits[jnp.array([2, 0, 1])])
    assert float(population_loss(gates, 4, sc)) == pytest.approx(
        float(population_loss(swapped, 4, sc)), rel=1e-14
    )


def test_kappa_drops_out_of_static_gates():
    gates = _gates(4, 2, 4)
    losses = [
        float(population_loss(gates, 8, induction.scales(induction.InductionConfig(kappa=k))))
        for k in (0.0, 0.7, 3.0)
    ]
    np.testing.assert_allclose(losses, losses[0], rtol=1e-14)


def test_loglinear_gates_with_a_flat_table_are_static_gates_at_sqrt_kappa():
    config = induction.InductionConfig(stride=4, heads=2, chunks=3, vocab=50, kappa=2.0, gate="loglinear")
    shared = jax.random.normal(jax.random.key(5), (2, 2, 4))
    loglinear = induction.LogLinearGates(shared, jnp.zeros((2, 2, 4, 50)))
    static = induction.StaticGates(jnp.sqrt(2.0) * shared)
    sc = induction.scales(config)
    tokens = induction.sample_contexts(jax.random.key(1), config, 1)[0]
    np.testing.assert_allclose(
        context_losses(loglinear, tokens, sc), context_losses(static, tokens, sc), rtol=1e-12
    )


def test_contexts_hold_distinct_tokens():
    config = induction.InductionConfig(stride=4, chunks=8, vocab=40)
    contexts = np.asarray(induction.sample_contexts(jax.random.key(2), config, 20))
    assert all(len(set(c.ravel().tolist())) == 32 for c in contexts)
    assert contexts.min() >= 0 and contexts.max() < 40


def test_effective_offsets_of_uniform_and_one_hot_windows():
    uniform = jnp.full((5, 4), 0.25)
    one_hot = jnp.eye(4)[jnp.array([0, 1, 2, 3])]
    static, window = induction.effective_offsets(uniform)
    assert float(static) == pytest.approx(4.0) and float(window) == pytest.approx(4.0)
    static, window = induction.effective_offsets(one_hot)  # content-driven: one-hot per window
    assert float(static) == pytest.approx(4.0) and float(window) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "field,value", [("stride", 1), ("vocab", 10), ("gamma", 0.0), ("gate", "relu"), ("eps", 0.1)]
)
def test_bad_config_names_its_field(field, value):
    with pytest.raises(ConfigError, match=f"--{field}"):
        induction.InductionConfig(**{field: value})

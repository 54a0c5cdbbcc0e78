"""The selection model at finite d (idealized.selection) against theory.topk_selection
(docs/theory.md §9.5) and its reduced flow."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.idealized import selection as sm
from weakspots.idealized.toy.config import ConfigError
from weakspots.sims.toy.flow import solve_many
from weakspots.sims.toy.train import train_many

Z_TOL = 4.0


def test_config_refuses():
    with pytest.raises(ConfigError) as err:
        sm.SelectionTrainConfig(chunks=8, topk=9)
    assert err.value.field == "topk"
    with pytest.raises(ConfigError) as err:
        sm.SelectionFlowConfig(heads=1)
    assert err.value.field == "heads"


@pytest.mark.slow
def test_selected_fraction_is_the_miss_probability():
    config = sm.SelectionTrainConfig(stride=4, chunks=40, topk=4, dim=16)
    weights = np.array([0.4, 0.3, 0.2, 0.1])
    model = sm.SelectionModel(
        pooling_logits=jnp.zeros((1, 4)), index_logits=jnp.log(jnp.asarray(weights))[None], log_gain=jnp.zeros(1)
    )
    samples = 8000
    measured = 1 - sm.selected_fraction(config, model, samples)
    want = theory.topk_phase_miss_probability(weights, 40, 4, 16)
    se = np.sqrt(np.maximum(want * (1 - want), 1e-4) / samples)
    assert np.all(np.abs(measured - want) < Z_TOL * se)


@pytest.mark.slow
def test_reduced_loss_gradients_are_the_large_d_models():
    config = sm.SelectionTrainConfig(stride=4, chunks=32, topk=8, gain=8.0, dim=10**5, init_scale=0.3, seed=2)
    model = sm.init_model_for_seed(2, config, 8.0, 0.3)
    batch = jax.jit(lambda k: sm.sample_batch(k, config, 8192))(jax.random.key(0))
    grads = jax.jit(jax.grad(lambda m: sm.objective(m, batch, config)))(model)
    with jax.enable_x64(True):
        main, index = jax.grad(
            lambda a, b: theory.topk_selection.reduced_selection_loss(a, b, 8.0, 32, 8), argnums=(0, 1)
        )(jnp.asarray(model.pooling_logits[0], jnp.float64), jnp.asarray(model.index_logits[0], jnp.float64))
    np.testing.assert_allclose(np.asarray(grads.index_logits[0]), np.asarray(index), atol=3e-3)
    np.testing.assert_allclose(np.asarray(grads.pooling_logits[0]), np.asarray(main), atol=6e-3)


@pytest.mark.slow
def test_selection_moves_the_threshold_from_n_to_k():
    # s=4, gain 8: N_c = 1 + 2 e^2 = 15.8. N = 64 entries; reading k = 8 keeps uniform pooling
    # stable (k < N_c), k = 32 does not (the toy's instability at N = k)
    common = dict(stride=4, chunks=64, gain=8.0, init_scale=0.05, seed=4, t1=3000.0, saves=3)
    kept, broken = solve_many([sm.SelectionFlowConfig(topk=8, **common), sm.SelectionFlowConfig(topk=32, **common)])
    assert theory.critical_chunks(8.0, 4) == pytest.approx(1 + 2 * math.e**2)
    assert np.ptp(kept.history.pooling_weights[-1][0]) < 1e-3
    assert np.ptp(broken.history.pooling_weights[-1][0]) > 0.2
    # the indexer follows the main attention's weights (its KL optimum is alpha_I = alpha)
    np.testing.assert_allclose(broken.history.pooling_weights[-1][1], broken.history.pooling_weights[-1][0], atol=0.05)


@pytest.mark.slow
def test_sgd_at_large_d_follows_the_selection_flow():
    common = dict(stride=4, chunks=48, topk=24, gain=8.0, init_scale=0.3, seed=5)
    flow = solve_many([sm.SelectionFlowConfig(**common, t1=400.0, saves=5)])[0]
    sgd = train_many([sm.SelectionTrainConfig(
        **common, dim=10**5, lr=1.0, steps=400, eval_every=100, eval_samples=128, batch=1024
    )])[0]
    w_flow = flow.history.pooling_weights[:, 0]
    w_sgd = np.asarray(sgd.history.pooling_weights[:, 0])
    moved = np.abs(w_flow[-1] - w_flow[0]).max()
    assert moved > 0.1
    np.testing.assert_allclose(w_sgd, w_flow, atol=0.15 * moved)

"""The finite-d flow (sims.toy.flow.finite_flow) vs the trainer and the reduced flow."""

import jax
import numpy as np
import pytest
from fixtures import distance_to_reduced

from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments.measure import SGD_ATOL, sgd_config
from weakspots.sims.toy.flow import finite_flow
from weakspots.sims.toy.train import Hyper, init, train

SMALL = TrainConfig(
    stride=4, chunks=16, dim=32, gain=8.0, init_scale=0.3, lr=1.0, steps=60, eval_every=10
)


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_starts_at_the_trainers_init_and_loss_never_increases():
    configs = [SMALL.replace(seed=s) for s in range(2)] + [SMALL.replace(seed=0, dim=128)]
    hist = finite_flow(configs, samples=1024, accuracy=False)
    assert hist.pooling_weights.shape == (3, 7, 1, 4) and hist.loss.shape == (3, 7)
    np.testing.assert_array_equal(hist.steps[0], [0, 10, 20, 30, 40, 50, 60])
    for i, c in enumerate(configs):
        hyper = jax.tree_util.tree_map(lambda x: x[0], Hyper.stack([c]))
        weights0 = np.asarray(init(c.static, hyper).model.pooling_weights(), float)
        np.testing.assert_allclose(hist.pooling_weights[i, 0], weights0, rtol=1e-6)
    assert np.all(np.diff(hist.loss, axis=1) <= 1e-12)
    assert np.all(hist.gain == hist.gain[:, :1])  # a fixed gain: the trainer's float32 one
    np.testing.assert_allclose(hist.gain, 8.0, rtol=1e-6)
    # vmapped over runs == one run at a time
    alone = finite_flow(configs[1], samples=1024, accuracy=False)
    np.testing.assert_allclose(alone.pooling_weights, hist.pooling_weights[1], atol=1e-7)


@pytest.mark.slow
def test_trainer_follows_the_finite_flow_at_d256():
    config = sgd_config()
    sgd = np.asarray(train(config).history.pooling_weights, float)
    ode = finite_flow(config, samples=8192, accuracy=False)
    err = np.max(np.abs(sgd - ode.pooling_weights))
    assert err <= SGD_ATOL
    assert np.max(np.abs(ode.pooling_weights[-1] - ode.pooling_weights[0])) > 0.15  # it moved


@pytest.mark.slow
def test_distance_to_reduced_flow_shrinks_like_one_over_d():
    dims, dist = distance_to_reduced((64, 128, 256, 512, 1024), samples=4096)
    assert np.all(np.diff(dist) < 0)
    slope = np.polyfit(np.log(dims), np.log(dist), 1)[0]
    assert -1.3 <= slope <= -0.7

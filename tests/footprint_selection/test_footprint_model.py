"""The footprint model at finite d (idealized.footprint) against its d = inf theory
(theory.footprint_loss, docs/theory.md §9.4), its reduced flow, and the toy's flow."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.idealized import footprint as fpm
from weakspots.idealized.toy.config import ConfigError, FlowConfig, TrainConfig
from weakspots.sims.toy.flow import solve_many
from weakspots.sims.toy.train import train_many

Z_TOL = 4.0  # Monte Carlo: within 4 standard errors


def test_toy_config_is_untouched():
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    assert not names & {"window", "carry_gain", "decoy_gain", "topk"}
    assert {f.name for f in dataclasses.fields(FlowConfig)}.isdisjoint({"window", "carry_gain"})
    assert not fpm.is_footprint(TrainConfig()) and not fpm.is_footprint(FlowConfig())


@pytest.mark.parametrize(
    "field,value", [("window", 0), ("heads", 2), ("loss", "ce"), ("chunks", 3), ("carry_gain", -1.0)]
)
def test_config_refuses(field, value):
    with pytest.raises(ConfigError) as err:
        fpm.FootprintTrainConfig(**{"stride": 4, "window": 6, field: value})
    assert err.value.field == field


@pytest.mark.parametrize("stride,window,chunks,carry_gain,decoy_gain", [(5, 8, 21, 0.45, 0.7), (3, 2, 13, 1.1, 0.0)])
def test_large_d_loss_is_the_theory(stride, window, chunks, carry_gain, decoy_gain):
    # mean pooling at d = 10^6, gain 1: the held-out loss is L of §9.4 up to sampling noise
    config = fpm.FootprintTrainConfig(
        stride=stride, chunks=chunks, dim=10**6, gain=1.0, window=window, carry_gain=carry_gain,
        decoy_gain=decoy_gain, operator="mean_pool", eval_samples=4096,
    )
    model = fpm.init_model(None, config, 1.0, 0.0)

    @jax.jit
    def losses(phase):
        batch = fpm.sample_batch(jax.random.key(phase), config, 4096, phase=phase)
        return fpm.problem_losses(model, batch, config)[0]

    samples = np.stack([np.asarray(losses(phase), float) for phase in range(stride)])
    with jax.enable_x64(True):
        want = float(theory.footprint_loss(
            jnp.zeros(stride, jnp.float64), stride, chunks, np.ones(window), carry_gain * stride, decoy_gain * stride
        ))
    se = samples.mean(axis=1).std() / np.sqrt(stride) + samples.std() / np.sqrt(samples.size)
    assert abs(samples.mean() - want) < Z_TOL * se + 1e-4 * want
    # per phase: M from theory.footprint_flat_retrieval
    m = theory.footprint_flat_retrieval(stride, window, chunks, carry_gain, decoy_gain)
    per_phase = chunks / (chunks - 1) * (1 - m) ** 2
    np.testing.assert_allclose(samples.mean(axis=1), per_phase, rtol=2e-3, atol=2e-4)


@pytest.mark.slow
def test_window_one_flow_is_the_toys_flow():
    # c_r = [r = 0], beta_D = 0: the footprint flow at g = beta / s is the toy's reduced flow
    common = dict(stride=4, chunks=30, init_scale=0.3, seed=3, t1=400.0, saves=5)
    toy = solve_many([FlowConfig(gain=10.0, **common)])[0]
    fp = solve_many([fpm.FootprintFlowConfig(window=1, carry_gain=2.5, **common)])[0]
    np.testing.assert_allclose(fp.history.pooling_weights, toy.history.pooling_weights, atol=1e-6)
    assert np.ptp(toy.history.pooling_weights[-1]) > 0.1  # the flow moved


@pytest.mark.slow
def test_sgd_at_large_d_follows_the_footprint_flow():
    common = dict(stride=4, chunks=24, window=3, carry_gain=0.8, decoy_gain=0.4, init_scale=0.3, seed=1)
    flow = solve_many([fpm.FootprintFlowConfig(**common, t1=200.0, saves=5)])[0]
    sgd = train_many([fpm.FootprintTrainConfig(
        **common, dim=200000, gain=1.0, lr=1.0, steps=200, eval_every=50, eval_samples=256, batch=512
    )])[0]
    w_flow = flow.history.pooling_weights[:, 0]
    w_sgd = np.asarray(sgd.history.pooling_weights[:, 0])
    moved = np.abs(w_flow[-1] - w_flow[0]).max()
    assert moved > 0.05
    np.testing.assert_allclose(w_sgd, w_flow, atol=0.1 * moved)

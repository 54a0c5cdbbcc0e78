"""The reduced flow (sims.flow): an independent integrator, invariants, t = 0 limit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.sims.check import rk4
from weakspots.sims.flow import reduced_flow
from weakspots.theory import reduced_loss

RK4_TOLERANCE = 1e-6  # diffrax (rtol 1e-10) vs numpy RK4 at dt = 0.05: both far below this
# One save grid and batch size for the file: one compilation per (stride, heads, loss).
N_SAVE = 101
BATCH = 8


@pytest.mark.parametrize("heads", [1, 2])
def test_diffrax_matches_independent_rk4(heads):
    stride = 8
    chunks = np.array([64.0, 11.0, 256.0, 20.0, 64.0, 30.0, 64.0, 11.0])
    gain = np.array([16.0, 9.0, 16.0, 16.0, 24.0, 12.0, 8.0, 4.0])
    logits0 = 0.3 * np.random.default_rng(heads).standard_normal((BATCH, heads, stride))
    ts = np.linspace(0.0, 300.0, N_SAVE)
    hist = reduced_flow(
        stride=stride,
        chunks=chunks,
        heads=heads,
        gain=gain,
        init_pooling_logits=logits0,
        ts=ts,
        rtol=1e-10,
        atol=1e-12,
    )
    for run in range(0, BATCH, 2):  # half the runs: the numpy RK4 is the slow part
        logits = rk4(logits0[run], np.full(heads, gain[run]), chunks[run], ts[::20], dt=0.05)
        weights = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(hist.pooling_weights[run, ::20], weights, atol=RK4_TOLERANCE)


def test_loss_never_increases_and_t0_limit():
    keys = jax.random.split(jax.random.PRNGKey(1), BATCH)
    scales = np.array([1e-3, 0.3, 1e-2, 1e-3, 1e-2, 0.1, 1e-2, 1e-2])
    hist = reduced_flow(
        keys,
        stride=8,
        chunks=np.array([64.0, 256.0, 11.0, 20.0, 64.0, 64.0, 64.0, 64.0]),
        gain=np.array([24.0, 16.0, 9.0, 16.0, 8.0, 4.0, 1.0, 1.0]),
        init_scale=scales,
        weight_decay=np.array([0, 0, 0, 0, 0, 0, 1e-4, 1e-3]),
        learn_gain=np.array([0, 0, 0, 0, 0, 0, 1.0, 1.0]),
        t_end=2000.0,
        n_save=N_SAVE,
    )
    assert np.all(np.diff(np.asarray(hist.loss), axis=1) <= 1e-12)
    logits0 = jax.vmap(lambda k, s: s * jax.random.normal(k, (1, 8), dtype=jnp.float64))(
        keys, jnp.asarray(scales)
    )
    np.testing.assert_allclose(hist.pooling_weights[:, 0], jax.nn.softmax(logits0, -1), rtol=1e-12)
    loss0 = reduced_loss(logits0[0], jnp.array([24.0]), 64.0)
    np.testing.assert_allclose(hist.loss[0, 0], loss0, rtol=1e-12)
    # a learned gain under weight decay moves; a fixed one does not
    assert np.all(np.abs(hist.gain[-2:, -1] - 1.0) > 1e-3)
    np.testing.assert_allclose(hist.gain[:-2, -1], hist.gain[:-2, 0], rtol=1e-12)


def test_one_compilation_serves_a_sweep():
    from weakspots.sims import flow

    keys = jax.random.split(jax.random.PRNGKey(2), BATCH)
    kwargs = dict(stride=8, chunks=64.0, t_end=50.0, n_save=N_SAVE)
    reduced_flow(keys, gain=16.0, init_scale=1e-3, **kwargs)
    before = flow._solve_batch._cache_size()
    reduced_flow(
        keys,
        gain=np.array([12.0, 16.0, 20.0, 24.0, 12.0, 16.0, 20.0, 24.0]),
        init_scale=1e-2,
        weight_decay=1e-4,
        **kwargs,
    )
    assert flow._solve_batch._cache_size() == before


def test_skipping_the_event_keeps_the_trajectory():
    # event_level=None drops the event's solve; the saved trajectory is the same solve.
    keys = jax.random.split(jax.random.PRNGKey(3), BATCH)
    kwargs = dict(stride=8, chunks=64.0, gain=16.0, init_scale=1e-2, t_end=200.0, n_save=N_SAVE)
    full = reduced_flow(keys, **kwargs)
    bare = reduced_flow(keys, event_level=None, **kwargs)
    assert np.isfinite(full.specialization_time).any()  # the event does fire on this grid
    assert np.all(np.isnan(bare.specialization_time))
    np.testing.assert_allclose(bare.pooling_weights, full.pooling_weights, rtol=1e-12, atol=0)
    np.testing.assert_allclose(bare.loss, full.loss, rtol=1e-12, atol=0)

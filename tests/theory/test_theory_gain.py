"""Learned gain (theory.gain) vs docs/theory.md §6.6 and the reduced flow with a learned gain."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import keyed_starts
from weakspots.sims.toy.flow import solve_many, stack
from weakspots.theory import (
    covered,
    gain_race,
    learned_gain_outcome,
    learned_gain_states,
    reduced_loss,
    reentry_rate,
    weight_decay_equilibrium_gain,
)
from weakspots.theory.gain import dropped_phase_rate, reentry_barrier, support_ladder

GAIN_ATOL = 0.1  # docs/theory.md §6.6 quotes gains to 0.1
GAIN_RTOL = 1e-3  # ladder's final gain vs the flow's gain at t_end (the check's tolerance)
RACE_RTOL = 0.05  # 1-D race (gain at uniform pooling) vs the flow's event time
RATE_RTOL = 1e-9  # closed-form cluster rate vs autodiff of the reduced loss (float64)
T_END = 2e5


def test_equilibrium_gains_match_theory_numbers():
    np.testing.assert_allclose(weight_decay_equilibrium_gain(8, 64, 3e-4, 3), 17.5, atol=GAIN_ATOL)
    np.testing.assert_allclose(weight_decay_equilibrium_gain(8, 64, 1e-3, 1), 5.8, atol=GAIN_ATOL)
    np.testing.assert_allclose(weight_decay_equilibrium_gain(8, 64, 1e-4, 8), 47.2, atol=GAIN_ATOL)
    states = {
        k: (beta, internal, external)
        for k, beta, internal, external in learned_gain_states(8, 64, 3e-4)
    }
    assert not states[2][2] and states[3][1] and states[3][2]  # 2 phases re-enter, 3 hold


@pytest.mark.parametrize(
    ("gain", "k", "weight"), [(41.8, 7, 3e-3), (17.5, 3, 0.02), (30.0, 2, 0.1)]
)
def test_dropped_phase_rate_is_the_flow_at_finite_weight(gain, k, weight):
    """d log a/dt of a dropped phase: closed form vs -grad of the §5 loss (autodiff)."""
    s, n = 8, 64.0
    weights = np.concatenate([np.full(k, (1 - weight) / k), [weight], np.full(s - k - 1, 1e-30)])
    logits = jnp.log(jnp.asarray(weights))[None]
    da = -jax.grad(reduced_loss)(logits, jnp.asarray([gain]), n)[0]
    alpha = jax.nn.softmax(logits[0])
    dlog = float(da[k] - jnp.sum(alpha * da))
    np.testing.assert_allclose(dropped_phase_rate(s, n, gain, k, weight), dlog, rtol=RATE_RTOL)
    # its a -> 0 limit is theory.support's kappa a
    tiny = 1e-9
    np.testing.assert_allclose(
        dropped_phase_rate(s, n, gain, k, tiny), reentry_rate(s, n, gain, k) * tiny, rtol=1e-6
    )


def test_the_7_phase_state_at_wd_1e4_is_stable_only_for_tiny_dropped_weights():
    """The mechanism: kappa < 0 at the 7-state's equilibrium gain, but its barrier is 0.002."""
    beta = weight_decay_equilibrium_gain(8, 64.0, 1e-4, 7)
    assert reentry_rate(8, 64.0, beta, 7) < 0
    barrier = reentry_barrier(8, 64.0, beta, 7)
    assert 1e-3 < barrier < 3e-3
    assert dropped_phase_rate(8, 64.0, beta, 7, 2 * barrier) > 0
    assert dropped_phase_rate(8, 64.0, beta, 7, 0.5 * barrier) < 0


@pytest.mark.parametrize(("wd", "k_end"), [(1e-4, 8), (2e-4, 4)])
def test_ladder_end_state_forgets_the_dropped_weights(wd, k_end):
    t_spec, beta = gain_race(8, 64.0, 1.0, wd, 1e-3, T_END, "linear")
    ends = [
        support_ladder(8, 64.0, beta, 2, wd, t_spec, T_END, "linear", dropped_weights=w)[:2]
        for w in (np.geomspace(0.01, 0.008, 6), np.geomspace(0.06, 0.03, 6))
    ]
    assert [k for k, _ in ends] == [k_end, k_end]
    np.testing.assert_allclose(ends[0][1], ends[1][1], rtol=GAIN_RTOL)


def _flow_end_states(wds, scale, parametrisation):
    configs = [
        FlowConfig(
            stride=8,
            chunks=64,
            gain=1.0,
            learn_gain=True,
            weight_decay=wd,
            init_scale=scale,
            t1=T_END,
            saves=3,
            gain_parametrisation=parametrisation,
        )
        for wd in wds
    ]
    hist = stack(solve_many(configs, starts=keyed_starts(0, len(wds), 1, 8, scale)))
    final_k = covered(np.asarray(hist.pooling_weights[:, -1, 0]), 8).sum(axis=-1)
    return final_k, np.asarray(hist.gain[:, -1, 0]), np.asarray(hist.specialization_time)


def _assert_outcomes_match(wds, scale, parametrisation):
    final_k, final_gain, t_event = _flow_end_states(wds, scale, parametrisation)
    for i, wd in enumerate(wds):
        k, beta = learned_gain_outcome(8, 64.0, 1.0, wd, scale, T_END, parametrisation)
        assert final_k[i] == k, (wd, final_k[i], k)
        np.testing.assert_allclose(final_gain[i], beta, rtol=GAIN_RTOL)
        t_race, _ = gain_race(8, 64.0, 1.0, wd, scale, T_END, parametrisation)
        if np.isinf(t_race):
            assert np.isinf(t_event[i])
        else:
            np.testing.assert_allclose(t_event[i], t_race, rtol=RACE_RTOL)


@pytest.mark.slow
def test_outcome_matches_flow_where_the_old_criterion_failed():
    """wd = 1e-4 ends uniform (gain 47.17) although kappa < 0 at the 7-state; wd = 3e-4 on 3."""
    _assert_outcomes_match([1e-4, 3e-4], 1e-3, "linear")


@pytest.mark.slow
def test_outcome_matches_flow_over_weight_decays():
    _assert_outcomes_match([0.0, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3], 1e-3, "linear")


@pytest.mark.slow
def test_outcome_matches_flow_log_gain():
    """Under log beta the gain outruns the instability at every weight decay (uniform end)."""
    _assert_outcomes_match([0.0, 1e-4, 3e-4, 1e-3], 1e-3, "log")

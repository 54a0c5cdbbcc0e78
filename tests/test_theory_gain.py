"""Learned gain (theory.gain) vs THEORY 6.6 and the reduced flow with a learned gain."""

import jax
import numpy as np
import pytest

from sims.flow import reduced_flow
from theory import (
    gain_race,
    learned_gain_outcome,
    learned_gain_states,
    weight_decay_equilibrium_gain,
)

GAIN_ATOL = 0.1  # THEORY 6.6 quotes gains to 0.1
RACE_RTOL = 0.05  # 1-D race (gain at uniform pooling) vs the flow's event time


def test_equilibrium_gains_match_theory_numbers():
    np.testing.assert_allclose(weight_decay_equilibrium_gain(8, 64, 3e-4, 3), 17.5, atol=GAIN_ATOL)
    np.testing.assert_allclose(weight_decay_equilibrium_gain(8, 64, 1e-3, 1), 5.8, atol=GAIN_ATOL)
    np.testing.assert_allclose(weight_decay_equilibrium_gain(8, 64, 1e-4, 8), 47.2, atol=GAIN_ATOL)
    states = {
        k: (beta, internal, external)
        for k, beta, internal, external in learned_gain_states(8, 64, 3e-4)
    }
    assert not states[2][2] and states[3][1] and states[3][2]  # 2 phases re-enter, 3 hold


@pytest.mark.slow
def test_learned_gain_flow_matches_outcome_and_race():
    wds = np.array([0.0, 1e-4, 3e-4, 1e-3] * 2)
    scales = np.repeat([1e-3, 1e-2], 4)
    hist = reduced_flow(
        jax.random.split(jax.random.PRNGKey(0), 8),
        stride=8,
        chunks=64.0,
        gain=1.0,
        learn_gain=True,
        weight_decay=wds,
        init_scale=scales,
        t_end=2e5,
        n_save=101,
        gain_parametrisation="linear",  # THEORY 6.6's convention
    )
    final_k = (np.asarray(hist.pooling_weights[:, -1, 0]) > 1 / 16).sum(axis=-1)
    final_gain = np.asarray(hist.gain[:, -1, 0])
    for i, (wd, scale) in enumerate(zip(wds, scales, strict=True)):
        t_race, _ = gain_race(8, 64.0, 1.0, wd, scale, 2e5, "linear")
        np.testing.assert_allclose(hist.specialization_time[i], t_race, rtol=RACE_RTOL)
        if wd in (3e-4, 1e-3):  # THEORY: 17.5 on 3 phases, 5.8 on 1
            k, beta = learned_gain_outcome(8, 64.0, 1.0, wd, scale, 2e5, "linear")
            assert final_k[i] == k
            np.testing.assert_allclose(final_gain[i], beta, rtol=1e-3)
        if wd == 1e-4:  # ends uniform at the uniform state's equilibrium gain
            assert final_k[i] == 8
            np.testing.assert_allclose(
                final_gain[i], weight_decay_equilibrium_gain(8, 64, wd, 8), rtol=1e-3
            )

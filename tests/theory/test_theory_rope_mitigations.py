"""RoPE anchoring and mitigations (theory.rope, theory.mitigations) vs the reduced flow."""

import numpy as np

from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import keyed_starts
from weakspots.sims.toy.flow import solve_many, stack
from weakspots.theory import (
    entropy_critical_weight,
    offset_ensemble_accuracy,
    overlap_coverage,
    rope_attenuation,
    rope_weak_phases,
    stagger_offsets,
    staggered_coverage,
)

N_SAVE = 101
BATCH = 8


def test_rope_anchoring_pins_the_weak_phases():
    kappa = rope_attenuation(8, 64, 64)
    assert kappa[0] == 1.0 and np.all(np.diff(kappa[:6]) < 0)
    config = FlowConfig(stride=8, chunks=64, gain=16.0, init_scale=1e-3, t1=4000.0, saves=N_SAVE)
    starts = keyed_starts(11, BATCH, 1, 8, 1e-3)
    hist = stack(solve_many([config] * BATCH, starts=starts, phase_scale=kappa))
    weak = np.asarray(hist.pooling_weights[:, -1, 0]) < 1 / 16
    k = int(8 - weak[0].sum())
    assert np.all(weak == rope_weak_phases(8, 64, 64, k)[None])


def test_entropy_regulariser_threshold():
    eps_c = entropy_critical_weight(8, 64.0, 16.0)
    factors = np.array([0.8, 0.9, 0.95, 1.05, 1.1, 1.2, 0.5, 2.0])
    configs = [
        FlowConfig(
            stride=8,
            chunks=64,
            gain=16.0,
            init_scale=1e-3,
            phase_entropy=float(eps),
            t1=4000.0,
            saves=N_SAVE,
        )
        for eps in factors * eps_c
    ]
    hist = stack(solve_many(configs, starts=keyed_starts(12, BATCH, 1, 8, 1e-3)))
    logs = np.log(np.asarray(hist.pooling_weights[:, :, 0]))
    spread = np.linalg.norm(logs - logs.mean(axis=-1, keepdims=True), axis=-1)
    below = factors < 1
    assert np.all(np.isfinite(hist.specialization_time[below]))
    assert np.all(spread[~below, -1] < spread[~below, 0])


def test_mitigation_coverage_rules():
    support = np.array([1, 1, 1, 0, 0, 0, 0, 0], bool)
    offsets = stagger_offsets(8, 3)
    assert list(offsets) == [0, 2, 5]
    assert staggered_coverage(support, offsets).sum() == 8  # tied weights, shifted supports
    assert list(overlap_coverage(np.r_[support, np.roll(support, 4)])) == [1, 1, 1, 0, 1, 1, 1, 0]
    acc = np.where(support, 1.0, 1 / 64)
    np.testing.assert_allclose(offset_ensemble_accuracy(acc, 4, np.inf, 64), 1.0)
    np.testing.assert_allclose(offset_ensemble_accuracy(acc, 8, 64).std(), 0.0, atol=1e-12)

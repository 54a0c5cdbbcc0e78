"""Support sizes and re-entry (theory.support) vs the diffrax reduced flow."""

import numpy as np
import pytest

from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import keyed_starts
from weakspots.sims.experiments.measure import REENTRY_RTOL, reentry_slopes
from weakspots.sims.toy.flow import solve_many, stack
from weakspots.theory import (
    covered,
    predicted_support_size,
    reentry_time,
    stable_support_sizes,
    support_loss,
)

N_SAVE = 101
BATCH = 8


def test_admissible_sets_match_theory_observations():
    # docs/theory.md §6.4 outcomes all lie in the derived admissible sets.
    assert list(stable_support_sizes(8, 64, 16.0)) == [3, 4]
    assert list(stable_support_sizes(8, 256, 16.0)) == [2, 3]
    assert list(stable_support_sizes(6, 11, 9.0)) == [4, 5]
    assert list(stable_support_sizes(8, 64, 24.0)) == [4, 5, 6]
    # below threshold uniform pooling is the only stable state's size, among others
    assert 8 in stable_support_sizes(8, 15, 16.0)
    # docs/theory.md §6.11: the 3-phase state's loss is about 0.63, uniform's 0.80 ... at mse
    np.testing.assert_allclose(support_loss(8, 64, 16.0, 3), 0.636, atol=2e-3)


def test_dropped_weight_follows_leading_order_law():
    """1/alpha_j moves linearly at rate -kappa: re-entry (kappa > 0) or 1/t decay (kappa < 0)."""
    stride, chunks = 8, 64.0
    kappa, measured = reentry_slopes()
    assert (kappa > 0).any() and (kappa < 0).any()
    np.testing.assert_allclose(measured, kappa, rtol=REENTRY_RTOL)
    assert np.isinf(reentry_time(stride, chunks, 16.0, 3, 1e-4))
    np.testing.assert_allclose(reentry_time(stride, chunks, 16.0, 2, 1e-4), 1e4 / kappa[0])


SUPPORT_CONFIGS = [(8, 64, 16.0), (8, 256, 16.0), (6, 11, 9.0), (8, 64, 24.0), (4, 64, 8.0)]


@pytest.mark.slow
@pytest.mark.parametrize(("stride", "chunks", "gain"), SUPPORT_CONFIGS + [(8, 20, 16.0)])
def test_support_distribution_matches_flow(stride, chunks, gain):
    sizes, probs, admissible = predicted_support_size(stride, chunks, gain, samples=128)
    predicted = dict(zip(sizes.tolist(), probs.tolist(), strict=True))
    scales = np.geomspace(1e-5, 1e-2, BATCH)
    configs = [
        FlowConfig(stride=stride, chunks=chunks, gain=gain, init_scale=x, t1=8000.0, saves=N_SAVE)
        for x in scales
    ]
    hist = stack(solve_many(configs, starts=keyed_starts(chunks, BATCH, 1, stride, scales)))
    ode = covered(hist.pooling_weights[:, -1, 0], stride).sum(axis=-1)
    assert set(ode.tolist()) <= set(admissible.tolist())
    assert all(predicted.get(k, 0.0) >= 0.02 for k in ode.tolist())
    for k, p in predicted.items():
        if p >= 0.95:
            assert np.all(ode == k)
        assert abs(np.mean(ode == k) - p) <= 0.45  # 8 starts: a coarse check on the mix

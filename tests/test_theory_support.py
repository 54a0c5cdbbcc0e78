"""Support sizes and re-entry (theory.support) vs the diffrax reduced flow."""

import jax
import numpy as np
import pytest

from sims.flow import reduced_flow
from theory import (
    covered,
    predicted_support_size,
    reentry_rate,
    reentry_time,
    stable_support_sizes,
    support_loss,
)

REENTRY_RTOL = 0.02  # leading order in the dropped weight (1e-4 here)
N_SAVE = 101
BATCH = 8


def test_admissible_sets_match_theory_observations():
    # THEORY 6.4 outcomes all lie in the derived admissible sets.
    assert list(stable_support_sizes(8, 64, 16.0)) == [3, 4]
    assert list(stable_support_sizes(8, 256, 16.0)) == [2, 3]
    assert list(stable_support_sizes(6, 11, 9.0)) == [4, 5]
    assert list(stable_support_sizes(8, 64, 24.0)) == [4, 5, 6]
    # below threshold uniform pooling is the only stable state's size, among others
    assert 8 in stable_support_sizes(8, 15, 16.0)
    # THEORY 6.11: the 3-phase state's loss is about 0.63, uniform's 0.80 ... at mse
    np.testing.assert_allclose(support_loss(8, 64, 16.0, 3), 0.636, atol=2e-3)


def test_dropped_weight_follows_leading_order_law():
    """1/alpha_j moves linearly at rate -kappa: re-entry (kappa > 0) or 1/t decay (kappa < 0)."""
    stride, chunks = 8, 64.0
    cases = [(16.0, 2), (16.0, 1), (24.0, 3), (16.0, 3), (16.0, 4), (24.0, 5), (9.0, 1), (30.0, 4)]
    logits0 = np.full((BATCH, 1, stride), -40.0)
    for i, (_, k) in enumerate(cases):
        logits0[i, 0, :k] = 0.0
        logits0[i, 0, k] = np.log(1e-4 * k)  # weight 1e-4 on phase k
    gains = np.array([g for g, _ in cases])
    kappa = np.array([reentry_rate(stride, chunks, g, k) for g, k in cases])
    t_end = 0.2 / np.max(np.abs(kappa) * 1e-4)
    hist = reduced_flow(
        stride=stride,
        chunks=chunks,
        gain=gains,
        init_pooling_logits=logits0,
        t_end=t_end,
        n_save=N_SAVE,
        rtol=1e-10,
        atol=1e-12,
    )
    inverse = 1.0 / np.asarray(hist.pooling_weights[:, :, 0, :])
    for i, (_, k) in enumerate(cases):
        slope = (inverse[i, 10, k] - inverse[i, 0, k]) / float(hist.times[i, 10])
        np.testing.assert_allclose(-slope, kappa[i], rtol=REENTRY_RTOL)
    assert np.isinf(reentry_time(stride, chunks, 16.0, 3, 1e-4))
    np.testing.assert_allclose(reentry_time(stride, chunks, 16.0, 2, 1e-4), 1e4 / kappa[0])


SUPPORT_CONFIGS = [(8, 64, 16.0), (8, 256, 16.0), (6, 11, 9.0), (8, 64, 24.0), (4, 64, 8.0)]


@pytest.mark.slow
@pytest.mark.parametrize(("stride", "chunks", "gain"), SUPPORT_CONFIGS + [(8, 20, 16.0)])
def test_support_distribution_matches_flow(stride, chunks, gain):
    sizes, probs, admissible = predicted_support_size(stride, chunks, gain, samples=128)
    predicted = dict(zip(sizes.tolist(), probs.tolist(), strict=True))
    hist = reduced_flow(
        jax.random.split(jax.random.PRNGKey(chunks), BATCH),
        stride=stride,
        chunks=chunks,
        gain=gain,
        init_scale=np.geomspace(1e-5, 1e-2, BATCH),
        t_end=8000.0,
        n_save=N_SAVE,
    )
    ode = covered(hist.pooling_weights[:, -1, 0], stride).sum(axis=-1)
    assert set(ode.tolist()) <= set(admissible.tolist())
    assert all(predicted.get(k, 0.0) >= 0.02 for k in ode.tolist())
    for k, p in predicted.items():
        if p >= 0.95:
            assert np.all(ode == k)
        assert abs(np.mean(ode == k) - p) <= 0.45  # 8 starts: a coarse check on the mix

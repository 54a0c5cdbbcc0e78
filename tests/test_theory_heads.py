"""Multi-head coverage (theory.heads) vs THEORY 6.5/6.8 and the reduced flow."""

import jax
import numpy as np
import pytest

from weakspots.sims.flow import reduced_flow
from weakspots.theory import coverage_summary, predicted_coverage


@pytest.mark.slow
@pytest.mark.parametrize(
    ("heads", "loss", "expected"), [(2, "mse", ((3, 3), 2, 0)), (2, "ce", ((4, 4), 0, 0))]
)
def test_two_heads_partition_as_predicted_and_as_the_flow(heads, loss, expected):
    dist = predicted_coverage(8, 64.0, 16.0, heads, loss, samples=64)
    top, p = next(iter(dist.items()))
    assert top == expected and p >= 0.8
    hist = reduced_flow(
        jax.random.split(jax.random.PRNGKey(7), 8),
        stride=8,
        chunks=64.0,
        heads=heads,
        gain=16.0,
        init_scale=np.geomspace(1e-4, 0.3, 8),
        loss=loss,
        t_end=40000.0,
        n_save=101,
    )
    outcomes = [coverage_summary(np.asarray(w), 8) for w in hist.pooling_weights[:, -1]]
    assert all(o in dist for o in outcomes)
    assert np.mean([o == top for o in outcomes]) >= 0.6

"""Multi-head coverage (theory.heads) vs docs/theory.md §6.5/§6.8 and the reduced flow."""

import numpy as np
import pytest

from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import keyed_starts
from weakspots.sims.toy.flow import solve_many, stack
from weakspots.theory import coverage_summary, predicted_coverage


@pytest.mark.slow
@pytest.mark.parametrize(
    ("heads", "loss", "expected"), [(2, "mse", ((3, 3), 2, 0)), (2, "ce", ((4, 4), 0, 0))]
)
def test_two_heads_partition_as_predicted_and_as_the_flow(heads, loss, expected):
    dist = predicted_coverage(8, 64.0, 16.0, heads, loss, samples=64)
    top, p = next(iter(dist.items()))
    assert top == expected and p >= 0.8
    scales = np.geomspace(1e-4, 0.3, 8)
    configs = [
        FlowConfig(stride=8, chunks=64, heads=heads, gain=16.0, init_scale=x, loss=loss, t1=40000.0)
        for x in scales
    ]
    hist = stack(solve_many(configs, starts=keyed_starts(7, 8, heads, 8, scales)))
    outcomes = [coverage_summary(np.asarray(w), 8) for w in hist.pooling_weights[:, -1]]
    assert all(o in dist for o in outcomes)
    assert np.mean([o == top for o in outcomes]) >= 0.6

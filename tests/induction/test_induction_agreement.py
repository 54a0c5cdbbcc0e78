"""Slow agreement runs: the coverage law against 256 seeds of the flow and of SGD on a
config the experiments do not use, each in one compiled program; SGD follows the flow."""

import numpy as np
import pytest
from scipy.stats import norm

from weakspots import theory
from weakspots.idealized.induction import InductionFlowConfig, InductionTrainConfig
from weakspots.sims.induction.flow import solve, starts
from weakspots.sims.induction.train import train_runs

SEEDS = 256
Z = float(norm.ppf(1 - 0.001 / 2))
PHYSICS = dict(stride=5, heads=3, chunks=6, vocab=2048, gamma=5.0, beta=1.5)


def _inside_wilson(count, n, p):
    freq = count / n
    centre = (freq + Z**2 / (2 * n)) / (1 + Z**2 / n)
    half = Z * np.sqrt(freq * (1 - freq) / n + Z**2 / (4 * n**2)) / (1 + Z**2 / n)
    return centre - half <= p <= centre + half


def _distinct(history):
    return np.array([history.summary(i)["distinct"] for i in range(len(history.seeds))])


@pytest.mark.slow
def test_flow_coverage_matches_the_occupancy_law():
    config = InductionFlowConfig(**PHYSICS, init_scale=0.01, t1=1500.0, saves=5)
    history = solve(config, range(1000, 1000 + SEEDS))
    counts = np.bincount(_distinct(history), minlength=4)
    law = theory.induction_coverage_distribution(3, 5)
    for k in (1, 2, 3):
        assert _inside_wilson(counts[k], SEEDS, law[k]), (k, counts, law)
    # the flow never raises its loss
    assert np.all(np.diff(history.loss, axis=1) <= 1e-9)
    # most heads select the pair their start favours (the linearised flow)
    logits = np.asarray(starts(config, range(1000, 1000 + SEEDS)).logits)
    chosen = theory.induction_selected_positions(logits[:, :, 0], logits[:, :, 1])
    positions = np.array([history.summary(i)["positions"] for i in range(SEEDS)])
    assert np.mean(chosen == positions) > 0.9


@pytest.mark.slow
def test_quiet_sgd_coverage_matches_the_occupancy_law():
    config = InductionTrainConfig(**PHYSICS, init_scale=0.3, lr=0.2, batch=256, steps=800, eval_every=400)
    counts = np.bincount(_distinct(train_runs(config, range(2000, 2000 + SEEDS))), minlength=4)
    law = theory.induction_coverage_distribution(3, 5)
    for k in (1, 2, 3):
        assert _inside_wilson(counts[k], SEEDS, law[k]), (k, counts, law)

"""The induction runs several experiments read, memoised in the process (one compile and one
solve serve every experiment of a process that asks for the same config and seeds)."""

from __future__ import annotations

import functools

import numpy as np
from scipy.stats import norm

from weakspots.idealized.induction import InductionFlowConfig, InductionTrainConfig
from weakspots.sims.induction.content import solve_many as solve_content
from weakspots.sims.induction.flow import solve
from weakspots.sims.induction.train import train_runs

Z = float(norm.ppf(1 - 0.001 / 2))  # the rows' binomial intervals: 99.9%, two-sided

# The canonical induction physics (the numbers) and m = S - 1 heads, so that distinct
# positions cover every phase: one flow of many seeds serves coverage, per-phase accuracy,
# Theorem 2's end state and the concentration plane (memoised below).
PHYSICS = dict(stride=4, heads=3, chunks=8, vocab=4096, gamma=6.0, beta=2.0)
FLOW = InductionFlowConfig(**PHYSICS, init_scale=0.01, t1=4000.0, saves=41)
# SGD whose minibatch noise is small against its start (it follows the flow) ...
QUIET = InductionTrainConfig(**PHYSICS, init_scale=0.3, lr=0.2, batch=256, steps=600, eval_every=50)
# ... and SGD whose noise, shared by every head, is large against it (one compile for both)
NOISY = InductionTrainConfig(**PHYSICS, init_scale=0.01, lr=1.0, batch=256, steps=600, eval_every=50)
SEEDS = {"tiny": 16, "quick": 256, "full": 1024}


@functools.cache
def flows(config: InductionFlowConfig, seeds: int):
    """`solve(config, range(seeds))`, once per process."""
    return solve(config, range(seeds))


@functools.cache
def sgd(config: InductionTrainConfig, seeds: int):
    """`train_runs(config, range(seeds))`, once per process."""
    return train_runs(config, range(seeds))


@functools.cache
def content_flows(configs: tuple):
    """`sims.induction.content.solve_many(configs)`, once per process."""
    return solve_content(configs)


def wilson(count: int, total: int, z: float = Z) -> tuple[float, float]:
    """The Wilson score interval of count / total at z."""
    p, n = count / total, float(total)
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return float(centre - half), float(centre + half)

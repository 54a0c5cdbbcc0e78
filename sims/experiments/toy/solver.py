"""The solver: diffrax's Tsit5 with a PID controller against an independent numpy RK4."""

from __future__ import annotations

import numpy as np

from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import CHUNKS, GAIN, STRIDE, solve_from
from weakspots.sims.experiments.experiment import Experiment, Row, no_difference
from weakspots.sims.experiments.measure import rk4

# Both solve one smooth ODE to t = 300: diffrax at rtol 1e-10, RK4 at step 0.05 (error
# O(h^4) per unit time); the weights they give agree to their own truncation errors.
RK4_ATOL = 1e-6


def run(size: None) -> dict:
    """Max abs pooling-weight difference of the two solvers from one start, over t in [0, 300]."""
    del size
    logits0 = 0.3 * np.random.default_rng(1).standard_normal((8, 1, STRIDE))
    config = FlowConfig(stride=STRIDE, chunks=CHUNKS, gain=GAIN, t1=300.0, rtol=1e-10, atol=1e-12)
    ts = np.linspace(0.0, config.t1, config.saves)
    hist = solve_from([config] * len(logits0), logits0, ts)
    logits = rk4(logits0[0], np.array([GAIN]), float(CHUNKS), ts[::20], dt=0.05)
    weights = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    return {
        "max_difference": float(np.max(np.abs(np.asarray(hist.pooling_weights[0, ::20]) - weights)))
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The solvers' difference (consistency: one system, two solvers; predicted 0)."""
    return [
        Row(
            "solver: diffrax Tsit5+PID vs numpy RK4 (max abs weight)",
            "s=8 N=64 gain=16 init 0.3, t in [0, 300], RK4 dt=0.05",
            kind="consistency",
            predicted=predictions["max_difference"],
            ode=results["max_difference"],
            tolerance=RK4_ATOL,
            floor=1.0,
        )
    ]


EXPERIMENT = Experiment("solver", run, no_difference, rows)

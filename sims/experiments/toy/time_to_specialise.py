"""Time to specialise from starts of three sizes: the flow's mean t* against the closed form."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import CHUNKS, GAIN, STRIDE, solve_from
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import mean_half_width

INIT_SCALES = (1e-6, 1e-4, 1e-2)
STARTS = 8


def run(size: None) -> dict:
    """t* (delta reaches 0.25, root-found) of STARTS reduced flows per init scale."""
    del size
    rng = np.random.default_rng(STRIDE + CHUNKS)
    config = FlowConfig(stride=STRIDE, chunks=CHUNKS, gain=GAIN, t1=3000.0, rtol=1e-9, atol=1e-14)
    times = []
    for init_scale in INIT_SCALES:
        logits0 = init_scale * rng.standard_normal((STARTS, 1, STRIDE))
        times.append(solve_from([config] * STARTS, logits0).specialization_time)
    return {"init_scales": INIT_SCALES, "times": times}


def predict(size: None, results: dict) -> dict:
    """theory.specialization_time: (log 0.25 - E log delta_0)/lambda + tau, per init scale."""
    del size
    return {
        "times": [
            theory.specialization_time(STRIDE, CHUNKS, GAIN, a) for a in results["init_scales"]
        ]
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The closed form (a prediction) against the mean over starts, per init scale, within
    the sampling interval of that mean (t* varies with the start)."""
    return [
        Row(
            f"time to specialise t* (mean of {len(times)} starts)",
            f"s=8 N=64 gain=16 init_scale={init_scale:g}",
            kind="prediction",
            predicted=predicted,
            ode=float(np.mean(times)),
            tolerance=mean_half_width(times) / predicted,
        )
        for init_scale, times, predicted in zip(
            results["init_scales"], results["times"], predictions["times"], strict=True
        )
    ]


EXPERIMENT = Experiment("time_to_specialise", run, predict, rows)

"""Multi-head coverage: how many phases two heads leave uncovered, flows against the sampled law."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import CHUNKS, GAIN, STRIDE, keyed_starts, solve_from
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import normal_half_width

HEADS = 2
STARTS = 8  # flows, at init scales spread over 1e-4 .. 0.3
SIZES = {"tiny": 16, "quick": 16, "full": 64}  # isotropic starts of the coverage prediction


def run(samples: int) -> dict:
    """Coverage outcome (theory.coverage_summary) of each flow at t = 40000."""
    del samples
    config = FlowConfig(stride=STRIDE, chunks=CHUNKS, heads=HEADS, gain=GAIN, t1=40000.0)
    starts = keyed_starts(7, STARTS, HEADS, STRIDE, np.geomspace(1e-4, 0.3, STARTS))
    hist = solve_from([config] * STARTS, starts)
    outcomes = [theory.coverage_summary(np.asarray(w), STRIDE) for w in hist.pooling_weights[:, -1]]
    return {"outcomes": outcomes}


def predict(samples: int, results: dict) -> dict:
    """theory.predicted_coverage: outcome -> probability over isotropic starts."""
    del results
    dist = theory.predicted_coverage(STRIDE, CHUNKS, GAIN, HEADS, samples=samples)
    return {
        "outcomes": [list(key) for key in dist],
        "probabilities": list(dist.values()),
        "samples": samples,
    }


def _outcome(x) -> tuple:
    """A coverage outcome as theory.coverage_summary gives it, from its JSON form."""
    per_head, uncovered, doubled = x
    return tuple(per_head), uncovered, doubled


def rows(results: dict, predictions: dict) -> list[Row]:
    """The law's mean number of uncovered phases against the flows' (consistency: the law
    integrates the same flow from other starts), within the sampling interval of the
    difference of the two means; every outcome must be one the law gives."""
    dist = {
        _outcome(o): p
        for o, p in zip(predictions["outcomes"], predictions["probabilities"], strict=True)
    }
    outcomes = [_outcome(o) for o in results["outcomes"]]
    top = next(iter(dist))
    predicted = sum(p * key[1] for key, p in dist.items())
    variance = sum(p * (key[1] - predicted) ** 2 for key, p in dist.items())
    noise = normal_half_width(variance * (1 / len(outcomes) + 1 / predictions["samples"]))
    return [
        Row(
            "multi-head coverage: uncovered phases (mean)",
            f"s=8 N=64 gain=16 H=2; predicted top {top[0]} p={dist[top]:.2f}; "
            f"ODE top share {np.mean([o == top for o in outcomes]):.2f}",
            kind="consistency",
            predicted=predicted,
            ode=float(np.mean([o[1] for o in outcomes])),
            tolerance=noise / predicted if predicted else 0.0,  # no spread: exact
            holds=all(o in dist for o in outcomes),
        )
    ]


EXPERIMENT = Experiment("head_coverage", run, predict, rows, sizes=SIZES)

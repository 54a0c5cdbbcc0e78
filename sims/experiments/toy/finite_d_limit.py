"""The d -> inf limit: the finite-d flow approaches the reduced flow as 1/d, and L_d corrects it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import flows_from_the_trainers_start, reduced_weights

CORRECTED_DIM = 256
# An allowance, not derived: the slope is fitted to a few dims, and each distance carries
# the finite flow's sample noise, which does not shrink as 1/d.
SLOPE_ATOL = 0.3


@dataclass(frozen=True)
class Size:
    """The dimensions d of the finite-d flows (CORRECTED_DIM among them), and its sample's
    problems."""

    dims: tuple[int, ...]
    samples: int


SIZES = {
    "tiny": Size((64, 256, 1024), 4096),
    "quick": Size((64, 256, 1024), 4096),
    "full": Size((64, 128, 256, 512, 1024), 16384),
}


def run(size: Size) -> dict:
    """Max abs distance of the finite-d flow (trainer's start, fixed sample) to the reduced
    flow at each d, to the L_d flow at d = 256, and to the same flow on a second sample."""
    dims, samples = size.dims, size.samples
    ts, finite, start = flows_from_the_trainers_start(dims, samples)
    distance = np.max(np.abs(finite - reduced_weights(start, ts)), axis=(1, 2, 3))
    at = dims.index(CORRECTED_DIM)
    _, second, _ = flows_from_the_trainers_start((CORRECTED_DIM,), samples, sample_seed=1)
    corrected = reduced_weights(start, ts, dim=float(CORRECTED_DIM))
    return {
        "dims": dims,
        "samples": samples,
        "distance": distance,
        "corrected": float(np.max(np.abs(finite[at] - corrected))),
        "sample_noise": float(np.max(np.abs(finite[at] - second[0]))),
    }


def predict(size: Size, results: dict) -> dict:
    """The finite-d correction is O(1/d) (theory.finite_d): slope -1 in log-log; the L_d flow
    is the finite flow's expectation: a difference of 0 up to the sample's own noise."""
    del size, results
    return {"slope": -1.0, "corrected": 0.0}


def rows(results: dict, predictions: dict) -> list[Row]:
    """The 1/d slope (a prediction) and the L_d flow against the sample flow (consistency:
    one system, an infinite against a finite sample), within the distance between two
    samples' flows."""
    dims, distance = results["dims"], np.asarray(results["distance"])
    slope = float(np.polyfit(np.log(dims), np.log(distance), 1)[0])
    shown = ", ".join(f"d={d}: {x:.4f}" for d, x in zip(dims, distance, strict=True))
    uncorrected = float(distance[dims.index(CORRECTED_DIM)])
    return [
        Row(
            "finite-d flow -> reduced flow as 1/d (log-log slope of max abs distance)",
            f"s=8 N=64 gain=16 init 0.3; {shown}",
            kind="prediction",
            predicted=predictions["slope"],
            ode=slope,
            tolerance=SLOPE_ATOL,
        ),
        Row(
            "L_d-corrected flow within the finite flow's sample noise (max abs distance)",
            f"s=8 N=64 gain=16 d=256 init 0.3, {results['samples']} needles; L_inf flow at "
            f"{uncorrected:.4f}; tolerance = distance between two samples' flows",
            kind="consistency",
            predicted=predictions["corrected"],
            ode=results["corrected"],
            tolerance=results["sample_noise"],
            floor=1.0,
        ),
    ]


EXPERIMENT = Experiment("finite_d_limit", run, predict, rows, sizes=SIZES)

"""SGD's time to specialise with gradient noise, at the reduced flow's init scales."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments.canonical import CHUNKS, DIM, GAIN, STRIDE, train
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import order_parameter

SCALES = tuple(float(a) for a in np.geomspace(1e-5, 0.3, 7))  # the reduced flow's init scales
LEVEL = 0.25  # the specialisation event (theory.specialization_time)
STEPS = 120  # t = 240: past t* at every scale (the linear stage's noise sets it near 25)
LR, BATCH = 2.0, 256


@dataclass(frozen=True)
class Size:
    """The init scales trained and SGD seeds per scale."""

    init_scales: tuple[float, ...]
    seeds: int


# Every scale at full; below it 1e-5 and 9.7e-3 (below the noise floor) and 5.4e-2 (above).
SIZES = {
    "tiny": Size(tuple(SCALES[i] for i in (0, 4, 5)), seeds=4),
    "quick": Size(tuple(SCALES[i] for i in (0, 4, 5)), seeds=4),
    "full": Size(SCALES, seeds=16),
}


def configs(size: Size) -> list[TrainConfig]:
    """The canonical SGD run at each init scale, evaluated every step, size.seeds each."""
    return [
        TrainConfig(init_scale=a, steps=STEPS, eval_every=1, eval_samples=16, seed=i)
        for a in size.init_scales
        for i in range(size.seeds)
    ]


def _crossing(times, delta) -> float:
    above = np.flatnonzero(delta >= LEVEL)
    if not above.size:
        return math.inf
    i = int(above[0])
    if i == 0:
        return float(times[0])
    f = (LEVEL - delta[i - 1]) / (delta[i] - delta[i - 1])
    return float(times[i - 1] + f * (times[i] - times[i - 1]))


def run(size: Size) -> dict:
    """t* of each SGD run (time lr x step at which delta reaches LEVEL), per init scale."""
    results = train(configs(size))
    seeds = size.seeds
    times = [
        [
            _crossing(r.history.times, order_parameter(r.history.pooling_weights))
            for r in results[j * seeds : (j + 1) * seeds]
        ]
        for j in range(len(size.init_scales))
    ]
    return {"init_scales": size.init_scales, "times": times}


def predict(size: Size, results: dict) -> dict:
    """theory.sgd_specialization_time's median at each scale (docs/theory.md §9.3), and the
    d = inf reduced flow's t* (theory.specialization_time) for comparison."""
    del size
    scales = results["init_scales"]
    moments = theory.uniform_moments(STRIDE, CHUNKS, DIM, GAIN)
    return {
        "median": [
            theory.sgd_specialization_time(
                STRIDE, CHUNKS, GAIN, a, DIM, LR, BATCH, moments=moments
            )["time"]
            for a in scales
        ],
        "ode": [float(theory.specialization_time(STRIDE, CHUNKS, GAIN, a)) for a in scales],
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The SGD median t* against the prediction, within half the distribution-free interval
    of a median (the order statistics a binomial(n, 1/2) puts 98% of the median between),
    widened by one step of time (lr) for the crossing's resolution."""
    out = []
    pairs = zip(
        results["init_scales"],
        results["times"],
        predictions["median"],
        predictions["ode"],
        strict=True,
    )
    for scale, times, predicted, ode in pairs:
        times = np.sort(times)
        n = len(times)
        low = times[max(0, n // 4 - 1)] - LR
        high = times[min(n - 1, n - n // 4)] + LR
        out.append(
            Row(
                "SGD time to specialise t* (median; gradient noise)",
                f"s=8 N=64 gain=16 d=64 lr=2 B=256 init {scale:.2g}; {n} seeds; "
                f"reduced flow (d=inf, no noise) {ode:.1f}",
                kind="prediction",
                predicted=predicted,
                sgd=float(np.median(times)),
                tolerance=(high - low) / 2.0 / max(abs(predicted), 1.0),
                floor=1.0,
            )
        )
    return out


EXPERIMENT = Experiment(
    "sgd_onset", run, predict, rows, sizes=SIZES, configs=configs, version=2
)

"""Time to specialise: when delta reaches 0.25, against the init scale, flow and SGD."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments.canonical import (
    CHUNKS,
    EVENT_LEVEL,
    GAIN,
    STRIDE,
    TRAINING,
    Training,
    base_config,
    base_flow,
    random_starts,
    solve_from,
    train,
)
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import crossing_time, mean_half_width, order_parameter


@dataclass(frozen=True)
class Size:
    """SGD training, its init scales and seeds per scale; the flow's init scales (between
    1e-5 and 0.3) and starts per scale."""

    training: Training
    init_scales: tuple[float, ...]
    seeds: int
    flow_scales: int
    flow_starts: int


SIZES = {
    "tiny": Size(TRAINING["tiny"], (0.01,), seeds=1, flow_scales=3, flow_starts=2),
    "quick": Size(TRAINING["quick"], (1e-3, 1e-2, 1e-1), seeds=2, flow_scales=7, flow_starts=8),
    "full": Size(
        TRAINING["full"], (1e-4, 1e-3, 1e-2, 1e-1, 3e-1), seeds=8, flow_scales=7, flow_starts=32
    ),
}


def configs(size: Size) -> list[TrainConfig]:
    """SGD at each of size.init_scales, size.seeds seeds each."""
    return [
        base_config(size.training, init_scale=a, seed=s)
        for a in size.init_scales
        for s in range(size.seeds)
    ]


def run(size: Size) -> dict:
    """Time for delta to reach 0.25 against init scale: reduced flow (per start), SGD (d = 64)."""
    scales = np.geomspace(1e-5, 0.3, size.flow_scales)
    ode = []
    for i, scale in enumerate(scales):
        starts = random_starts(size.flow_starts, 1, STRIDE, scale, seed=200 + i)
        t_max = float(theory.specialization_time(STRIDE, CHUNKS, GAIN, scale)) * 2.0 + 200.0
        ts = np.linspace(0.0, t_max, 3)
        out = solve_from([base_flow(ts)] * len(starts), starts, ts)
        ode.append({"init_scale": scale, "times": out.specialization_time})
    sgd_configs = configs(size)
    sgd = []
    for c, r in zip(sgd_configs, train(sgd_configs), strict=True):
        delta = order_parameter(np.asarray(r.history.pooling_weights, float))
        sgd.append(
            {
                "init_scale": c.init_scale,
                "seed": c.seed,
                "time": crossing_time(r.history.times, delta, EVENT_LEVEL),
                "t_end": float(r.history.times[-1]),
            }
        )
    return {"ode": ode, "sgd": sgd}


def predict(size: Size, results: dict) -> dict:
    """t* = (log 0.25 - E log delta_0)/lambda + tau (theory.specialization_time) by init scale."""
    del size
    scales = np.geomspace(1e-5, 0.3, 25)
    return {
        "init_scales": scales,
        "time": [theory.specialization_time(STRIDE, CHUNKS, GAIN, a) for a in scales],
        "at_runs": [
            theory.specialization_time(STRIDE, CHUNKS, GAIN, p["init_scale"])
            for p in results["ode"]
        ],
        "at_sgd": {
            str(a): theory.specialization_time(STRIDE, CHUNKS, GAIN, a)
            for a in sorted({p["init_scale"] for p in results["sgd"]})
        },
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The semi-analytic t* (prediction) against the flow's mean over starts near 1e-4 and
    1e-2 (and SGD's mean over seeds at the same scale, if any), within the sampling
    interval of each mean (measure.mean_half_width): t* varies with the start."""
    out = []
    for p, t in zip(results["ode"], predictions["at_runs"], strict=True):
        if abs(p["init_scale"] - 1e-2) / 1e-2 > 0.5 and abs(p["init_scale"] - 1e-4) / 1e-4 > 0.5:
            continue
        sgd = [q["time"] for q in results["sgd"] if abs(q["init_scale"] - p["init_scale"]) < 1e-12]
        noise = max(mean_half_width(times) for times in (p["times"], sgd) if len(times) > 1)
        out.append(
            Row(
                "time to specialise t*",
                f"s=8 N=64 gain=16 init {p['init_scale']:.2g}; mean over starts",
                kind="prediction",
                predicted=t,
                ode=float(np.mean(p["times"])),
                sgd=float(np.mean(sgd)) if sgd else None,
                tolerance=noise / t,
            )
        )
    return out


EXPERIMENT = Experiment(
    "specialization_time", run, predict, rows, sizes=SIZES, configs=configs, drawn=True
)

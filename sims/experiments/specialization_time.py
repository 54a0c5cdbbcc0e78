"""Figure 5, time to specialise: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig
from weakspots.sims.experiments._common import (
    CHUNKS,
    EVENT_LEVEL,
    GAIN,
    STRIDE,
    Size,
    base_config,
    cached,
    crossing_time,
    flow,
    order_parameter,
    random_starts,
    row,
    train,
)


def configs_specialization_time(size: Size) -> list[TrainConfig]:
    """SGD at each of size.init_scales, size.seeds seeds each."""
    return [
        base_config(size, init_scale=a, seed=s) for a in size.init_scales for s in range(size.seeds)
    ]


def run_specialization_time(size: Size, store_dir=None) -> dict:
    """Time for delta to reach 0.25 against init scale: reduced flow (per start) and SGD (d = 64)."""

    def compute():
        scales = np.geomspace(1e-5, 0.3, 7 if size.name != "tiny" else 3)
        ode = []
        for i, scale in enumerate(scales):
            starts = random_starts(size.flow_starts, 1, STRIDE, scale, seed=200 + i)
            t_max = float(theory.specialization_time(STRIDE, CHUNKS, GAIN, scale)) * 2.0 + 200.0
            out = flow(
                stride=STRIDE,
                starts=starts,
                chunks=CHUNKS,
                gain=GAIN,
                ts=np.linspace(0.0, t_max, 3),
            )
            ode.append({"init_scale": scale, "times": out["specialization_time"]})
        configs = configs_specialization_time(size)
        sgd = []
        for c, r in zip(configs, train(configs), strict=True):
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

    return cached(store_dir, "run", "specialization_time", size, compute)


def predict_specialization_time(size: Size, results: dict, store_dir=None) -> dict:
    """t* = (log 0.25 - E log delta_0)/lambda + tau (theory.specialization_time), over init scales."""

    def compute():
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

    return cached(store_dir, "predict", "specialization_time", size, compute)


def rows_specialization_time(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for p, t in zip(results["ode"], predictions["at_runs"], strict=True):
        if abs(p["init_scale"] - 1e-2) / 1e-2 > 0.5 and abs(p["init_scale"] - 1e-4) / 1e-4 > 0.5:
            continue
        sgd = [q["time"] for q in results["sgd"] if abs(q["init_scale"] - p["init_scale"]) < 1e-12]
        rows.append(
            row(
                "time to specialise t*",
                f"s=8 N=64 gain=16 init {p['init_scale']:.2g}; mean over starts",
                t,
                ode=float(np.mean(p["times"])),
                sgd=float(np.mean(sgd)) if sgd else None,
                tolerance=0.15,
            )
        )
    return rows

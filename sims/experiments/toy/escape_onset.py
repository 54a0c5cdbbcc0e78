"""Finite-d onset: SGD's escape from metastable uniform pooling against the derived law."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments.canonical import train
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import normal_half_width

# (stride, chunks, dim, gain, lr, steps), batch 256: uniform pooling linearly stable at d
# (lambda_d < 0), a lower (s-1)-phase state past a saddle 0.5 to 5 temperatures up, where
# docs/theory.md §9.2 claims to hold (below 0.5 T it does not: docs/theory_derivations.md §2)
POINTS = (
    (4, 64, 64, 16.0, 2.0, 600),
    (6, 17, 48, 12.0, 0.5, 1200),
    (4, 64, 64, 16.0, 1.0, 1200),
    (5, 30, 64, 14.0, 0.5, 1200),
    (8, 15, 64, 16.0, 2.0, 600),
)
CHECK_EVERY = 10  # steps between the checks of a run's smallest pooling weight


@dataclass(frozen=True)
class Size:
    """How many of POINTS (from the first), and SGD seeds per point."""

    points: int
    seeds: int


SIZES = {
    "tiny": Size(points=1, seeds=4),
    "quick": Size(points=1, seeds=16),
    "full": Size(points=len(POINTS), seeds=64),
}


def configs(size: Size) -> list[TrainConfig]:
    """The SGD runs: size.seeds per point."""
    return [
        TrainConfig(
            stride=s,
            chunks=n,
            dim=d,
            gain=g,
            lr=lr,
            steps=steps,
            eval_every=CHECK_EVERY,
            eval_samples=16,
            seed=seed,
        )  # fmt: skip
        for s, n, d, g, lr, steps in POINTS[: size.points]
        for seed in range(size.seeds)
    ]


def run(size: Size) -> dict:
    """Per point, how many SGD runs left uniform pooling: their smallest pooling weight
    reached the end of the passage (theory.escaped_weight) at some check."""
    results = train(configs(size))
    seeds = size.seeds
    out = []
    for i, point in enumerate(POINTS[: size.points]):
        runs = results[i * seeds : (i + 1) * seeds]
        level = theory.escaped_weight(point[0])
        escaped = sum(float(np.min(r.history.pooling_weights)) <= level for r in runs)
        out.append({"point": list(point), "escaped": int(escaped), "seeds": seeds})
    return {"points": out}


def predict(size: Size, results: dict) -> dict:
    """theory.escape_within at each point (docs/theory.md §9.2)."""
    del results
    return {
        "p_escape": [
            theory.escape_within(s, n, g, d, lr, 256, steps)
            for s, n, d, g, lr, steps in POINTS[: size.points]
        ]
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """P(escape within the run's steps) against the SGD fraction, within the binomial interval of
    the fraction."""
    out = []
    points = len(results["points"])
    for point, p in zip(results["points"], predictions["p_escape"], strict=True):
        s, n, d, g, lr, steps = point["point"]
        seeds = point["seeds"]
        out.append(
            Row(
                "P(SGD escapes metastable uniform pooling)",
                f"s={s} N={n} d={d} gain={g:g} lr={lr:g} B=256, {steps} steps; "
                f"{point['escaped']} of {seeds} runs escaped",
                kind="prediction",
                predicted=p,
                sgd=point["escaped"] / seeds,
                tolerance=normal_half_width(max(p * (1 - p), 1 / seeds) / seeds, points),
                floor=1.0,
            )
        )
    return out


EXPERIMENT = Experiment("escape_onset", run, predict, rows, sizes=SIZES, configs=configs)

"""Pooling dynamics: SGD's pooling weights against the reduced flow from each run's own start."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.metrics import support_size
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.model import initial_pooling_logits
from weakspots.sims.experiments.canonical import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    TRAINING,
    Training,
    base_config,
    base_flow,
    solve_from,
    train,
)
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import most_common
from weakspots.sims.experiments.toy.uniform_state import predicted_support

POOLING_INIT = 0.3


@dataclass(frozen=True)
class Size:
    """SGD training and seeds per d; isotropic directions for the support-size prediction."""

    training: Training
    seeds: int
    support_samples: int


SIZES = {
    "tiny": Size(TRAINING["tiny"], seeds=1, support_samples=8),
    "quick": Size(TRAINING["quick"], seeds=2, support_samples=32),
    "full": Size(TRAINING["full"], seeds=8, support_samples=256),
}


def configs(size: Size) -> list[TrainConfig]:
    """SGD at d = 64 and d = 1024 from init scale 0.3, size.seeds seeds each."""
    return [
        base_config(size.training, dim=d, seed=s, init_scale=POOLING_INIT)
        for d in (DIM, 1024)
        for s in range(size.seeds)
    ]


def run(size: Size) -> dict:
    """SGD pooling weights at d = 64 and d = 1024, and from each run's own start the reduced
    (d = inf) flow and the finite-d corrected flow (the flow of L_d, `FlowConfig.dim`)."""
    # Init scale 0.3 (docs/theory.md §6.10): the start, not early SGD noise, picks the support,
    # so SGD and the flow from the same start can be compared phase by phase.
    runs_configs = configs(size)
    results = train(runs_configs)
    starts = [
        np.asarray(initial_pooling_logits(c.seed, c.heads, c.stride, c.init_scale), float)
        for c in runs_configs
    ]
    times = np.asarray(results[0].history.times, float)
    ode = solve_from([base_flow(times)] * len(starts), starts, times)
    # The finite-d corrected flow (theory.finite_d_loss at each run's d), same starts.
    corrected = solve_from([base_flow(times, dim=c.dim) for c in runs_configs], starts, times)
    corrected_weights = np.asarray(corrected.pooling_weights, float)
    runs = []
    for i, (c, r) in enumerate(zip(runs_configs, results, strict=True)):
        sgd = np.asarray(r.history.pooling_weights, float)[:, 0]
        runs.append(
            {
                "dim": c.dim,
                "seed": c.seed,
                "sgd": sgd,
                "ode": ode.pooling_weights[i][:, 0],
                "corrected": corrected_weights[i][:, 0],
            }
        )
    return {"times": times, "runs": runs, "init_scale": POOLING_INIT}


def predict(size: Size, results: dict) -> dict:
    """Uniform pooling 1/s, the growth rate, and the flow's support-size distribution."""
    del results
    sizes, probs, admissible = predicted_support(STRIDE, CHUNKS, GAIN, size.support_samples)
    return {
        "uniform": 1.0 / STRIDE,
        "growth_rate": float(theory.growth_rate(STRIDE, CHUNKS, GAIN)),
        "support_sizes": sizes,
        "support_probabilities": probs,
        "admissible": admissible,
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The most probable support size: of the flow from sampled starts, against the flow from
    the SGD starts and SGD (consistency: the prediction integrates the same flow)."""
    k_pred = float(
        predictions["support_sizes"][int(np.argmax(predictions["support_probabilities"]))]
    )
    out = []
    for dim in sorted({r["dim"] for r in results["runs"]}):
        runs = [r for r in results["runs"] if r["dim"] == dim]
        ode_k = most_common([support_size(np.asarray(r["ode"])[-1:]).item() for r in runs])
        sgd_k = most_common([support_size(np.asarray(r["sgd"])[-1:]).item() for r in runs])
        out.append(
            Row(
                "support size k (most probable)",
                f"s=8 N=64 gain=16 d={dim}, flow from the SGD starts",
                kind="consistency",
                predicted=k_pred,
                ode=ode_k,
                sgd=sgd_k,
                tolerance=0.0,  # an integer: the same k or not
            )
        )
    return out


EXPERIMENT = Experiment(
    "pooling_dynamics", run, predict, rows, sizes=SIZES, configs=configs, version=3, drawn=True
)

"""Weak spots: accuracy against needle position of SGD past and below the threshold N_c."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments.canonical import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    TRAINING,
    Training,
    base_config,
    correct_at_phase,
    train,
)
from weakspots.sims.experiments.experiment import Experiment, Row


@dataclass(frozen=True)
class Size:
    """SGD training, and needles per phase for accuracy against position."""

    training: Training
    position_samples: int


SIZES = {
    "tiny": Size(TRAINING["tiny"], position_samples=256),
    "quick": Size(TRAINING["quick"], position_samples=8192),
    "full": Size(TRAINING["full"], position_samples=32768),
}


def position_accuracy(config: TrainConfig, model, samples: int, shown: int, seed=2024):
    """Accuracy and needle counts by (chunk, phase) for the first `shown` chunks, `(shown, s)`.

    Needles fall in uniformly random chunks, so each (chunk, phase) cell holds about
    samples / N of the `samples` needles drawn at that phase.
    """
    hits = np.zeros((shown, config.stride))
    counts = np.zeros((shown, config.stride))
    for phase in range(config.stride):
        key = jax.random.fold_in(jax.random.key(seed), phase)
        ok, target = correct_at_phase(model, key, config.model, samples, jnp.asarray(phase))
        ok, target = np.asarray(ok), np.asarray(target)
        for c in range(shown):
            counts[c, phase] = np.sum(target == c)
            hits[c, phase] = np.sum(ok[target == c])
    return hits, counts


def configs(size: Size) -> list[TrainConfig]:
    """SGD at N = 64 (past N_c) and N = 12 (below), seed 0."""
    return [base_config(size.training, chunks=n) for n in (CHUNKS, 12)]


def run(size: Size) -> dict:
    """SGD at N = 64 (past N_c) and N = 12 (below): accuracy by needle position over 4 chunks."""
    out = {"shown_chunks": 4, "runs": []}
    for r in train(configs(size)):
        hits, counts = position_accuracy(r.config, r.model, size.position_samples, 4)
        summary = r.summary()
        out["runs"].append(
            {
                "chunks": r.config.chunks,
                "hits": hits,
                "counts": counts,
                "phase_accuracy": summary["phase_accuracy"],
                "eval_samples": r.config.eval_samples,
                "pooling_weights": summary["pooling_weights"],
                "mean_accuracy": summary["mean_accuracy"],
            }
        )
    return out


def predict(size: Size, results: dict) -> dict:
    """Exact finite-d accuracy (theory.phase_accuracy) of each run's learned pooling weights."""
    del size
    return {
        "runs": [
            {
                "chunks": run["chunks"],
                "phase_accuracy": theory.phase_accuracy(
                    np.asarray(run["pooling_weights"])[0], GAIN, run["chunks"], DIM
                ).tolist(),
                "critical_chunks": float(theory.critical_chunks(GAIN, STRIDE)),
            }
            for run in results["runs"]
        ]
    }


# The formula is exact given the weights, so measured and predicted delta_max differ by the
# held-out error e alone, and |delta_max(acc + e) - delta_max(acc)| <= range(e): the row
# passes inside this quantile of range(e) (theory.delta_max_distribution, no pooling part).
HELD_OUT_LEVEL = 0.95


def held_out_tolerance(accuracy, eval_samples) -> float:
    """Upper HELD_OUT_LEVEL quantile of the range of the per-phase held-out errors."""
    accuracy = np.asarray(accuracy, float)
    sd = np.sqrt(accuracy * (1.0 - accuracy) / eval_samples)
    central = 2.0 * HELD_OUT_LEVEL - 1.0  # its upper end is the one-sided quantile
    spread = theory.delta_max_distribution(0.0, sd, len(accuracy), level=central)
    return spread["delta_max_interval"][1]


def rows(results: dict, predictions: dict) -> list[Row]:
    """delta_max of the formula on each run's learned weights (fit) against its held-out one."""
    out = []
    for measured_run, pred in zip(results["runs"], predictions["runs"], strict=True):
        measured = np.asarray(measured_run["phase_accuracy"])
        predicted = np.asarray(pred["phase_accuracy"])
        out.append(
            Row(
                "delta_max from learned weights (exact formula)",
                f"s=8 N={measured_run['chunks']} d=64 gain=16 seed 0",
                kind="fit",
                predicted=theory.delta_max(predicted),
                sgd=theory.delta_max(measured),
                tolerance=held_out_tolerance(predicted, measured_run["eval_samples"]),
                floor=1.0,
            )
        )
    return out


EXPERIMENT = Experiment(
    "weak_spots", run, predict, rows, sizes=SIZES, configs=configs, drawn=True
)

"""RoPE anchoring: per-phase accuracy with RoPE-rotated compressed keys, against kappa(phi)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import numpy as np

from weakspots import theory
from weakspots.idealized.metrics import harmonic_spectrum
from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments import canonical
from weakspots.sims.experiments.canonical import CHUNKS, DIM, GAIN, STRIDE, base_config, train
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.toy.interventions import predicted_phase_accuracy
from weakspots.sims.toy.train import Hyper, evaluate, init
from weakspots.theory import interventions as tint

ROPE_DIM = 64


@dataclass(frozen=True)
class Size:
    """SGD training, and whether softmax pooling is trained on the real keys RoPE needs."""

    training: canonical.Training
    real_keys: bool


SIZES = {
    "tiny": Size(canonical.TRAINING["tiny"], real_keys=False),
    "quick": Size(canonical.TRAINING["quick"], real_keys=False),
    "full": Size(canonical.TRAINING["full"], real_keys=True),
}


def configs(size: Size) -> list[TrainConfig]:
    """At sizes with real keys, one trained softmax_pool run with RoPE-anchored keys."""
    trained = base_config(size.training, rope_anchor=True, rope_dim=ROPE_DIM)
    return [trained] if size.real_keys else []


def run(size: Size) -> dict:
    """Per-phase accuracy with RoPE-anchored compressed keys: fixed mean pooling (no training)
    and, at sizes with real keys, trained softmax pooling."""
    out = {"rope_dim": ROPE_DIM, "cases": []}
    fixed = base_config(size.training, operator="mean_pool", rope_anchor=True, rope_dim=ROPE_DIM)
    hyper = jax.tree.map(lambda x: x[0], Hyper.stack([fixed]))
    model = init(fixed.static, hyper).model
    acc, _ = evaluate(fixed.static, model)
    out["cases"].append(
        {
            "name": "mean_pool (fixed)",
            "phase_accuracy": np.asarray(acc),
            "pooling_weights": np.full((1, STRIDE), 1.0 / STRIDE),
            "samples": fixed.eval_samples,
        }
    )
    trained = configs(size)
    for trained_cfg, r in zip(trained, train(trained), strict=True):
        out["cases"].append(
            {
                "name": "softmax_pool (trained)",
                "phase_accuracy": r.summary()["phase_accuracy"],
                "pooling_weights": r.summary()["pooling_weights"],
                "samples": trained_cfg.eval_samples,
            }
        )
    return out


def predict(size: Size, results: dict) -> dict:
    """kappa(phi) attenuation (theory.rope_attenuation_at) and the accuracy it implies;
    for the trained case, the reduced flow of the anchored loss from the run's own start."""
    out = {"kappa": theory.rope_attenuation_at(np.arange(STRIDE), ROPE_DIM, DIM), "cases": []}
    for case in results["cases"]:
        if case["name"].startswith("mean_pool"):
            acc = tint.readout_accuracy(
                np.asarray(case["pooling_weights"]), GAIN, CHUNKS, DIM, rope_dim=ROPE_DIM
            )
        else:
            config = base_config(size.training, rope_anchor=True, rope_dim=ROPE_DIM)
            acc = predicted_phase_accuracy(config)
        out["cases"].append(
            {"name": case["name"], "phase_accuracy": acc, "spectrum": harmonic_spectrum(acc)}
        )
    return out


# Per-phase accuracy: 3 held-out binomial standard errors at p = 1/2 (the widest) plus an
# allowance, not derived, for the attenuation model (each RoPE-rotated key replaced by
# its mean overlap kappa(phi)). delta_max: an allowance of the same origin, not derived.
ACCURACY_ALLOWANCE = 0.02
DELTA_MAX_ATOL = 0.1


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per case: the worst phase's accuracy and delta_max against the readout formula (fixed
    pooling: prediction; trained: fit, the flow starts from the run's own start)."""
    out = []
    for case, pred in zip(results["cases"], predictions["cases"], strict=True):
        measured, predicted = np.asarray(case["phase_accuracy"]), np.asarray(pred["phase_accuracy"])
        se = math.sqrt(0.25 / case["samples"])
        worst = int(np.argmax(np.abs(measured - predicted)))
        kind = "prediction" if case["name"].startswith("mean_pool") else "fit"
        out.append(
            Row(
                f"RoPE per-phase accuracy, worst phase |error| ({case['name']})",
                f"s=8 N=64 d=64 rope_dim={ROPE_DIM}; at phase {worst}",
                kind=kind,
                predicted=float(predicted[worst]),
                sgd=float(measured[worst]),
                tolerance=ACCURACY_ALLOWANCE + 3 * se,
                floor=1.0,
            )
        )
        out.append(
            Row(
                f"RoPE delta_max ({case['name']})",
                f"s=8 N=64 d=64 rope_dim={ROPE_DIM}",
                kind=kind,
                predicted=float(theory.delta_max(predicted)),
                sgd=float(theory.delta_max(measured)),
                tolerance=DELTA_MAX_ATOL,
                floor=1.0,
            )
        )
    return out


EXPERIMENT = Experiment(
    "rope_anchoring", run, predict, rows, sizes=SIZES, configs=configs, drawn=True
)

"""Figure 9, RoPE anchoring: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import math

import jax
import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig
from weakspots.idealized.metrics import harmonic_spectrum
from weakspots.sims.experiments._common import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    Size,
    base_config,
    cached,
    row,
    train,
)
from weakspots.sims.train import Hyper, evaluate, init
from weakspots.theory import interventions as tint

ROPE_DIM = 64


def configs_rope_anchoring(size: Size) -> list[TrainConfig]:
    """At sizes with real keys, one trained softmax_pool run with RoPE-anchored keys."""
    return [base_config(size, rope_anchor=True, rope_dim=ROPE_DIM)] if size.real_keys else []


def run_rope_anchoring(size: Size, store_dir=None) -> dict:
    """Per-phase accuracy with RoPE-anchored compressed keys: fixed mean pooling (no training)
    and, at full size, trained softmax pooling."""

    def compute():
        out = {"rope_dim": ROPE_DIM, "cases": []}
        fixed = base_config(size, operator="mean_pool", rope_anchor=True, rope_dim=ROPE_DIM)
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
        trained = configs_rope_anchoring(size)
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

    return cached(store_dir, "run", "rope_anchoring", size, compute)


def predict_rope_anchoring(size: Size, results: dict, store_dir=None) -> dict:
    """kappa(phi) attenuation (theory.rope_attenuation_at) and the accuracy it implies;
    for the trained case, the reduced flow of the anchored loss from the run's own start."""
    from weakspots.sims.analysis import predicted_phase_accuracy

    def compute():
        out = {"kappa": theory.rope_attenuation_at(np.arange(STRIDE), ROPE_DIM, DIM), "cases": []}
        for case in results["cases"]:
            if case["name"].startswith("mean_pool"):
                acc = tint.readout_accuracy(
                    np.asarray(case["pooling_weights"]), GAIN, CHUNKS, DIM, rope_dim=ROPE_DIM
                )
            else:
                acc = predicted_phase_accuracy(
                    base_config(size, rope_anchor=True, rope_dim=ROPE_DIM)
                )
            out["cases"].append(
                {"name": case["name"], "phase_accuracy": acc, "spectrum": harmonic_spectrum(acc)}
            )
        return out

    return cached(store_dir, "predict", "rope_anchoring", size, compute)


def rows_rope_anchoring(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for case, pred in zip(results["cases"], predictions["cases"], strict=True):
        measured, predicted = np.asarray(case["phase_accuracy"]), np.asarray(pred["phase_accuracy"])
        se = math.sqrt(0.25 / case["samples"])
        worst = int(np.argmax(np.abs(measured - predicted)))
        rows.append(
            row(
                f"RoPE per-phase accuracy, worst phase |error| ({case['name']})",
                f"s=8 N=64 d=64 rope_dim={ROPE_DIM}; at phase {worst}",
                float(predicted[worst]),
                sgd=float(measured[worst]),
                tolerance=0.02 + 3 * se,
                floor=1.0,
            )
        )
        rows.append(
            row(
                f"RoPE delta_max ({case['name']})",
                f"s=8 N=64 d=64 rope_dim={ROPE_DIM}",
                float(theory.delta_max(predicted)),
                sgd=float(theory.delta_max(measured)),
                tolerance=0.1,
                floor=1.0,
            )
        )
    return rows

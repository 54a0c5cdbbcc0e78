"""The head-averaged readout at finite d: the exact law against the trainer's evaluation."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from weakspots import theory
from weakspots.idealized.toy.compression import LinearPool
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.model import init_model
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import normal_half_width
from weakspots.sims.toy.train import evaluate

# Two heads at s=5, N=40, d=48, gain 9: head 0 spreads over three phases, head 1 over two
# (where a mean partition function overstated the weak phases: docs/theory_derivations.md §4)
WEIGHTS = np.array([[0.33, 0.33, 0.33, 0.005, 0.005], [0.0033, 0.0033, 0.0033, 0.495, 0.495]])
WEIGHTS = WEIGHTS / WEIGHTS.sum(axis=1, keepdims=True)


SIZES = {"tiny": 1000, "quick": 4000, "full": 40_000}  # held-out needles per phase


def _config(needles: int) -> TrainConfig:
    return TrainConfig(stride=5, chunks=40, dim=48, heads=2, gain=9.0, eval_samples=needles)


def run(needles: int) -> dict:
    """Per-phase accuracy of the trainer's evaluation of a model pooling with WEIGHTS."""
    config = _config(needles)
    model = init_model(jax.random.key(0), config.model, config.gain, 0.0)
    pool = LinearPool(jnp.asarray(WEIGHTS, jnp.float32))
    model = eqx.tree_at(lambda m: m.compressor, model, pool)
    accuracy, _ = evaluate(config, model)
    return {"accuracy": np.asarray(accuracy, float), "needles": config.eval_samples}


def predict(needles: int, results: dict) -> dict:
    """theory.readout_accuracy (docs/theory.md §7.13), four times its default draws."""
    del results
    config = _config(needles)
    draws = 4 * theory.interventions.DRAWS
    accuracy = theory.readout_accuracy(WEIGHTS, config.gain, config.chunks, config.dim, draws=draws)
    return {"accuracy": accuracy, "draws": draws}


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per phase, within the normal interval of the difference (binomial: the prediction's
    draws and the evaluation's needles)."""
    out = []
    phases = len(results["accuracy"])
    pairs = zip(predictions["accuracy"], results["accuracy"], strict=True)
    for phase, (p, measured) in enumerate(pairs):
        variance = p * (1 - p) * (1 / predictions["draws"] + 1 / results["needles"])
        out.append(
            Row(
                "head-averaged readout accuracy (two heads)",
                f"s=5 N=40 d=48 gain 9 H=2, phase {phase} "
                f"({'head 0 of three phases' if phase < 3 else 'head 1 of two'})",
                kind="prediction",
                predicted=p,
                sgd=measured,
                tolerance=normal_half_width(variance, phases),
                floor=1.0,
            )
        )
    return out


EXPERIMENT = Experiment("readout_exact", run, predict, rows, sizes=SIZES)

"""The finite-d accuracy formula against a direct Monte Carlo of the retrieval task (numpy)."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.sims.experiments.canonical import CHUNKS, GAIN, STRIDE
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import monte_carlo_accuracy, normal_half_width

CASES = (("uniform", 8), ("3-phase", 3))  # (label, support size k of equal weights)
DIM = 64
SIZES = {"tiny": 4000, "quick": 4000, "full": 16000}  # Monte Carlo needles per phase


def run(samples: int) -> dict:
    """Per-phase accuracy of fixed pooling weights by Monte Carlo (`samples` needles per
    phase), per case."""
    accuracy = [
        monte_carlo_accuracy(
            theory.support_weights(STRIDE, k), CHUNKS, DIM, samples, seed=CHUNKS + k
        )
        for _, k in CASES
    ]
    return {"samples": samples, "accuracy": accuracy}


def predict(samples: int, results: dict) -> dict:
    """theory.phase_accuracy (the chi-conditioned formula), per case and phase."""
    del samples, results
    return {
        "accuracy": [
            theory.phase_accuracy(theory.support_weights(STRIDE, k), GAIN, CHUNKS, DIM)
            for _, k in CASES
        ]
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The formula (a prediction) against Monte Carlo at the worst phase of each case, within
    the binomial interval of that phase's Monte Carlo fraction (the worst of s phases)."""
    out = []
    for (label, _), measured, predicted in zip(
        CASES, results["accuracy"], predictions["accuracy"], strict=True
    ):
        measured, predicted = np.asarray(measured), np.asarray(predicted)
        worst = int(np.argmax(np.abs(predicted - measured)))
        out.append(
            Row(
                f"finite-d accuracy formula, {label} pooling (worst phase)",
                f"s=8 N=64 d=64, Monte Carlo {results['samples']} needles per phase (sgd column)",
                kind="prediction",
                predicted=predicted[worst],
                sgd=measured[worst],
                tolerance=normal_half_width(
                    predicted[worst] * (1 - predicted[worst]) / results["samples"], STRIDE
                ),
                floor=1.0,
            )
        )
    return out


EXPERIMENT = Experiment("accuracy_formula", run, predict, rows, sizes=SIZES)

"""A newcomer's template: one experiment in one module, run as paper_repro runs them.

To add an experiment to the project, write a module like the part above the line in
`sims/experiments/<family>/<name>.py` (`toy/` or `decoder/`) and add its `EXPERIMENT` to
`sims.experiments.EXPERIMENTS`.
`SIZES` holds the experiment's own settings at each size; callers name a size ("tiny",
"quick", "full") and `run` and `predict` receive its record. Here the registry is a local
list, and the test runs it through paper_repro's own loop.
"""

import math
import runpy
from pathlib import Path

import numpy as np

from weakspots import theory
from weakspots.sims.experiments import Experiment, Row, evaluate
from weakspots.sims.experiments.measure import monte_carlo_accuracy

STRIDE, DIM, GAIN = 8, 64, 16.0
CHUNKS = (12, 64)
# Monte Carlo needles per phase at each size (drawn in batches of 500).
SIZES = {"tiny": 2000, "quick": 2000, "full": 8000}


def run(needles: int) -> dict:
    """Simulate: retrieval accuracy of uniform pooling by Monte Carlo, per context length."""
    weights = np.full(STRIDE, 1.0 / STRIDE)
    accuracy = [monte_carlo_accuracy(weights, n, DIM, needles, seed=n).mean() for n in CHUNKS]
    return {"chunks": CHUNKS, "accuracy": accuracy, "needles": needles * STRIDE}


def predict(needles: int, results: dict) -> dict:
    """Theory: the finite-d accuracy formula (theory.phase_accuracy) for the same weights."""
    del needles
    weights = np.full(STRIDE, 1.0 / STRIDE)
    accuracy = [theory.phase_accuracy(weights, GAIN, n, DIM).mean() for n in results["chunks"]]
    return {"accuracy": accuracy}


def rows(results: dict, predictions: dict) -> list[Row]:
    """Compare: a prediction (the formula simulates nothing), within 4 binomial standard
    errors of the Monte Carlo mean (a false alarm about once in 16,000 rows)."""
    out = []
    for n, measured, p in zip(
        results["chunks"], results["accuracy"], predictions["accuracy"], strict=True
    ):
        standard_error = math.sqrt(p * (1 - p) / results["needles"])
        out.append(
            Row(
                "mean accuracy of uniform pooling",
                f"s={STRIDE} N={n} d={DIM}; Monte Carlo, {results['needles']} needles",
                kind="prediction",
                predicted=p,
                sgd=measured,
                tolerance=4 * standard_error / p,
            )
        )
    return out


EXPERIMENT = Experiment("uniform_accuracy_example", run, predict, rows, sizes=SIZES)

# ---------------------------------------------------------------------------- the test

REGISTRY = [EXPERIMENT]  # the project's is sims.experiments.EXPERIMENTS
PAPER_REPRO = Path(__file__).resolve().parents[2] / "paper_repro.py"


def test_example_experiment_runs_through_paper_repros_loop(tmp_path):
    make_experiments = runpy.run_path(str(PAPER_REPRO))["make_experiments"]
    events = []
    made = make_experiments(REGISTRY, "tiny", tmp_path, events.append)
    assert not made["errors"]
    rows = made["rows"]
    assert [r["experiment"] for r in rows] == ["uniform_accuracy_example"] * 2
    assert all(r["kind"] == "prediction" and r["pass"] for r in rows), rows
    assert sum(e.get("done", 0) for e in events) == 2  # the (empty) SGD step and the experiment
    # the results and predictions are in the store now: a second pass simulates nothing
    again = make_experiments(REGISTRY, "tiny", tmp_path, events.append)
    assert again["rows"] == rows
    # and the comparison can fail: a prediction 5 points off does
    results, predictions, _ = evaluate(EXPERIMENT, "tiny", tmp_path / "store")
    wrong = {"accuracy": [a + 0.05 for a in predictions["accuracy"]]}
    assert not any(r.passed for r in EXPERIMENT.rows(results, wrong))

"""Per-phase accuracy of a trained induction model (PAPER.md §5): a phase no head selected
gets no evidence. Each flow's end against the closed form of its own assignment."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.induction.shared import FLOW, SEEDS, flows

SIZES = SEEDS  # flows of the canonical config (runs.FLOW), shared with induction_coverage


def run(seeds: int) -> dict:
    """Each flow's positions, end-state flag and per-phase top-1 accuracy (exact over all
    N tokens at the end gates)."""
    history = flows(FLOW, seeds)
    runs = [history.summary(i) for i in range(seeds)]
    return {
        "positions": [r["positions"] for r in runs],
        "concentrated": [r["concentrated"] for r in runs],
        "phase_accuracy": [r["phase_accuracy"] for r in runs],
        "delta_max": [r["delta_max"] for r in runs],
    }


def predict(seeds: int, results: dict) -> dict:
    """theory.induction_assignment_phase_accuracy of each run's own positions, and the mean
    delta_max over assignments drawn by the coverage law (1 unless every phase is covered:
    P(all distinct))."""
    del seeds
    s, big_l, g, b = FLOW.stride, FLOW.chunks, FLOW.gamma, FLOW.beta
    accuracy = [
        theory.induction_assignment_phase_accuracy(p, s, big_l, g, b).tolist()
        for p in results["positions"]
    ]
    law = theory.induction_coverage_distribution(FLOW.heads, s)
    full = law[s - 1] if FLOW.heads >= s - 1 else 0.0
    return {
        "phase_accuracy": accuracy,
        "delta_max": [theory.induction_delta_max(a) for a in accuracy],
        "mean_delta_max": 1.0 - full,
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """Every run's per-phase accuracy equals its assignment's closed form (fit: the
    positions are the run's own); the mean delta_max over runs against the coverage law."""
    n = len(results["positions"])
    where = (
        f"S={FLOW.stride} m={FLOW.heads} L={FLOW.chunks} N={FLOW.vocab} gamma={FLOW.gamma:g} "
        f"beta={FLOW.beta:g}, static-gate flows to t={FLOW.t1:g} from rho={FLOW.init_scale:g}, {n} seeds"
    )
    measured = np.asarray(results["phase_accuracy"])
    predicted = np.asarray(predictions["phase_accuracy"])
    delta = np.asarray(results["delta_max"])
    p = predictions["mean_delta_max"]
    return [
        Row(
            "induction: per-phase accuracy = closed form of the run's assignment (max |diff|)",
            where, kind="fit", predicted=0.0, ode=float(np.abs(measured - predicted).max()),
            tolerance=0.0, floor=1.0, holds=all(results["concentrated"]),
        ),
        Row(
            "induction: mean delta_max = 1 - P(all S-1 positions covered)", where,
            kind="prediction", predicted=p, ode=float(delta.mean()),
            tolerance=3.3 * np.sqrt(max(p * (1 - p), 1.0 / n) / n), floor=1.0,
        ),
    ]


EXPERIMENT = Experiment("induction_phase_accuracy", run, predict, rows, sizes=SIZES, drawn=True)

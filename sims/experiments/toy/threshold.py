"""The threshold N_c: where uniform pooling turns unstable, found by bisecting the flow in N."""

from __future__ import annotations

import math

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import STRIDE, keyed_starts, solve_from
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import log_weights_centred

GAINS = (12.0, 16.0, 20.0, 24.0)
SEARCHED = (2, 1024)  # the chunk counts bisected; the two ends must disagree
START = 1e-6  # near-uniform starts, so the flow stays linear for a long time
T_END = 200.0


def grows(chunks, gains) -> np.ndarray:
    """Whether near-uniform pooling moves away from uniform in the reduced flow, per (N, gain).

    One head: every zero-sum direction grows (or decays) at one rate about uniform
    pooling, so the spread |log alpha - mean log alpha| at T_END exceeds the start's
    exactly when uniform pooling is unstable, up to the solve's error (rtol 1e-10) and
    the start's nonlinear terms (relative size START).
    """
    configs = [
        FlowConfig(
            stride=STRIDE, chunks=int(n), gain=float(g), t1=T_END, saves=2, rtol=1e-10, atol=1e-20
        )
        for n, g in zip(chunks, gains, strict=True)
    ]
    hist = solve_from(configs, keyed_starts(4, len(configs), 1, STRIDE, START))
    spread = np.linalg.norm(log_weights_centred(hist.pooling_weights), axis=(-2, -1))
    return spread[:, -1] > spread[:, 0]


def run(size: None) -> dict:
    """Bisect the chunk count N between the SEARCHED ends for each gain, down to N, N + 1.

    Returns per gain the last N at which uniform pooling is stable (`low`), the first at
    which it is not (`high`), and whether the ends disagreed at all (`bracketed`).
    """
    del size
    gains = np.asarray(GAINS)
    low, high = np.full(len(GAINS), SEARCHED[0]), np.full(len(GAINS), SEARCHED[1])
    bracketed = ~grows(low, gains) & grows(high, gains)
    while np.any(bracketed & (high - low > 1)):
        open_ = bracketed & (high - low > 1)
        middle = np.where(open_, (low + high) // 2, low)
        up = grows(middle, gains)
        low = np.where(open_ & ~up, middle, low)
        high = np.where(open_ & up, middle, high)
    return {"gains": GAINS, "low": low, "high": high, "bracketed": bracketed}


def predict(size: None, results: dict) -> dict:
    """N_c = 1 + 2 exp(gain/stride) (theory.critical_chunks, docs/theory.md §6.3), per gain."""
    del size
    return {"critical_chunks": [float(theory.critical_chunks(g, STRIDE)) for g in results["gains"]]}


def rows(results: dict, predictions: dict) -> list[Row]:
    """N_c (a prediction) against the bisected pair's midpoint: it passes when N_c lies
    between the last stable and the first unstable chunk count (N is an integer)."""
    out = []
    for i, gain in enumerate(results["gains"]):
        low, high = results["low"][i], results["high"][i]
        n_c = predictions["critical_chunks"][i]
        found = results["bracketed"][i]
        config = f"s={STRIDE} gain={gain:g}: flow bisected over N in {list(SEARCHED)}: "
        config += (
            f"uniform at N={low}, breaks at N={high}" if found else "no change between the ends"
        )
        out.append(
            Row(
                "threshold N_c (flow bisected in N: uniform below, breaks above)",
                config,
                kind="prediction",
                predicted=n_c,
                ode=0.5 * (low + high) if found else math.nan,
                tolerance=0.5 * (high - low) / n_c,  # the bisected pair's half-width
            )
        )
    return out


EXPERIMENT = Experiment("threshold", run, predict, rows)

"""Linear growth: the rate at which near-uniform pooling leaves uniform (mse) or returns to it
(ce, one head: the control), in the reduced flow against the closed form."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import STRIDE, keyed_starts, solve_from
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import fitted_rates

# Per loss: (key seed, chunks, gains, start scale, atol, configs shown as rows).
CASES = {
    "mse": (8, (64, 256, 20, 64, 64, 30, 100, 17), (16, 16, 16, 24, 12, 16, 20, 16),
            1e-7, 1e-18, 8),
    "ce": (9, (64, 256, 64, 20, 64, 30, 100, 17), (16, 16, 24, 16, 12, 16, 20, 16),
           1e-3, 1e-16, 3),
}  # fmt: skip
# Deterministic: the flow is solved at rtol 1e-11 and stays near uniform over the fitted
# window t in [10, 50] (from 1e-7 under mse; decaying from 1e-3 under ce), so the fitted
# rate is the linearisation's to that order.
GROWTH_RTOL = 1e-3


def early_rates(seed, chunks, gains, init_scale, atol, loss) -> np.ndarray:
    """The common mode's exponential rate in the reduced flow between t = 10 and t = 50, one
    start init_scale * N(0, 1) per (chunks, gain). Returns (len(chunks),)."""
    configs = [
        FlowConfig(
            stride=STRIDE, chunks=n, gain=float(g), loss=loss, t1=50.0, rtol=1e-11, atol=atol
        )
        for n, g in zip(chunks, gains, strict=True)
    ]
    starts = keyed_starts(seed, len(configs), 1, STRIDE, init_scale)
    common, _ = fitted_rates(solve_from(configs, starts), 20, 100)
    return common


def run(size: None) -> dict:
    """Per loss, the measured rate of every config (`early_rates`)."""
    del size
    out = {}
    for loss, (seed, chunks, gains, scale, atol, _) in CASES.items():
        rates = early_rates(seed, chunks, gains, scale, atol, loss)
        out[loss] = {"chunks": chunks, "gains": gains, "rates": rates}
    return out


def predict(size: None, results: dict) -> dict:
    """lambda = -(N/(N-1)) beta^2/s^3 l''(beta/s) (theory.growth_rate), per loss and config."""
    del size
    return {
        loss: theory.growth_rate(
            STRIDE, np.asarray(r["chunks"], float), np.asarray(r["gains"], float), loss=loss
        )
        for loss, r in results.items()
    }


NAMES = {
    "mse": ("growth rate lambda", "(early ODE, start 1e-7)"),
    "ce": ("ce control: one head decays back to uniform (rate < 0)", "ce, H=1"),
}


def rows(results: dict, predictions: dict) -> list[Row]:
    """The closed-form rate (a prediction) against the early flow's, per loss and config."""
    out = []
    for loss, (*_, shown) in CASES.items():
        name, note = NAMES[loss]
        r = results[loss]
        out += [
            Row(
                name,
                f"s=8 N={r['chunks'][i]:g} gain={r['gains'][i]:g} {note}",
                kind="prediction",
                predicted=predictions[loss][i],
                ode=r["rates"][i],
                tolerance=GROWTH_RTOL,
            )
            for i in range(shown)
        ]
    return out


EXPERIMENT = Experiment("linear_growth", run, predict, rows)

"""Re-entry: the rate at which a dropped phase comes back (or fades), flow against the law."""

from __future__ import annotations

from weakspots import theory
from weakspots.sims.experiments.canonical import CHUNKS, STRIDE
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import REENTRY_CASES, REENTRY_RTOL, reentry_slopes

SHOWN = (0, 3)  # kappa > 0 (re-enters) and kappa < 0 (decays as 1/t)
DROPPED_WEIGHT = 1e-4


def run(size: None) -> dict:
    """kappa measured on the reduced flow (measure.reentry_slopes), per case."""
    del size
    _, measured = reentry_slopes(REENTRY_CASES, DROPPED_WEIGHT)
    return {"cases": REENTRY_CASES, "kappa": measured}


def predict(size: None, results: dict) -> dict:
    """theory.reentry_rate kappa and the re-entry time 1/(kappa alpha), per case."""
    del size
    return {
        "kappa": [theory.reentry_rate(STRIDE, CHUNKS, g, k) for g, k in results["cases"]],
        "time": [
            float(theory.reentry_time(STRIDE, CHUNKS, g, k, DROPPED_WEIGHT))
            for g, k in results["cases"]
        ],
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The law's kappa (a prediction) against the flow's: one re-entering, one fading case."""
    out = []
    for i in SHOWN:
        gain, k = results["cases"][i]
        out.append(
            Row(
                "re-entry rate kappa of a dropped phase (time 1/(kappa alpha))",
                f"s=8 N=64 gain={gain:g} k={k}, dropped weight 1e-4; "
                f"re-entry time {predictions['time'][i]:.4g}",
                kind="prediction",
                predicted=predictions["kappa"][i],
                ode=results["kappa"][i],
                tolerance=REENTRY_RTOL,
            )
        )
    return out


EXPERIMENT = Experiment("reentry", run, predict, rows)

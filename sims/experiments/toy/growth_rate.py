"""Growth rate of the instability of uniform pooling: the reduced flow's against lambda."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.sims.experiments.canonical import (
    GAIN,
    STRIDE,
    base_flow,
    random_starts,
    solve_from,
)
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import mode_norms, order_parameter


@dataclass(frozen=True)
class Size:
    """Reduced-flow starts per config, and whether the panel adds strides 4 and 16 and two
    heads to its configs."""

    flow_starts: int
    more_configs: bool


SIZES = {
    "tiny": Size(flow_starts=2, more_configs=False),
    "quick": Size(flow_starts=8, more_configs=False),
    "full": Size(flow_starts=32, more_configs=True),
}


def flow_configs(size: Size) -> list[tuple[int, int, float, int]]:
    """(stride, chunks, gain, heads) of the growth-rate panel."""
    configs = [(STRIDE, n, g, 1) for n in (20, 32, 64, 128, 256) for g in (12.0, 16.0, 24.0)]
    if size.more_configs:
        configs += [(s, 64, g, 1) for s in (4, 16) for g in (8.0, 16.0, 24.0)]
        configs += [(STRIDE, n, GAIN, 2) for n in (32, 64, 256)]
    return [c for c in configs if theory.growth_rate(c[0], c[1], c[2], c[3]) > 1e-3]


THRESHOLD_CHUNKS = (12, 13, 14, 15, 16, 17, 18, 20)  # N counts chunks


def measure_growth_rate(stride, chunks, gain, heads, starts, lam_guess) -> dict:
    """Exponential rates in the reduced flow from tiny starts, per start (least squares).

    Fits the log of each mode's amplitude (`measure.mode_norms`) against t over the second
    half of a window where delta stays below 1e-3 (the linear regime). Returns
    {"rates": the fastest mode's (common for one head, differential for several),
    "common_rates": the common mode's}. Each mode is fitted alone: delta itself mixes the
    two modes for several heads, and its rate lies between theirs.
    """
    horizon = min(math.log(1e3) / max(abs(lam_guess), 1e-6), 3e4)
    ts = np.linspace(0.0, horizon, 81)
    config = base_flow(ts, stride=stride, heads=heads, chunks=chunks, gain=gain)
    weights = solve_from([config] * len(starts), starts, ts).pooling_weights  # (B, T, H, s)
    delta = order_parameter(weights)  # (B, T)
    common, differential = mode_norms(weights)

    def fit(amplitude):
        rates = []
        for a, d in zip(amplitude, delta, strict=True):
            keep = (ts >= horizon / 2) & (d < 1e-3) & (a > 0)
            rates.append(np.polyfit(ts[keep], np.log(a[keep]), 1)[0] if keep.sum() > 3 else np.nan)
        return np.asarray(rates)

    return {"rates": fit(common if heads == 1 else differential), "common_rates": fit(common)}


def run(size: Size) -> dict:
    """Growth rates of delta in the reduced flow: across configs, and across N at gain 16."""
    configs = []
    for i, (s, n, g, h) in enumerate(flow_configs(size)):
        starts = random_starts(size.flow_starts, h, s, 1e-6, seed=10 + i)
        lam = float(theory.growth_rate(s, n, g, h))
        rates = measure_growth_rate(s, n, g, h, starts, lam)
        configs.append({"stride": s, "chunks": n, "gain": g, "heads": h, **rates})
    sweep = []
    for i, n in enumerate(THRESHOLD_CHUNKS):
        starts = random_starts(size.flow_starts, 1, STRIDE, 1e-6, seed=100 + i)
        lam = float(theory.growth_rate(STRIDE, n, GAIN))
        rates = measure_growth_rate(STRIDE, n, GAIN, 1, starts, lam)["rates"]
        sweep.append({"chunks": n, "rates": rates})
    return {"configs": configs, "threshold_sweep": sweep}


def predict(size: Size, results: dict) -> dict:
    """lambda of docs/theory.md §6.2 (differential rate for several heads, and their common
    rate) and N_c of §6.3."""
    del size
    chunks = np.linspace(min(THRESHOLD_CHUNKS), max(THRESHOLD_CHUNKS), 200)
    rates = [
        theory.growth_rates(c["stride"], c["chunks"], c["gain"], c["heads"])
        for c in results["configs"]
    ]
    return {
        "configs": [
            float(theory.growth_rate(c["stride"], c["chunks"], c["gain"], c["heads"]))
            for c in results["configs"]
        ],
        "common": [float(common) for common, _ in rates],
        "sweep_chunks": chunks.tolist(),
        "sweep_rate": theory.growth_rate(STRIDE, chunks, GAIN).tolist(),
        "critical_chunks": float(theory.critical_chunks(GAIN, STRIDE)),
    }


def measured_critical_chunks(sweep) -> float:
    """N where the measured growth rate changes sign (linear interpolation), nan if it does not."""
    n = np.array([p["chunks"] for p in sweep])
    lam = np.array([np.nanmean(p["rates"]) for p in sweep])
    cross = np.nonzero((lam[:-1] < 0) & (lam[1:] >= 0))[0]
    if not cross.size:
        return math.nan
    i = int(cross[0])
    return float(n[i] - lam[i] * (n[i + 1] - n[i]) / (lam[i + 1] - lam[i]))


# Rates are least-squares fits of log amplitude over a window where delta < 1e-3 (the
# linearisation's own error is of that order) from starts at 1e-6, solved at rtol 1e-7;
# 1% leaves room for the fit window's residual curvature, with no sampling involved.
RATE_RTOL = 0.01


def rows(results: dict, predictions: dict) -> list[Row]:
    """Closed-form rates and threshold (predictions) against the reduced flow's."""

    def rate_row(name, c, predicted, measured):
        config = f"s={c['stride']} N={c['chunks']} gain={c['gain']:g} H={c['heads']}"
        return Row(
            name,
            config,
            kind="prediction",
            predicted=predicted,
            ode=float(np.nanmean(measured)),
            tolerance=RATE_RTOL,
        )

    configs = results["configs"]
    out = [
        rate_row("growth rate lambda", c, lam, c["rates"])
        for c, lam in zip(configs, predictions["configs"], strict=True)
    ]
    out += [
        rate_row("growth rate lambda_common (all heads alike)", c, lam, c["common_rates"])
        for c, lam in zip(configs, predictions["common"], strict=True)
        if c["heads"] > 1
    ]
    out.append(
        Row(
            "critical chunks N_c",
            "s=8 gain=16; ode = sign change of the measured rate",
            kind="prediction",
            predicted=predictions["critical_chunks"],
            ode=measured_critical_chunks(results["threshold_sweep"]),
            tolerance=RATE_RTOL,  # the sign change, interpolated between measured rates
        )
    )
    return out


EXPERIMENT = Experiment(
    "growth_rate", run, predict, rows, sizes=SIZES, version=2, drawn=True
)

"""The time to concentrate of the induction model (docs/induction.md §4): its slope in
log(1/rho) against 1 / theory.induction_pair_growth_rate(emptied=True), and its
independence of N."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.induction import InductionFlowConfig
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.induction.shared import flows

BASE = InductionFlowConfig(stride=4, heads=1, chunks=8, vocab=4096, t1=1000.0, saves=301)
RHOS = (1e-5, 1e-9)  # small enough that the early drift is nearly done
LEVEL = 0.5  # a head has concentrated when its largest key weight reaches this


@dataclass(frozen=True)
class Size:
    seeds: int
    scales: tuple[tuple[float, float], ...]  # (gamma, beta)
    vocabs: tuple[int, ...]  # N for the independence check (at the first scale, rho 1e-3)


SIZES = {
    "tiny": Size(4, ((6.0, 2.0),), (512,)),
    "quick": Size(32, ((6.0, 2.0), (4.0, 4.0)), (512, 65536)),
    "full": Size(128, ((6.0, 2.0), (4.0, 4.0), (8.0, 1.0)), (512, 65536, 2**22)),
}


def _median_time(history) -> float:
    times = []
    for i in range(len(history.seeds)):
        top = history.weights[i, :, 0, 0, :].max(axis=-1)
        j = int(np.argmax(top >= LEVEL))
        if top[j] < LEVEL:
            return float("inf")
        times.append(np.interp(LEVEL, top[j - 1 : j + 1], history.times[j - 1 : j + 1]))
    return float(np.median(times))


def run(size: Size) -> dict:
    """Median times to concentrate at each (gamma, beta) and rho, and at each N."""
    slopes = []
    for gamma, beta in size.scales:
        config = BASE.replace(gamma=gamma, beta=beta)
        times = [_median_time(flows(config.replace(init_scale=rho), size.seeds)) for rho in RHOS]
        slopes.append({"gamma": gamma, "beta": beta, "times": times,
                       "slope": (times[1] - times[0]) / np.log(RHOS[0] / RHOS[1])})
    gamma, beta = size.scales[0]
    by_n = [
        _median_time(flows(BASE.replace(gamma=gamma, beta=beta, vocab=n, init_scale=RHOS[0]), size.seeds))
        for n in size.vocabs
    ]
    return {"slopes": slopes, "vocabs": list(size.vocabs), "times_by_vocab": by_n, "seeds": size.seeds}


def predict(size: Size, results: dict) -> dict:
    """theory.induction_concentration_slope per (gamma, beta); one time at every N."""
    del results
    return {
        "slopes": [theory.induction_concentration_slope(4, 8, g, b) for g, b in size.scales],
        "uniform_rates": [theory.induction_pair_growth_rate(4, 8, g, b) for g, b in size.scales],
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    """The predicted slope against the slope between rho = 1e-5 and 1e-9 (5%); the median
    time at each N against the first N's (a finding, 5%)."""
    out = []
    for measured, predicted in zip(results["slopes"], predictions["slopes"], strict=True):
        out.append(Row(
            "induction: d t_concentrate / d log(1/rho) = 1 / pair-mode rate after the drift",
            f"S=4 m=1 L=8 N=4096 gamma={measured['gamma']:g} beta={measured['beta']:g}, median of "
            f"{results['seeds']} flows, rho 1e-5 -> 1e-9; tolerance 5%: the drift still finishing "
            "(the slope falls towards the law as rho -> 0)",
            kind="prediction", predicted=predicted, ode=measured["slope"], tolerance=0.05,
        ))
    first = results["times_by_vocab"][0]
    for n, t in zip(results["vocabs"][1:], results["times_by_vocab"][1:], strict=True):
        out.append(Row(
            "induction: the time to concentrate does not depend on N (to O(1/N))",
            f"S=4 m=1 L=8 rho=1e-5, N={n} against N={results['vocabs'][0]}, median of {results['seeds']} flows",
            kind="consistency", predicted=first, ode=t, tolerance=0.05, finding=True,
        ))
    return out


EXPERIMENT = Experiment("induction_time", run, predict, rows, sizes=SIZES)

"""Support size from near-uniform starts: the reduced flow's end state against its sampled law."""

from __future__ import annotations

from collections import Counter

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import keyed_starts, solve_from
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import normal_half_width

CONFIGS = ((8, 64, 16.0), (8, 256, 16.0), (6, 11, 9.0), (8, 64, 24.0), (4, 64, 8.0))
STARTS = 8  # flows per config, at init scales spread over 1e-5 .. 1e-2
RARE = 0.02  # an end state the law gives less than this probability counts as missed
SIZES = {"tiny": 32, "quick": 32, "full": 128}  # isotropic starts of the support prediction


def run(samples: int) -> dict:
    """Support size k at t = 8000 of STARTS flows per (stride, chunks, gain)."""
    del samples
    ends = []
    for stride, chunks, gain in CONFIGS:
        config = FlowConfig(stride=stride, chunks=chunks, gain=gain, t1=8000.0)
        starts = keyed_starts(chunks, STARTS, 1, stride, np.geomspace(1e-5, 1e-2, STARTS))
        hist = solve_from([config] * STARTS, starts)
        weights = np.asarray(hist.pooling_weights[:, -1, 0])
        ends.append(theory.covered(weights, stride).sum(axis=-1))
    return {"configs": CONFIGS, "support": ends}


def predict(samples: int, results: dict) -> dict:
    """theory.predicted_support_size: the flow's k over isotropic starts, and the admissible k."""
    out = []
    for stride, chunks, gain in results["configs"]:
        sizes, probs, admissible = theory.predicted_support_size(
            stride, chunks, gain, samples=samples
        )
        out.append({"sizes": sizes, "probabilities": probs, "admissible": admissible})
    return {"configs": out, "samples": samples}


def rows(results: dict, predictions: dict) -> list[Row]:
    """The law's mean k against the flows' mean (consistency: the law integrates the same
    flow from other starts), within the sampling interval of the difference of the two
    means (the law's variance of k, over the flows' starts and the law's own samples);
    every end state must be admissible and not RARE under the law."""
    out = []
    for (stride, chunks, gain), ode, law in zip(
        results["configs"], results["support"], predictions["configs"], strict=True
    ):
        sizes, probs = np.asarray(law["sizes"], float), np.asarray(law["probabilities"])
        predicted = dict(zip(law["sizes"], law["probabilities"], strict=True))
        missed = np.mean(
            [k not in law["admissible"] or predicted.get(int(k), 0.0) < RARE for k in ode]
        )
        mean_pred = sum(k * p for k, p in predicted.items())
        variance = float(np.sum(probs * (sizes - mean_pred) ** 2))
        noise = normal_half_width(variance * (1 / len(ode) + 1 / predictions["samples"]))
        dist = " ".join(f"{k}:{p:.2f}" for k, p in predicted.items())
        counts = " ".join(f"{k}:{n}" for k, n in sorted(Counter(ode).items()))
        out.append(
            Row(
                "support size k (mean over starts)",
                f"s={stride} N={chunks} gain={gain:g}; predicted {dist}, admissible "
                f"{list(law['admissible'])}; ODE {counts} of {len(ode)}",
                kind="consistency",
                predicted=mean_pred,
                ode=float(np.mean(ode)),
                tolerance=noise / mean_pred,
                holds=bool(missed == 0.0),
            )
        )
    return out


EXPERIMENT = Experiment("support_from_starts", run, predict, rows, sizes=SIZES)

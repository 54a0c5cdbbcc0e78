"""Learned gain where the end state depends on the start: the law's P(k) against flows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import random_starts, solve_from
from weakspots.sims.experiments.experiment import SIZE_NAMES, Experiment, Row
from weakspots.sims.experiments.measure import normal_half_width

STRIDE, CHUNKS, WEIGHT_DECAY, INIT_SCALE, T_END = 6, 40, 2e-3, 0.01, 2e5
GAIN_RTOL = 1e-3  # the flows and the law's ladder reach the same fixed point: solver tolerance


@dataclass(frozen=True)
class Size:
    """Reduced flows run, and the law's sampled starts."""

    flows: int
    law_samples: int


SIZES = {
    name: Size(flows, law_samples)
    for name, flows, law_samples in zip(SIZE_NAMES, (8, 16, 128), (32, 64, 512), strict=True)
}


def run(size: Size) -> dict:
    """Final support size and gain of reduced flows, gain learned (linear) from 1 under weight
    decay, from starts INIT_SCALE * N(0, 1)."""
    n = size.flows
    config = FlowConfig(
        stride=STRIDE, chunks=CHUNKS, gain=1.0, learn_gain=True, weight_decay=WEIGHT_DECAY,
        gain_parametrisation="linear", t1=T_END,
    )  # fmt: skip
    hist = solve_from([config] * n, random_starts(n, 1, STRIDE, INIT_SCALE, seed=4))
    final = np.asarray(hist.pooling_weights[:, -1, 0])
    return {
        "support": theory.covered(final, STRIDE).sum(axis=-1).tolist(),
        "gain": np.asarray(hist.gain[:, -1, 0]).tolist(),
    }


def predict(size: Size, results: dict) -> dict:
    """theory.learned_gain_law (docs/theory.md §9.1, §6.6): the race with the gain, then the
    re-entry ladder."""
    del results
    samples = size.law_samples
    law = theory.learned_gain_law(
        STRIDE, CHUNKS, 1.0, WEIGHT_DECAY, INIT_SCALE, T_END, "linear", samples=samples, seed=3
    )
    return {"law": law["law"], "gain": law["gain"], "samples": samples}


def rows(results: dict, predictions: dict) -> list[Row]:
    """P(two phases) against the flows' fraction (binomial interval of the difference); every
    end state must be one the law gives; each end state's gain against the flows' median."""
    support = np.asarray(results["support"])
    gains = np.asarray(results["gain"])
    law = {int(k): float(v) for k, v in predictions["law"].items()}
    p, n = law.get(2, 0.0), support.size
    variance = max(p * (1 - p), 1 / n) * (1 / n + 1 / predictions["samples"])
    out = [
        Row(
            "learned gain: P(two phases) where the end state depends on the start",
            f"s={STRIDE} N={CHUNKS} wd={WEIGHT_DECAY:g}, gain from 1 (linear), init "
            f"{INIT_SCALE:g}; {n} flows; law {law}",
            kind="prediction",
            predicted=p,
            ode=float(np.mean(support == 2)),
            tolerance=normal_half_width(variance),
            floor=1.0,
            holds=set(support.tolist()) <= set(law),
        )
    ]
    for k, beta in predictions["gain"].items():
        chosen = gains[support == int(k)]
        if chosen.size:
            out.append(
                Row(
                    f"learned gain: final gain of the {k}-phase end state",
                    f"s={STRIDE} N={CHUNKS} wd={WEIGHT_DECAY:g}; {chosen.size} flows",
                    kind="prediction",
                    predicted=beta,
                    ode=float(np.median(chosen)),
                    tolerance=GAIN_RTOL,
                )
            )
    return out


EXPERIMENT = Experiment("learned_gain_law", run, predict, rows, sizes=SIZES)

"""Selection of the support size: the derived cut-local race law against the reduced flow."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import random_starts, solve_from
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import normal_half_width

# (stride, chunks, gain, heads): s 4..16, N from just past N_c to 300, gain 8..32, H 1 and 2
CONFIGS = (
    (7, 30, 14.0, 1),
    (12, 20, 24.0, 1),
    (6, 11, 9.0, 1),
    (8, 64, 24.0, 1),
    (16, 24, 32.0, 1),
    (10, 300, 20.0, 1),
    (16, 300, 24.0, 1),
    (4, 100, 8.0, 1),
    (12, 40, 24.0, 2),
    (8, 64, 16.0, 2),
    (5, 40, 9.0, 2),
)
INIT_SCALE = 0.01


@dataclass(frozen=True)
class Size:
    """How many of CONFIGS (from the first), reduced flows per config, and the law's sampled
    starts."""

    configs: int
    flows: int
    law_samples: int


SIZES = {
    "tiny": Size(configs=1, flows=16, law_samples=32),
    "quick": Size(configs=1, flows=64, law_samples=128),
    "full": Size(configs=len(CONFIGS), flows=256, law_samples=512),
}


def run(size: Size) -> dict:
    """The support size (phases some head covers) each reduced flow ends on at the law's
    horizon, from starts INIT_SCALE * N(0, 1), per config."""
    out = []
    for stride, chunks, gain, heads in CONFIGS[: size.configs]:
        horizon = theory.support_size_law(stride, chunks, gain, heads, samples=1)["t_end"]
        config = FlowConfig(stride=stride, chunks=chunks, gain=gain, heads=heads, t1=horizon)
        n = size.flows
        starts = random_starts(n, heads, stride, INIT_SCALE, seed=2)
        final = np.asarray(solve_from([config] * n, starts).pooling_weights[:, -1])
        k = theory.covered(final, stride).any(axis=1).sum(axis=-1)
        out.append({"config": [stride, chunks, gain, heads], "support": k.tolist()})
    return {"points": out}


def predict(size: Size, results: dict) -> dict:
    """theory.support_size_law per config (docs/theory.md §9.1), from other starts."""
    del results
    samples = size.law_samples
    laws = [
        theory.support_size_law(s, n, g, h, init_scale=INIT_SCALE, samples=samples, seed=1)
        for s, n, g, h in CONFIGS[: size.configs]
    ]
    return {"laws": [{"law": law["law"], "blocks": len(law["blocks"])} for law in laws],
            "samples": samples}  # fmt: skip


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per config, the probability of the flows' most frequent support size: the law's
    against the flows' fraction, within the normal interval of their difference (binomial
    over the flows and the law's samples). The total variation distance is in the config."""
    out = []
    configs = len(results["points"])
    for point, law in zip(results["points"], predictions["laws"], strict=True):
        stride, chunks, gain, heads = point["config"]
        support = np.asarray(point["support"])
        sizes, counts = np.unique(support, return_counts=True)
        flow = {int(a): c / support.size for a, c in zip(sizes, counts, strict=True)}
        p_law = {int(k): float(v) for k, v in law["law"].items()}
        mode = max(flow, key=flow.get)
        tv = 0.5 * sum(abs(flow.get(k, 0.0) - p_law.get(k, 0.0)) for k in set(flow) | set(p_law))
        p = p_law.get(mode, 0.0)
        variance = max(p * (1 - p), 1.0 / support.size) * (
            1 / support.size + 1 / predictions["samples"]
        )
        out.append(
            Row(
                f"support-size law: P(k = {mode})",
                f"s={stride} N={chunks} gain={gain:g} H={heads} init {INIT_SCALE:g}; "
                f"{law['blocks']} blocks; total variation {tv:.3f} over {support.size} flows",
                kind="prediction",
                predicted=p,
                ode=flow[mode],
                tolerance=normal_half_width(variance, configs),
                floor=1.0,
            )
        )
    return out


EXPERIMENT = Experiment("selection_law", run, predict, rows, sizes=SIZES)

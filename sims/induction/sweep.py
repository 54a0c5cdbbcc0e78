"""Sweep kinds `induction_train` and `induction_flow` (`sims.sweep`): a bucket's runs,
each an `InductionTrainConfig` / `InductionFlowConfig`, as (metrics, trajectory) pairs."""

from __future__ import annotations

import numpy as np

from weakspots.sims.induction.flow import solve
from weakspots.sims.induction.train import train_runs
from weakspots.sims.toy.flow import FlowFailed

BYTES_PER_RUN = 2**20  # the gates and their records: small beside any device


def _pair(history) -> tuple[dict, dict]:
    s = history.summary(0)
    metrics = {
        "final_loss": s["loss"],
        "phase_accuracy": s["phase_accuracy"],
        "delta_max": s["delta_max"],
        "positions": s["positions"],
        "distinct": s["distinct"],
        "concentrated": s["concentrated"],
        "key_at_position": s["key_at_position"],
        "value_at_next": s["value_at_next"],
    }
    trajectory = {
        "times": np.asarray(history.times),
        "weights": history.weights[0],
        "offsets": history.offsets[0],
        "loss": history.loss[0],
    }
    return metrics, trajectory


def execute_train(configs) -> list[tuple[dict, dict]]:
    """SGD of each config (one compiled program per bucket: the configs share `.static`)."""
    return [_pair(train_runs(c)) for c in configs]


def execute_flow(configs) -> list[tuple[dict, dict | None]]:
    """The flow of each config; a failed solve gives `{"failure": message}` and no trajectory."""

    out = []
    for c in configs:
        try:
            out.append(_pair(solve(c)))
        except FlowFailed as error:
            out.append(({"failure": str(error)}, None))
    return out

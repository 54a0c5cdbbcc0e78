"""Head ablation: the accuracy each phase loses when one head is removed, for 1, 2, 4, 8 heads."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments.canonical import TRAINING, Training, base_config, train
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.toy.interventions import ablate


@dataclass(frozen=True)
class Size:
    """SGD training, its head counts, and needles per phase for the interventions."""

    training: Training
    heads: tuple[int, ...]
    ablate_samples: int


SIZES = {
    "tiny": Size(TRAINING["tiny"], (1, 2), ablate_samples=16),
    "quick": Size(TRAINING["quick"], (1, 2, 4, 8), ablate_samples=128),
    "full": Size(TRAINING["full"], (1, 2, 4, 8), ablate_samples=512),
}


def configs(size: Size) -> list[TrainConfig]:
    """One canonical run (seed 0) per head count in size.heads."""
    return [base_config(size.training, heads=h) for h in size.heads]


def run(size: Size) -> dict:
    """Ablation maps (accuracy drop when head h is removed, per phase), measured and predicted
    (theory.interventions.ablation_effect from each model's learned pooling weights)."""
    runs_configs = configs(size)
    maps = []
    for c, r in zip(runs_configs, train(runs_configs), strict=True):
        res = ablate(
            c,
            r.model,
            samples=size.ablate_samples,
            predictions=("effect",),
            pooling_patches=False,  # the figure shows the ablation effect alone
        )
        maps.append(
            {
                "heads": c.heads,
                "effect": res["effect"],
                "effect_ci": res["effect_ci"],
                "predicted_effect": res.get("predicted_effect"),
                "phase_accuracy": res["phase_accuracy"],
                "pooling_weights": res["pooling_weights"],
                "samples": res["samples"],
            }
        )
    return {"maps": maps}


def predict(size: Size, results: dict) -> dict:
    """The head-averaged readout's ablation effect, computed with the runs (`run`)."""
    del size
    return {
        "maps": [{"heads": m["heads"], "effect": m["predicted_effect"]} for m in results["maps"]]
    }


# An allowance, not derived: the head-averaged readout approximates the other distractors'
# partition by its mean (theory.interventions), and the measured effect carries the
# binomial noise of size.ablate_samples needles per phase in every cell of the sum.
ABLATION_RTOL = 0.15


def rows(results: dict, predictions: dict) -> list[Row]:
    """The total ablation effect (fit: the readout formula on each run's learned weights)."""
    out = []
    for m, p in zip(results["maps"], predictions["maps"], strict=True):
        if p["effect"] is None:
            continue
        measured, predicted = np.asarray(m["effect"]), np.asarray(p["effect"])
        # Compare the total ablation effect; the per-cell worst error is in the config column.
        worst = float(np.max(np.abs(measured - predicted)))
        out.append(
            Row(
                "total ablation effect (sum over heads, phases)",
                f"H={m['heads']} s=8 N=64 d=64 gain=16; worst cell |err| {worst:.3f}",
                kind="fit",
                predicted=float(predicted.sum()),
                sgd=float(measured.sum()),
                tolerance=ABLATION_RTOL,
                floor=0.5,
            )
        )
    return out


EXPERIMENT = Experiment(
    "head_ablation", run, predict, rows, sizes=SIZES, configs=configs, version=2, drawn=True
)

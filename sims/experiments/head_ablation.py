"""Figure 7, head ablation: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import numpy as np

from weakspots.idealized.config import TrainConfig
from weakspots.sims.experiments._common import Size, base_config, cached, row, train


def configs_head_ablation(size: Size) -> list[TrainConfig]:
    """One canonical run (seed 0) per head count in size.heads."""
    return [base_config(size, heads=h) for h in size.heads]


def run_head_ablation(size: Size, store_dir=None) -> dict:
    """Ablation maps (accuracy drop when head h is removed, per phase) for H = 1, 2, 4, 8."""
    from weakspots.sims.analysis import ablate

    def compute():
        configs = configs_head_ablation(size)
        out = []
        for c, r in zip(configs, train(configs), strict=True):
            res = ablate(
                c,
                r.model,
                samples=size.ablate_samples,
                predictions=("effect",),
                pooling_patches=False,  # the figure shows the ablation effect alone
            )
            out.append(
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
        return {"maps": out}

    return cached(store_dir, "run", "head_ablation", size, compute)


def predict_head_ablation(size: Size, results: dict, store_dir=None) -> dict:
    """theory.interventions.ablation_effect (head-averaged readout) from each model's pooling weights."""
    del size, store_dir
    return {
        "maps": [{"heads": m["heads"], "effect": m["predicted_effect"]} for m in results["maps"]]
    }


def rows_head_ablation(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for m, p in zip(results["maps"], predictions["maps"], strict=True):
        if p["effect"] is None:
            continue
        measured, predicted = np.asarray(m["effect"]), np.asarray(p["effect"])
        # Compare the total ablation effect; the per-cell worst error is in the config column.
        worst = float(np.max(np.abs(measured - predicted)))
        rows.append(
            row(
                "total ablation effect (sum over heads, phases)",
                f"H={m['heads']} s=8 N=64 d=64 gain=16; worst cell |err| {worst:.3f}",
                float(predicted.sum()),
                sgd=float(measured.sum()),
                tolerance=0.15,
                floor=0.5,
            )
        )
    return rows

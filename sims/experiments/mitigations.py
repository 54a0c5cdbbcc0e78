"""Figure 10, mitigations: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

from weakspots.idealized.config import TrainConfig
from weakspots.sims.experiments._common import Size, base_config, cached, row, train


def _base(size: Size) -> TrainConfig:
    return base_config(size, heads=2)


def configs_mitigations(size: Size) -> list[TrainConfig]:
    """Each mitigation of sims.analysis.MITIGATIONS with 2 heads, size.seeds seeds."""
    from weakspots.sims.analysis import MITIGATIONS, mitigation_configs

    runs = mitigation_configs(_base(size), MITIGATIONS, range(size.seeds))
    return [c for configs in runs.values() for c in configs]


def run_mitigations(size: Size, store_dir=None) -> dict:
    """Each mitigation of sims.analysis.MITIGATIONS with 2 heads: measured and predicted, and cost."""
    from weakspots.sims.analysis import MITIGATIONS, compare_mitigations

    def compute():
        out = compare_mitigations(_base(size), MITIGATIONS, list(range(size.seeds)), train=train)
        return {"heads": 2, "mitigations": out}

    return cached(store_dir, "run", "mitigations", size, compute)


def predict_mitigations(size: Size, results: dict, store_dir=None) -> dict:
    """The predictions are computed with the runs (reduced flow from each run's own start)."""
    del size, store_dir
    return {
        name: {
            "delta_max": m["predicted_delta_max"],
            "mean_accuracy": m["predicted_mean_accuracy"],
            "cost": m["cost"],
        }
        for name, m in results["mitigations"].items()
    }


def rows_mitigations(results: dict, predictions: dict) -> list[dict]:
    return [
        row(
            f"delta_max with {name}",
            "s=8 N=64 d=64 gain=16 H=2; flow from each run's start",
            predictions[name]["delta_max"]["mean"],
            sgd=m["delta_max"]["mean"],
            tolerance=0.15,
            floor=1.0,
        )
        for name, m in results["mitigations"].items()
    ]

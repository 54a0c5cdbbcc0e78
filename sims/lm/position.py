"""Paper figure (a): accuracy against the queried value's position, compressed decoder beside the dense control.

`configs(size)` lists the runs (seeds of one compressed design and of its dense control,
`--operator none`, on the same task and budget); `run(size)` trains them and returns plain
JSON-able results: per design, the outcomes pooled over seeds (`evaluate.phase_summary`:
accuracy per position and per phase with the seeds as clusters, `delta_max`, its interval
and its noise floor, straddling) and each seed's phase accuracy.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from weakspots.idealized.lm_config import LMConfig
from weakspots.sims.lm.evaluate import phase_summary, seed_phase_statistics, seed_spread
from weakspots.sims.lm.train import train_many
from weakspots.sims.progress import Progress

SIZES: dict[str, dict] = {
    "tiny": dict(
        config=dict(seq_len=32, pairs=2, d_model=16, heads=2, rope_dim=4, window=4,
                    steps=4, eval_every=2, batch=4, eval_batch=8, eval_samples=1),
        seeds=1,
    ),
    "quick": dict(
        config=dict(seq_len=64, pairs=2, d_model=32, rope_dim=8, window=8, steps=300,
                    eval_every=100, batch=32, eval_samples=8),
        seeds=2,
    ),
    # the configuration of sims/lm/runs/mean_pool_s4_p8.json and none_s4_p8.json
    "full": dict(config=dict(pairs=8, steps=2000, eval_samples=64), seeds=4),
}  # fmt: skip
"""Per size: the compressed design's `LMConfig` fields (the control adds `operator="none"`) and seeds."""


def designs(size: str) -> dict[str, LMConfig]:
    """The compressed design (the `LMConfig` defaults: mean pooling, s = 4) and its dense control."""
    base = LMConfig(**SIZES[size]["config"])
    return {"compressed": base, "dense": base.replace(operator="none")}


def configs(size: str) -> list[LMConfig]:
    seeds = range(SIZES[size]["seeds"])
    return [c.replace(seed=s) for c in designs(size).values() for s in seeds]


def run(size: str, progress: Progress | None = None) -> dict:
    """Train every run of `configs(size)`; pooled and per-seed per-phase results per design."""
    results = train_many(configs(size), progress=progress)
    out = {"size": size, "designs": {}}
    for name, config in designs(size).items():
        mine = [r for r in results if r.config.static == config.static]
        per_seed = [r.summary() for r in mine]
        out["designs"][name] = {
            "config": dataclasses.asdict(config),
            "seeds": [r.config.seed for r in mine],
            "pooled": phase_summary(config, np.stack([r.outcomes for r in mine])),
            "phase_accuracy": [s["phase_accuracy"] for s in per_seed],
            "delta_max": [s["delta_max"] for s in per_seed],
            "seed_spread": seed_spread([s["phase_accuracy"] for s in per_seed]),
            "final_loss": [s["final_loss"] for s in per_seed],
            "wall_seconds": float(sum(r.wall_seconds for r in mine)),
        }
    return out


def clustered_pooled(report: dict) -> dict:
    """The `pooled` summary of a saved `weakspots lm train --seeds K --json` report with its
    per-phase intervals, `delta_max` interval, noise floor and interval gap taken over the
    seeds as clusters (`evaluate.seed_phase_statistics` on the report's per-seed accuracies;
    a report whose `pooled` already has them is returned as it is)."""
    pooled = report["pooled"]
    if pooled.get("interval") == "seed clusters":
        return pooled
    per_seed = np.asarray(report["phase_accuracy"], np.float64)
    stats = seed_phase_statistics(per_seed, np.asarray(report["phase_samples"][0]))
    stats["phase_accuracy"] = pooled["phase_accuracy"]
    del stats["seeds"]
    return {
        **pooled,
        **stats,
        "phase_accuracy_per_seed": per_seed.tolist(),
        "interval": "seed clusters, one evaluation set shared by the seeds",
    }

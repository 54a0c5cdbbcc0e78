"""Paper figure `lm_position`, decoders trained from scratch: accuracy against the queried value's
position, a compressed design beside its dense control on the same task and training.

`decoder_runs(size)` lists the runs (seeds of one compressed design and of its dense control,
`--operator none`); `run(size)` trains them and returns plain JSON-able results, per design.

No theory predicts the size of a trained decoder's weak spot, so the compressed design's
weak spot is a measurement the figure shows (per-phase accuracy, seeds as clusters) and
no row compares it with anything. What is predicted, without simulating the decoders:

* the dense control has no period-`s` structure, so its phases should differ by the
  evaluation's sampling noise alone: its `delta_max` against 0, within the noise floor
  (the 95% quantile of `delta_max` with no phase effect, the seeds as clusters,
  `sims.decoder.evaluate.seed_noise_floor`);
* compression packs `s` tokens per entry, so where the compressed design has a weak spot
  its period is `s`: the dominant period of the far facts' accuracy against position
  (`position_spectrum`) against `s`, exactly (periods are read on a discrete grid). This
  row is made at the full size only: the smaller decoders answer near chance, and their
  accuracy against position is dominated by sampling noise, not by a period.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.decoder.evaluate import phase_summary, seed_phase_statistics, seed_spread
from weakspots.sims.decoder.train import train_many
from weakspots.sims.experiments.decoder import ENGINE
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.progress import Progress


@dataclass(frozen=True)
class Size:
    """The size's name (results carry it), the compressed design's `LMConfig` fields (the
    control adds `operator="none"`) and the seeds of each design."""

    name: str
    config: dict
    seeds: int


SIZES = {
    "tiny": Size(
        "tiny",
        config=dict(seq_len=32, pairs=2, d_model=16, heads=2, rope_dim=4, window=4,
                    steps=4, eval_every=2, batch=4, eval_batch=8, eval_samples=1),
        seeds=1,
    ),
    "quick": Size(
        "quick",
        config=dict(seq_len=64, pairs=2, d_model=32, rope_dim=8, window=8, steps=300,
                    eval_every=100, batch=32, eval_samples=8),
        seeds=2,
    ),
    # the configuration of sims/experiments/decoder/position/runs/mean_pool_s4_p8.json and none_s4_p8.json
    "full": Size("full", config=dict(pairs=8, steps=2000, eval_samples=64), seeds=4),
}  # fmt: skip


def designs(size: Size) -> dict[str, LMConfig]:
    """The compressed design (the `LMConfig` defaults: mean pooling, s = 4) and its dense
    control."""
    base = LMConfig(**size.config)
    return {"compressed": base, "dense": base.replace(operator="none")}


def decoder_runs(size: Size) -> list[LMConfig]:
    """Every decoder run: `size.seeds` seeds of each design (trained by `run`, not declared
    as `Experiment.configs`, which lists the toy's SGD runs)."""
    return [c.replace(seed=s) for c in designs(size).values() for s in range(size.seeds)]


def run(size: Size, progress: Progress | None = None) -> dict:
    """Train every run of `decoder_runs(size)`; pooled and per-seed per-phase results per design:
    the outcomes pooled over seeds (`evaluate.phase_summary`: accuracy per position and per
    phase with the seeds as clusters, `delta_max`, its interval and its noise floor,
    straddling) and each seed's phase accuracy."""
    results = train_many(decoder_runs(size), progress=progress)
    out = {"size": size.name, "designs": {}}
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


def predict(size: Size, results: dict) -> dict:
    """No phase effect in the dense control; the compressed design's period is its stride."""
    del size
    return {
        "dense_delta_max": 0.0,
        "period": float(results["designs"]["compressed"]["config"]["stride"]),
    }


def rows(results: dict, predictions: dict) -> list[Row]:
    designs = results["designs"]
    compressed, dense = designs["compressed"], designs["dense"]

    def described(design: dict) -> str:
        c = design["config"]
        return (
            f"{c['operator']} s={c['stride']} T={c['seq_len']} P={c['pairs']} "
            f"{c['steps']} steps, {len(design['seeds'])} seeds pooled"
        )

    out = [
        Row(
            "dense control: delta_max within the noise of no phase effect",
            described(dense) + "; tolerance: 95% noise floor",
            kind="prediction",
            predicted=predictions["dense_delta_max"],
            sgd=dense["pooled"]["delta_max"],
            tolerance=dense["pooled"]["delta_max_noise_floor"],
            floor=1.0,
        )
    ]
    if results["size"] == "full":
        out.append(
            Row(
                "compressed: dominant period of accuracy against position",
                described(compressed) + "; facts beyond the query's window",
                kind="prediction",
                predicted=predictions["period"],
                sgd=compressed["pooled"]["position_spectrum"]["dominant_period"],
                tolerance=0.0,  # periods come from a discrete frequency grid: equal or not
            )
        )
    return out


EXPERIMENT = Experiment(
    "lm_position",
    run,
    predict,
    rows,
    sizes=SIZES,
    version=2,
    drawn=True,
    study=__package__,
    engine=ENGINE,
)

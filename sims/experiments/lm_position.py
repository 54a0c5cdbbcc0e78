"""Decoders trained from scratch: accuracy against the queried value's position, a compressed
design beside its dense control on the same task and budget (`sims.lm.position`).

No theory predicts the size of a trained decoder's weak spot, so the compressed design's
weak spot is a measurement the figure shows (per-phase accuracy, seeds as clusters) and
no row compares it with anything. What is predicted, without simulating the decoders:

* the dense control has no period-`s` structure, so its phases should differ by the
  evaluation's sampling noise alone: its `delta_max` against 0, within the noise floor
  (the 95% quantile of `delta_max` with no phase effect, the seeds as clusters,
  `sims.lm.evaluate.seed_noise_floor`);
* compression packs `s` tokens per entry, so where the compressed design has a weak spot
  its period is `s`: the dominant period of the far facts' accuracy against position
  (`position_spectrum`) against `s`, exactly (periods are read on a discrete grid). This
  row is made at the full size only: the smaller decoders answer near chance, and their
  accuracy against position is dominated by sampling noise, not by a period.
"""

from __future__ import annotations

from weakspots.sims.experiments.experiment import Budget, Experiment, Row, drawn_in_figures
from weakspots.sims.lm import position


def run(budget: Budget) -> dict:
    """Train the compressed design and its dense control (`position.SIZES[budget.name]`)."""
    return position.run(budget.name)


def predict(budget: Budget, results: dict) -> dict:
    """No phase effect in the dense control; the compressed design's period is its stride."""
    del budget
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


EXPERIMENT = Experiment("lm_position", run, predict, rows, version=2, figure=drawn_in_figures)

"""The decoder family trained alike: the weak-spot gap by operator x stride x context
(`sims.experiments.decoder.family.study`).

The compressed cells are measurements the figure shows (`delta_max`, and whether the worst
phase's interval, seeds as clusters, lies wholly below the best one's); no theory predicts
them, so no row compares them with anything. The dense control (`--operator none`, its
phases counted at each stride) has no period-`s` structure: each of its cells is a row, its
`delta_max` against 0 within its 95% noise floor (`sims.decoder.evaluate.seed_noise_floor`: seeds
as clusters where a cell has several, the binomial floor of the evaluation for one).

The named designs (`family.FAMILY_DESIGNS`: `v4`, DeepSeek-V4's attention; trained at full, read
from their recorded report below it) ask an open question, not a check: does the design
show a weak spot beyond its noise floor? Each of their cells is a finding row, held when
its `delta_max` exceeds its 95% noise floor.
"""

from __future__ import annotations

import math

from weakspots.sims.experiments.decoder import ENGINE
from weakspots.sims.experiments.decoder.family import study as family
from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name


def run(size: str) -> dict:
    """Train the grid of `family.SIZES[size]`, seeds pooled per cell."""
    return family.run(size)


def predict(size: str, results: dict) -> dict:
    """No phase effect in the dense control at any stride or context."""
    del size, results
    return {"dense_delta_max": 0.0}


def rows(results: dict, predictions: dict) -> list[Row]:
    return _dense_rows(results, predictions) + [_design_row(r) for r in results.get("designs", [])]


def _design_row(r: dict) -> Row:
    """Design `r`'s cell as a finding: a weak spot beyond its noise floor, or not."""
    return Row(
        f"{r['design']} design: a weak spot beyond its noise floor (delta_max)",
        f"{r['design']} at s={r['stride']} T={r['seq_len']}, {r['seeds']} seed(s) pooled, "
        f"mean accuracy {r['mean_accuracy']:.3f}, {r['source']}; predicted: the 95% noise "
        "floor as a lower bound; holds when delta_max exceeds it",
        kind="prediction",
        finding=True,  # an open question about the design, not a check of the code
        predicted=r["delta_max_noise_floor"],
        sgd=r["delta_max"],
        tolerance=math.inf,
        holds=bool(r["delta_max"] > r["delta_max_noise_floor"]),
    )


def _dense_rows(results: dict, predictions: dict) -> list[Row]:
    return [
        Row(
            "dense control: delta_max within the noise of no phase effect",
            f"phases at s={r['stride']} T={r['seq_len']}, {r['seeds']} seed(s) pooled; "
            "tolerance: 95% noise floor",
            kind="prediction",
            predicted=predictions["dense_delta_max"],
            sgd=r["delta_max"],
            tolerance=r["delta_max_noise_floor"],
            floor=1.0,
        )
        for r in results["rows"]
        if r["operator"] == "none"
    ]


EXPERIMENT = Experiment(
    "lm_family",
    run,
    predict,
    rows,
    sizes=sizes_by_name(),
    version=3,
    drawn=True,
    study=__package__,
    engine=ENGINE,
)

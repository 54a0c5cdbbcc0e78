"""Figure `lm_amplifier_profile`: the per-phase profile of DeepSeek-V4's design beside its dense control and its
most amplifying ablation (the design of `sims.experiments.decoder.amplifier.study` with the largest `delta_max`);
in the `csa_add` arms (8, 16 and 20 facts), its base beside the control and the part with the
largest gap; in `hca_add`, the base beside its control.

Finding rows: does each of the three show a weak spot beyond the intervals (the worst phase's
95% interval wholly below the best one's, seeds as clusters, each seed on its own sequences)?
"""

from __future__ import annotations

import math

from weakspots.sims.experiments.decoder import ENGINE
from weakspots.sims.experiments.decoder.amplifier import study as amplifier
from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name


def profiles(cells: list[dict]) -> list[dict]:
    """Per (arm, seq_len): the arm's reference (V4, or the base), the dense control and the
    other design with the largest delta_max."""
    out = []
    for arm, seq_len in dict.fromkeys((c["arm"], c["seq_len"]) for c in cells):
        mine = {c["design"]: c for c in cells if (c["arm"], c["seq_len"]) == (arm, seq_len)}
        reference = amplifier.REFERENCE[arm]
        ablations = [c for d, c in mine.items() if d not in (reference, "dense")]
        shown = [mine.get(reference), mine.get("dense")]
        if ablations:
            shown.append(max(ablations, key=lambda c: c["delta_max"]))
        out.append(dict(arm=arm, seq_len=seq_len, designs=[c for c in shown if c is not None]))
    return out


def run(size: str) -> dict:
    cells = [amplifier.summary(c) for c in amplifier.run(size)["cells"]]
    return {"profiles": profiles(cells)}


def predict(size: str, results: dict) -> dict:
    del size, results
    return {}


def rows(results: dict, predictions: dict) -> list[Row]:
    del predictions
    out = []
    for p in results["profiles"]:
        for c in p["designs"]:
            out.append(Row(
                f"amplifier profile: {c['design']} has a weak spot beyond the intervals",
                f"{p['arm']} arm, T={p['seq_len']}, {c['seeds']} seed(s); worst phase "
                f"{c['worst_phase']}, best {c['best_phase']}, mean accuracy "
                f"{c['mean_accuracy']:.3f}; predicted: the interval gap's sign; holds when "
                "the best phase's lower bound exceeds the worst one's upper bound",
                kind="prediction", finding=True, predicted=0.0, sgd=c["interval_gap"],
                tolerance=math.inf, holds=c["interval_gap"] > 0,
            ))  # fmt: skip
    return out


EXPERIMENT = Experiment(
    "lm_amplifier_profile",
    run,
    predict,
    rows,
    sizes=sizes_by_name(),
    version=1,
    drawn=True,
    study=__package__,
    engine=ENGINE,
)

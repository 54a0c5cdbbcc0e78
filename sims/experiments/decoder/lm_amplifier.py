"""Figure (f): which part of DeepSeek-V4's attention makes weak spots large (`sims.decoder.amplifier`).

Each part of V4's layer switched off in training, one at a time, beside V4's design and the
dense control, at V4's proportions (a local branch of 8 strides beside the compressed
entries). No theory predicts the designs' gaps, so each is a finding row: does switching
the part off move `delta_max` beyond both designs' intervals (seeds as clusters)? The dense
control is a prediction: no phase effect, `delta_max` within its 95% noise floor. The carry
tests ask where V4's design reads a fact from: accuracy left with its own entries hidden
(carried entries suffice, against chance), and with the local edges into the fact cut (no
carry), each against the intact design by a paired interval.
"""

from __future__ import annotations

import math

from weakspots.sims.decoder import amplifier
from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name


def run(size: str) -> dict:
    """Every design of the study at `size` (`amplifier.run`), as `amplifier.summary` rows."""
    study = amplifier.run(size)
    return {"cells": [amplifier.summary(c) for c in study["cells"]], "chance": study["chance"]}


def predict(size: str, results: dict) -> dict:
    """No phase effect in the dense control; chance accuracy where no entry holds the fact."""
    del size
    return {"dense_delta_max": 0.0, "chance": results["chance"]}


def _by(results: dict) -> dict:
    return {(c["arm"], c["seq_len"], c["design"]): c for c in results["cells"]}


def rows(results: dict, predictions: dict) -> list[Row]:
    cells = _by(results)
    out = []
    for (arm, seq_len, design), c in cells.items():
        where = f"{arm} arm, T={seq_len}, {c['seeds']} seed(s)"
        if design == "dense":
            out.append(Row(
                "amplifier study, dense control: delta_max within the noise of no phase effect",
                f"{where}; tolerance: 95% noise floor (seeds as clusters)",
                kind="prediction", predicted=predictions["dense_delta_max"], sgd=c["delta_max"],
                tolerance=c["delta_max_noise_floor"], floor=1.0,
            ))  # fmt: skip
            continue
        v4 = cells.get((arm, seq_len, "v4"))
        if design != "v4" and v4 is not None:
            out.append(_ablation_row(where, design, c, v4))
        if design == "v4":
            out += _carry_rows(where, c, predictions["chance"])
    return out


def _separated(a, b) -> bool:
    """Two delta_max intervals (seeds as clusters) that do not overlap."""
    if a is None or b is None:
        return False
    return a[0] > b[1] or b[0] > a[1]


def _ablation_row(where: str, design: str, c: dict, v4: dict) -> Row:
    return Row(
        f"amplifier study: {design} in training moves delta_max from V4's",
        f"{where}; V4's delta_max {v4['delta_max']:.3f} (mean accuracy "
        f"{v4['mean_accuracy']:.3f}), {design}'s {c['delta_max']:.3f} (mean accuracy "
        f"{c['mean_accuracy']:.3f}); holds when the two delta_max intervals (t over seeds) "
        "are apart",
        kind="prediction", finding=True, predicted=v4["delta_max"], sgd=c["delta_max"],
        tolerance=math.inf, holds=_separated(c["delta_max_ci"], v4["delta_max_ci"]),
    )  # fmt: skip


def _carry_rows(where: str, c: dict, chance: float) -> list[Row]:
    out = []
    hidden = c["drops"].get("hide_direct")
    if hidden is not None:
        lo = c["drops_ci"]["hide_direct"]
        out.append(Row(
            "amplifier study, V4: the fact's own entries hidden, accuracy stays above chance "
            "(read from the entries it was carried into)",
            f"{where}; mean drop {hidden:.3f} [{lo[0]:.3f}, {lo[1]:.3f}] of intact "
            f"{c['mean_accuracy']:.3f}; predicted: chance, were the own entries the only "
            "source; holds when the accuracy left lies above chance",
            kind="prediction", finding=True, predicted=chance,
            sgd=_mean(c["accuracy_under"]["hide_direct"]), tolerance=math.inf,
            holds=_mean(c["accuracy_under"]["hide_direct"]) > 2 * chance,
        ))  # fmt: skip
    cut = c["drops"].get("cut_local")
    if cut is not None:
        ci = c["drops_ci"]["cut_local"]
        out.append(Row(
            "amplifier study, V4: cutting the local edges into the fact (no carry) lowers "
            "accuracy",
            f"{where}; mean drop {cut:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] (paired, pooled over "
            "seeds); holds when the interval lies above 0",
            kind="prediction", finding=True, predicted=0.0, sgd=cut, tolerance=math.inf,
            holds=ci[0] > 0,
        ))  # fmt: skip
    return out


def _mean(values) -> float:
    return float(sum(values) / len(values))


EXPERIMENT = Experiment(
    "lm_amplifier", run, predict, rows, sizes=sizes_by_name(), version=1, drawn=True
)

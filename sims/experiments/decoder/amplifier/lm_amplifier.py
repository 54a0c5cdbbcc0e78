"""Figure `lm_amplifier`: which part of DeepSeek-V4's attention makes weak spots large (`sims.experiments.decoder.amplifier.study`).

Each part of V4's layer switched off in training, one at a time, beside V4's design and the
dense control, at V4's proportions (a local branch of 8 strides beside the compressed
entries); in the `csa_add` arm, each part switched on, one at a time, in a base that learns
the task. No theory predicts the designs' gaps, so each is a finding row: does the part
move `delta_max` beyond both designs' intervals (seeds as clusters), against the arm's
reference (`amplifier.REFERENCE`: V4's design, or the base), and the comparisons of
`amplifier.COMPARED_WITH` (the paired top-k design against the unpaired, the top-k design
against the base at matched accuracy; gap and current-half rows)? The dense
control is a prediction: no phase effect, `delta_max` within its 95% noise floor. The carry
tests ask where the reference design reads a fact from: accuracy left with its own entries hidden
(carried entries suffice, against chance), and with the local edges into the fact cut (no
carry), each against the intact design by a paired interval.
"""

from __future__ import annotations

import math

from weakspots import theory
from weakspots.sims.experiments.decoder import ENGINE
from weakspots.sims.experiments.decoder.amplifier import study as amplifier
from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name


def run(size: str) -> dict:
    """Every design of the study at `size` (`amplifier.run`), as `amplifier.summary` rows."""
    study = amplifier.run(size)
    return {"cells": [amplifier.summary(c) for c in study["cells"]], "chance": study["chance"]}


def predict(size: str, results: dict) -> dict:
    """No phase effect in the dense control; chance accuracy where no entry holds the fact;
    and the footprint model's ceiling on the gap of a design whose sliding layer carries
    every fact over `W = q s` tokens (flat carry, no key term: `tanh(log(q / (q - 1)) / 4)`,
    `theory.footprint_gap_bound`, `theory.logistic_gap_ceiling`), per arm."""
    ceilings = {}
    for c in results["cells"]:
        q = c["window"] // c["stride"]
        ceilings[c["arm"]] = theory.logistic_gap_ceiling(theory.footprint_gap_bound(q))
    return {"dense_delta_max": 0.0, "chance": results["chance"], "carry_ceiling": ceilings}


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
        reference = amplifier.REFERENCE[arm]
        ref = cells.get((arm, seq_len, reference))
        if design != reference and ref is not None:
            out.append(_ablation_row(where, design, c, reference, ref))
            halves = _halves_row(where, design, c, reference, ref)
            out += [halves] if halves is not None else []
        for other in amplifier.COMPARED_WITH.get(design, ()):
            if (arm, seq_len, other) in cells:
                theirs = cells[(arm, seq_len, other)]
                out.append(_ablation_row(where, design, c, other, theirs))
                halves = _halves_row(where, design, c, other, theirs)
                out += [halves] if halves is not None else []
        if design == reference:
            out += _carry_rows(where, reference, c, predictions["chance"])
            allocation = _allocation_row(where, reference, c)
            out += [allocation] if allocation is not None else []
        if design not in ("dense", "no_local"):
            out.append(_ceiling_row(where, design, c, predictions["carry_ceiling"][arm]))
    return out


def _separated(a, b) -> bool:
    """Two delta_max intervals (seeds as clusters) that do not overlap."""
    if a is None or b is None:
        return False
    return a[0] > b[1] or b[0] > a[1]


def _name(reference: str) -> str:
    return "V4" if reference == "v4" else reference


def _ablation_row(where: str, design: str, c: dict, reference: str, ref: dict) -> Row:
    name = _name(reference)
    return Row(
        f"amplifier study: {design} in training moves delta_max from {name}'s",
        f"{where}; {name}'s delta_max {ref['delta_max']:.3f} (mean accuracy "
        f"{ref['mean_accuracy']:.3f}), {design}'s {c['delta_max']:.3f} (mean accuracy "
        f"{c['mean_accuracy']:.3f}); holds when the two delta_max intervals (t over seeds) "
        "are apart",
        kind="prediction", finding=True, predicted=ref["delta_max"], sgd=c["delta_max"],
        tolerance=math.inf, holds=_separated(c["delta_max_ci"], ref["delta_max_ci"]),
    )  # fmt: skip


def _current_half_drop(c: dict) -> tuple[float, float] | None:
    """Mean drop from hiding the current half of the fact's overlapping windows
    (`hide_direct_current`) over the value phases whose fact lies in one window
    (`key_len .. s - 1`), and its standard error (the phases' samples are disjoint, so their
    paired intervals combine in quadrature); None where the test does not apply."""
    drops, cis = (
        c["phase_drops"].get("hide_direct_current"),
        c["phase_drops_ci"].get("hide_direct_current"),
    )
    phases = range(c["key_len"], len(c["phase_accuracy"]))
    if not drops or not phases:
        return None
    mean = sum(drops[p] for p in phases) / len(phases)
    se = math.sqrt(sum(((cis[p][1] - cis[p][0]) / (2 * 1.959964)) ** 2 for p in phases))
    return mean, se / len(phases)


def _halves_row(where: str, design: str, c: dict, reference: str, ref: dict) -> Row | None:
    """Does `design` need its overlapping window's current half more or less than the
    reference does (both halves hold a fact in one window: entry w's current half, entry
    w + 1's previous half)? None without overlap, or when the two designs' keys differ in
    length (their one-window phases differ)."""
    mine, theirs = _current_half_drop(c), _current_half_drop(ref)
    if mine is None or theirs is None or c["key_len"] != ref["key_len"]:
        return None
    name = _name(reference)
    z = 1.959964
    return Row(
        f"amplifier study: {design} in training changes how much a fact's read needs the current "
        f"half of its overlapping windows, from {name}'s",
        f"{where}; drop from hiding the entries whose current half holds the fact (those whose "
        f"previous half holds it kept), mean over the phases whose fact lies in one window: "
        f"{name} {theirs[0]:.3f} +- {z * theirs[1]:.3f}, {design} {mine[0]:.3f} +- "
        f"{z * mine[1]:.3f} (95%, paired, pooled over seeds); holds when the intervals are apart",
        kind="prediction", finding=True, predicted=theirs[0], sgd=mine[0], tolerance=math.inf,
        holds=abs(mine[0] - theirs[0]) > z * (mine[1] + theirs[1]),
    )  # fmt: skip


def _carry_rows(where: str, reference: str, c: dict, chance: float) -> list[Row]:
    name = _name(reference)
    out = []
    hidden = c["drops"].get("hide_direct")
    if hidden is not None:
        lo = c["drops_ci"]["hide_direct"]
        out.append(Row(
            f"amplifier study, {name}: the fact's own entries hidden, accuracy stays above chance "
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
            f"amplifier study, {name}: cutting the local edges into the fact (no carry) lowers "
            "accuracy",
            f"{where}; mean drop {cut:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] (paired, pooled over "
            "seeds); holds when the interval lies above 0",
            kind="prediction", finding=True, predicted=0.0, sgd=cut, tolerance=math.inf, floor=1.0,
            holds=ci[0] > 0,
        ))  # fmt: skip
    return out


def _ceiling_row(where: str, design: str, c: dict, ceiling: float) -> Row:
    q = c["window"] // c["stride"]
    lo = c["delta_max_ci"][0] if c["delta_max_ci"] else c["delta_max"]
    return Row(
        f"amplifier study: {design}'s gap within the footprint model's carry-only ceiling",
        f"{where}; sliding window W = {c['window']} = {q} strides; predicted: "
        f"tanh(log(q/(q-1))/4) = {ceiling:.4f} (flat carry over W, any pooling, no key term, "
        "read qualities equal); holds when delta_max's interval reaches down to it",
        kind="prediction", finding=True, predicted=ceiling, sgd=c["delta_max"],
        tolerance=math.inf, holds=lo <= ceiling,
    )  # fmt: skip


def _log_ratio(c: dict, phase: int) -> tuple[float, float]:
    """log(own-entry drop / next-entry drop) at `phase` and its delta-method standard error
    (each drop's from its paired 95% interval); nan where a drop is not positive."""
    own, nxt = c["phase_drops"]["hide_direct"][phase], c["phase_drops"]["hide_next1"][phase]
    if own <= 0 or nxt <= 0:
        return math.nan, math.nan
    se = lambda ci: (ci[1] - ci[0]) / (2 * 1.959964)  # noqa: E731
    own_se = se(c["phase_drops_ci"]["hide_direct"][phase])
    nxt_se = se(c["phase_drops_ci"]["hide_next1"][phase])
    return math.log(own / nxt), math.hypot(own_se / own, nxt_se / nxt)


def _allocation_row(where: str, reference: str, c: dict) -> Row | None:
    """The footprint model's allocation law, `log(pi_own / pi_next) = g_D - g phi` (phi >= 1),
    read through the drops from hiding the fact's own entries and the next one: the line
    through phases 1 and s - 1, checked at the phases between (a fit: g comes from the
    decoder). None when the stride leaves no phase between, or a drop at a phase used is not
    above 0 (no log ratio: at HCA's 16 phases with 2 seeds)."""
    s = len(c["phase_accuracy"])
    if s < 3 or "hide_next1" not in c["phase_drops"]:
        return None
    (r1, e1), (rl, el) = _log_ratio(c, 1), _log_ratio(c, s - 1)
    if not (math.isfinite(r1) and math.isfinite(rl)):
        return None  # a drop not above 0 at an end phase: no log ratio to fit a line through
    slope = (rl - r1) / (s - 2)
    checks = [(p, *_log_ratio(c, p)) for p in range(2, s - 1)]
    checks = [t for t in checks if math.isfinite(t[1])]
    if not checks:
        return None
    worst = max(checks, key=lambda t: abs(t[1] - (r1 + slope * (t[0] - 1))))
    phase, measured, error = worst
    predicted = r1 + slope * (phase - 1)
    t = (phase - 1) / (s - 2)
    spread = math.hypot(error, math.hypot((1 - t) * e1, t * el))
    return Row(
        f"amplifier study, {_name(reference)}: the allocation law "
        "log(own / next) = g_D - g phi, linear in phase",
        f"{where}; own/next read shares measured by the drops from hiding the fact's own "
        f"entries and the next one; line through phases 1 and {s - 1} (g = {-slope:.3f} per "
        f"phase fitted), checked at phase {phase}; tolerance: 2 standard errors (delta method)",
        kind="fit", predicted=predicted, sgd=measured,
        tolerance=2 * spread / max(abs(predicted), 1.0), floor=1.0,
    )  # fmt: skip


def _mean(values) -> float:
    return float(sum(values) / len(values))


EXPERIMENT = Experiment(
    "lm_amplifier",
    run,
    predict,
    rows,
    sizes=sizes_by_name(),
    version=1,
    drawn=True,
    study=__package__,
    engine=ENGINE,
)

"""Figure `lm_footprint`: the footprint model (docs/theory.md §9.4) held against decoders that carry a fact.

The designs of `sims.experiments.decoder.footprint.study.FOOTPRINT`: the project's decoder (a sliding layer of
W tokens, then a layer reading only compressed entries of s tokens) at W / s = 1/2, 1, 2, 4
for s = 4 and 8, at twice the length with the same fact density, and with softmax pooling
below and above the stride. The model's readout, `acc = c + (1 - c) sigma(b + logit M(phi))`
with flat carry over W, mean pooling and the design's N entries, is fitted to each design's
intact per-phase accuracy (offset b, carry gain g, key gain g_D: rows typed `fit`); what
it then says of the same decoders with the fact's own entry, or the next one, hidden is
checked against the carry tests (`fit`: the gains come from the decoder). The model's
parameter-free claims (the profile is a function of phi / s and W / s alone; fact density
does not enter, length shifts every phase alike; softmax pooling collapses only where a
window is wider than the carry) are `prediction`s. Every row is a finding: whether the
decoders follow the idealised model is the open question, reported held or not held.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logit

from weakspots import theory
from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.metrics import mean_interval, specialization_index, student_t_quantile
from weakspots.sims.experiments.decoder import ENGINE
from weakspots.sims.experiments.decoder.footprint import study as footprint
from weakspots.sims.experiments.experiment import Experiment, Row, Table, sizes_by_name

HIDDEN = {"hide_direct": ("direct",), "hide_next1": ("next1",)}
"""Carry test -> the entries the footprint model removes for it."""
EQUAL_RATIO = (("s4_w2", "s8_w4"), ("s4_w4", "s8_w8"), ("s4_w8", "s8_w16"), ("s4_w16", "s8_w32"))
"""Designs at equal W / s, stride 4 against stride 8."""
LENGTHS = ("s8_w16", "s8_w16_T256")
"""One design at two lengths, the fact density kept."""
SOFTMAX = ("softmax_s8_w4", "softmax_s8_w16")
"""Softmax pooling with the carry shorter than a window, and two windows long."""


def run(size: str) -> dict:
    """Every footprint design's report (`sims.experiments.decoder.footprint.study.run`), as `footprint.summary`."""
    cells = footprint.run("footprint", size)
    return {"designs": {d: footprint.summary(d, c) for d, c in cells.items()}}


def predict(size: str, results: dict) -> dict:
    """Per design: the fitted profile, the accuracy the fit predicts with the fact's own entry or
    the next one hidden, the footprint gap bound with the fitted key gain
    (`theory.footprint_gap_bound`, W = q s, plus the spread of `log(N - n_e)` over phases:
    `q` entries hold the fact at phase 0 beside the decoy, `q + 1` at the others) and the
    carry-only one."""
    del size
    out = {}
    for name, c in results["designs"].items():
        config = LMConfig(**c["config"])
        fit = c["fit"]
        q, rho = divmod(c["window"], c["stride"])
        out[name] = {
            "fitted": footprint.fitted_accuracy(config, fit).tolist(),
            "hidden": {t: footprint.fitted_accuracy(config, fit, h).tolist()
                       for t, h in HIDDEN.items()},  # fmt: skip
            "gap_ceiling": theory.logistic_gap_ceiling(
                theory.footprint_gap_bound(q, max(fit["decoy_gain"], 0.0))
                + abs(math.log((c["chunks"] - q + math.expm1(fit["decoy_gain"]))
                               / (c["chunks"] - q - 1)))
            ) if rho == 0 and q >= 2 else None,  # fmt: skip
            "carry_only_ceiling": theory.logistic_gap_ceiling(theory.footprint_gap_bound(q))
            if rho == 0 and q >= 2 else None,
        }  # fmt: skip
    return out


def _where(c: dict) -> str:
    return (f"{c['design']}: s={c['stride']}, W={c['window']}, T={c['seq_len']}, N={c['chunks']}, "
            f"{c['operator']}, {c['seeds']} seeds")  # fmt: skip


def _half_widths(ci) -> np.ndarray:
    ci = np.asarray(ci, float)
    return (ci[:, 1] - ci[:, 0]) / 2


def _profile_row(c: dict, p: dict) -> Row:
    measured = np.asarray(c["shared_accuracy"])
    fitted = np.asarray(p["fitted"])
    worst, inside = footprint.per_phase_agreement(fitted, measured, c["shared_accuracy_ci"])
    f = c["fit"]
    return Row(
        "footprint model fitted to a decoder's per-phase accuracy",
        f"{_where(c)}; fitted g s = {f['carry_gain'] * c['stride']:.2f}, g_D = "
        f"{f['decoy_gain']:.2f}, b = {f['offset']:.2f} (3 parameters, {c['stride']} phases); "
        f"worst phase {worst}; holds when every phase's fit lies in its 95% interval (seeds as "
        "clusters, shared evaluation set)",
        kind="fit", finding=True, predicted=fitted[worst], sgd=measured[worst],
        tolerance=math.inf, floor=1.0, holds=inside,
    )  # fmt: skip


def _hidden_row(c: dict, p: dict, test: str) -> Row | None:
    if test not in c["drops"] or c["drops"][test] is None:
        return None
    fitted = np.asarray(p["fitted"])
    predicted = fitted - np.asarray(p["hidden"][test])
    measured = np.asarray(c["drops"][test])
    worst, inside = footprint.per_phase_agreement(predicted, measured, c["drops_ci"][test])
    entry = "the fact's own entries" if test == "hide_direct" else "the next window's entry"
    return Row(
        f"footprint model: the drop from hiding {entry} ({test}), predicted from the intact fit",
        f"{_where(c)}; predicted by phase {np.round(predicted, 3).tolist()}, measured "
        f"{np.round(measured, 3).tolist()}; worst phase {worst}; holds when every phase's "
        "prediction lies in the measured drop's paired 95% interval",
        kind="fit", finding=True, predicted=predicted[worst], sgd=measured[worst],
        tolerance=math.inf, floor=1.0, holds=inside,
    )  # fmt: skip


def _ceiling_row(c: dict, p: dict) -> Row | None:
    if p["gap_ceiling"] is None:
        return None
    lo = c["delta_max_ci"][0] if c["delta_max_ci"] else c["delta_max"]
    return Row(
        "footprint model: a decoder's gap within the bound for carry over W = q s",
        f"{_where(c)}; bound tanh((log((q - 1 + e^g_D)/(q - 1)) + the spread of log(N - n_e))/4)"
        f" = {p['gap_ceiling']:.3f} with "
        f"the fitted g_D = {c['fit']['decoy_gain']:.2f} (carry only: {p['carry_only_ceiling']:.3f});"
        " holds when delta_max's interval (t over seeds) reaches down to it",
        kind="fit", finding=True, predicted=p["gap_ceiling"], sgd=c["delta_max"],
        tolerance=math.inf, floor=1.0, holds=lo <= p["gap_ceiling"],
    )  # fmt: skip


def _t_difference(a, b) -> tuple[float, float]:
    """Mean of a - b and its 95% half-width (Welch, seeds of two designs independent)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)) if va + vb > 0 else 1
    return float(a.mean() - b.mean()), student_t_quantile(0.975, max(int(df), 1)) * math.sqrt(
        va + vb
    )


def _slope_row(small: dict, large: dict) -> Row:
    gs = [[f["carry_gain"] * c["stride"] for f in c["seed_fits"]] for c in (small, large)]
    diff, half = _t_difference(gs[1], gs[0])
    return Row(
        "footprint model: the carry gain scales as 1/s (g s the same at equal W / s)",
        f"{small['design']} against {large['design']}: g s = {np.mean(gs[0]):.2f} and "
        f"{np.mean(gs[1]):.2f} (fitted per seed); difference {diff:+.2f} +- {half:.2f} (Welch "
        "95%); holds when the interval holds 0",
        kind="fit", finding=True, predicted=float(np.mean(gs[0])), sgd=float(np.mean(gs[1])),
        tolerance=math.inf, floor=1.0, holds=abs(diff) <= half,
    )  # fmt: skip


def allocation_slope(c: dict) -> tuple[float, float] | None:
    """g of the allocation law `log(pi_own / pi_next) = g_D - g phi` (docs/theory.md §9.4.1),
    read through the carry tests: the drops from hiding the fact's own entries and the next
    one at phases 1 .. s - 1 where both are above 0, a weighted least-squares line in phi
    (each log ratio's standard error by the delta method from the drops' paired intervals).
    Returns (g, its standard error), None with fewer than 3 such phases."""
    if not {"hide_direct", "hide_next1"} <= set(c["drops"]) or c["drops"]["hide_next1"] is None:
        return None
    own, nxt = np.asarray(c["drops"]["hide_direct"]), np.asarray(c["drops"]["hide_next1"])
    se_own, se_nxt = (
        _half_widths(c["drops_ci"][t]) / 1.959964 for t in ("hide_direct", "hide_next1")
    )
    phases = [p for p in range(1, c["stride"]) if own[p] > 0 and nxt[p] > 0]
    if len(phases) < 3:
        return None
    p = np.asarray(phases)
    ratio = np.log(own[p] / nxt[p])
    se = np.hypot(se_own[p] / own[p], se_nxt[p] / nxt[p])
    design = np.stack([np.ones(p.size), -p.astype(float)], axis=1) / se[:, None]
    cov = np.linalg.inv(design.T @ design)
    slope = cov @ design.T @ (ratio / se)
    return float(slope[1]), float(math.sqrt(cov[1, 1]))


def _two_readings_row(c: dict) -> Row | None:
    """The carry gain read two ways from one decoder: the intact profile's fit, and the
    allocation law through the hide drops (`allocation_slope`)."""
    slope = allocation_slope(c)
    if slope is None:
        return None
    g, se = slope
    fitted = c["fit"]["carry_gain"]
    return Row(
        "footprint model: one carry gain for the intact profile and for the allocation law",
        f"{_where(c)}; g fitted to the intact per-phase accuracy {fitted:.3f}; g from the "
        f"allocation law log(own / next) = g_D - g phi through the hide drops {g:.3f} +- "
        f"{se:.3f} (one standard error); holds within 2 standard errors",
        kind="fit", finding=True, predicted=fitted, sgd=g, tolerance=math.inf, floor=1.0,
        holds=abs(g - fitted) <= 2 * se,
    )  # fmt: skip


def _allocation_row(small: dict, large: dict) -> Row | None:
    a, b = allocation_slope(small), allocation_slope(large)
    if a is None or b is None:
        return None
    gs = [g * c["stride"] for g, c in ((a[0], small), (b[0], large))]
    se = math.hypot(a[1] * small["stride"], b[1] * large["stride"])
    return Row(
        "footprint model: the allocation law's slope scales as 1/s (g s the same at equal W / s)",
        f"{small['design']} against {large['design']}: g from log(own / next) drops against "
        f"phase, g s = {gs[0]:.2f} and {gs[1]:.2f} (+- {se:.2f} for the difference, one "
        "standard error, delta method); holds when they differ by less than 2 standard errors",
        kind="fit", finding=True, predicted=gs[0], sgd=gs[1], tolerance=math.inf, floor=1.0,
        holds=abs(gs[1] - gs[0]) <= 2 * se,
    )  # fmt: skip


def _centred_logits(c: dict, phases) -> np.ndarray:
    """Per seed, logit accuracy at `phases` minus its mean over them `(R, len(phases))`."""
    acc = np.clip(np.asarray(c["phase_accuracy_per_seed"])[:, phases], 1e-3, 1 - 1e-3)
    z = logit(acc)
    return z - z.mean(axis=1, keepdims=True)


def _same_profile_row(a: dict, b: dict, what: str) -> Row:
    """a's phases against b's at the same phi / s (b's stride a multiple of a's)."""
    step = b["stride"] // a["stride"]
    za = _centred_logits(a, list(range(a["stride"])))
    zb = _centred_logits(b, list(range(0, b["stride"], step)))
    pairs = [_t_difference(zb[:, i], za[:, i]) for i in range(a["stride"])]
    worst = max(range(len(pairs)), key=lambda i: abs(pairs[i][0]))
    return Row(
        f"footprint model: {what}",
        f"{a['design']} against {b['design']} at equal phi / s, centred logit accuracy (each "
        f"seed's on its own sequences); differences {[round(d, 2) for d, _ in pairs]} +- "
        f"{[round(h, 2) for _, h in pairs]} (Welch 95%); holds when every interval holds 0",
        kind="prediction", finding=True, predicted=0.0, sgd=pairs[worst][0], tolerance=math.inf,
        floor=1.0, holds=all(abs(d) <= h for d, h in pairs),
    )  # fmt: skip


def _narrow_window_row(narrow: dict, wide: dict) -> Row:
    apart = wide["delta_max_ci"][1] < narrow["delta_max_ci"][0]
    return Row(
        "footprint model: a sliding window narrower than the stride leaves a larger gap",
        f"{narrow['design']} (W = s/2) against {wide['design']} (W = 2s): delta_max "
        f"{narrow['delta_max']:.3f} {np.round(narrow['delta_max_ci'], 3).tolist()} against "
        f"{wide['delta_max']:.3f} {np.round(wide['delta_max_ci'], 3).tolist()} (t over seeds); "
        "holds when the intervals are apart, the narrow window's above",
        kind="prediction", finding=True, predicted=wide["delta_max"], sgd=narrow["delta_max"],
        tolerance=math.inf, floor=1.0, holds=bool(apart),
    )  # fmt: skip


def specialisation(c: dict) -> tuple[float, float, float]:
    """Mean over seeds of the compressed layer's specialisation index (heads averaged), with its
    t interval over seeds."""
    weights = np.asarray(c["pooling_weights"])  # (R, H, s)
    return mean_interval(specialization_index(weights).mean(axis=-1), 0.0, 1.0)


def _softmax_row(narrow: dict, wide: dict) -> Row:
    (n, n_lo, _), (w, _, w_hi) = specialisation(narrow), specialisation(wide)
    return Row(
        "footprint model: softmax pooling specialises again only when the carry is shorter "
        "than a window",
        f"{narrow['design']} (W < s) against {wide['design']} (W = 2s): the compressed layer's "
        f"specialisation index 1 - H(alpha)/log s {n:.3f} (lower end {n_lo:.3f}) against {w:.3f} "
        f"(upper end {w_hi:.3f}), t over seeds; holds when the intervals are apart, W < s above",
        kind="prediction", finding=True, predicted=w, sgd=n, tolerance=math.inf, floor=1.0,
        holds=bool(n_lo > w_hi),
    )  # fmt: skip


def rows(results: dict, predictions: dict) -> list[Row]:
    d = results["designs"]
    out = []
    for name, c in d.items():
        p = predictions[name]
        if c["operator"] != "mean_pool":
            continue
        out.append(_profile_row(c, p))
        out += [r for t in HIDDEN if (r := _hidden_row(c, p, t)) is not None]
        out += [r for r in (_two_readings_row(c), _ceiling_row(c, p)) if r is not None]
    for a, b in EQUAL_RATIO:
        if a in d and b in d:
            out.append(_slope_row(d[a], d[b]))
            if (r := _allocation_row(d[a], d[b])) is not None:
                out.append(r)
            out.append(_same_profile_row(d[a], d[b], "the same profile at equal W / s"))
    for s in (4, 8):
        narrow, wide = f"s{s}_w{s // 2}", f"s{s}_w{2 * s}"
        if narrow in d and wide in d:
            out.append(_narrow_window_row(d[narrow], d[wide]))
    if all(n in d for n in LENGTHS):
        out.append(_same_profile_row(
            d[LENGTHS[0]], d[LENGTHS[1]], "at one fact density, length shifts every phase alike"
        ))  # fmt: skip
    if all(n in d and d[n]["pooling_weights"] for n in SOFTMAX):
        out.append(_softmax_row(d[SOFTMAX[0]], d[SOFTMAX[1]]))
    return out


def tables(results: dict, predictions: dict) -> list[Table]:
    del predictions
    body = []
    for name, c in results["designs"].items():
        f = c["fit"]
        body.append((
            name, c["stride"], c["window"], c["seq_len"], c["operator"],
            round(c["mean_accuracy"], 3), round(c["delta_max"], 3),
            round(f["carry_gain"] * c["stride"], 3), round(f["decoy_gain"], 3),
            round(f["offset"], 3), round(f["residual"], 3),
        ))  # fmt: skip
    return [Table(
        "Footprint designs: accuracy, gap and the fitted footprint model",
        ("design", "s", "W", "T", "operator", "mean accuracy", "delta_max", "g s", "g_D", "b",
         "largest residual"),
        body,
        "g s, g_D, b: the footprint model's carry gain (times s), key gain and offset fitted to "
        "the intact per-phase accuracy on the shared evaluation set (sims.experiments.decoder.footprint.study).",
    )]  # fmt: skip


EXPERIMENT = Experiment(
    "lm_footprint",
    run,
    predict,
    rows,
    sizes=sizes_by_name(),
    version=1,
    drawn=True,
    tables=tables,
    study=__package__,
    engine=ENGINE,
)

"""Figure `lm_selection`: the selection model (docs/theory.md §9.5) against decoders with a top-k indexer.

The designs of `sims.experiments.decoder.footprint.study.SELECTION`: the project's decoder (a sliding layer of
W = 2s tokens, then compressed entries of s = 4 tokens) whose compressed layer reads only
the top k entries of DeepSeek-V4's Lightning Indexer: k = 4 at contexts of N = 30, 60, 120
entries (one fact density), and N = 30 at k = 2, 8, 16. Per design and phase, the hit rate
(the indexer keeps one of the fact's entries for the first query:
`sims.decoder.carry.selection`) and the accuracy.

The selection model says `acc(phi) = P(hit | phi, N, k) acc_read(phi)`, the read among the k
kept entries not depending on N, and `P(hit)` an order statistic of the needle's score
against N - 1 distractors. Fitted at k = 4 and the shortest context (the needle's mean
score per phase from its hit rate, distractor and needle scores of unit variance:
`theory.topk_needle_mean`; `acc_read = acc / P(hit)`), it predicts the hit rates and the gap
of the other designs (rows `fit`). That the gap grows with N / k, at fixed k over lengths
and at fixed N over k, is the model's parameter-free claim (`prediction`). Every row is a
finding.
"""

from __future__ import annotations

import math

import numpy as np

from weakspots import theory
from weakspots.sims.experiments.decoder import ENGINE
from weakspots.sims.experiments.decoder.footprint import study as footprint
from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name

SIGMA = 1.0
"""The needle score's standard deviation, in units of the distractors' (assumed, not fitted)."""
CURVE = np.geomspace(1.0, 64.0, 49)
"""N / k of the theory line in figure `lm_selection`."""


def run(size: str) -> dict:
    """Every selection design's report, as `footprint.summary` plus the indexer's hit rates."""
    cells = footprint.run("selection", size)
    out = {}
    for design, cell in cells.items():
        summary = footprint.summary(design, cell)
        summary["selection"] = cell["report"]["selection"]
        out[design] = summary
    return {"designs": out}


def _base(results: dict) -> dict:
    """The design the selection model is fitted at: k = `SELECTION_TOPK`, the shortest context."""
    same_k = [
        c for c in results["designs"].values() if c["indexer_topk"] == footprint.SELECTION_TOPK
    ]
    return min(same_k, key=lambda c: c["chunks"])


def _predicted_accuracy(mu, read, chunks: int, topk: int) -> tuple[np.ndarray, np.ndarray]:
    hit = 1.0 - theory.topk_miss_probability(mu, SIGMA, max(int(round(chunks)), topk + 1), topk)
    return hit * read, hit


def predict(size: str, results: dict) -> dict:
    """From the base design (`_base`): the needle's mean score by phase and the read accuracy;
    at every design's N and k the predicted hit rate, accuracy and gap; and two theory lines
    along `CURVE` (N / k): N grown at the base's k, and k shrunk at the base's N."""
    del size
    base = _base(results)
    n, k = base["chunks"], base["indexer_topk"]
    hit = np.clip(np.asarray(base["selection"]["hit"]), 1e-4, 1 - 1e-4)
    mu = np.array([theory.topk_needle_mean(h, SIGMA, n, k) for h in hit])
    read = np.clip(np.asarray(base["shared_accuracy"]) / hit, 0.0, 1.0)
    per_design = {}
    for c in results["designs"].values():
        acc, h = _predicted_accuracy(mu, read, c["chunks"], c["indexer_topk"])
        per_design[c["design"]] = {"hit": h.tolist(), "accuracy": acc.tolist(),
                                   "delta_max": float(acc.max() - acc.min())}  # fmt: skip

    def line(points):
        made = [_predicted_accuracy(mu, read, chunks, topk) for chunks, topk in points]
        return {"delta_max": [float(a.max() - a.min()) for a, _ in made],
                "hit": [float(h.mean()) for _, h in made]}  # fmt: skip

    by_length = [float(r) for r in CURVE if r * k >= k + 1]
    by_topk = [float(r) for r in CURVE if 1 <= n / r <= n - 1]
    return {
        "base": base["design"],
        "needle_mean": mu.tolist(),
        "read_accuracy": read.tolist(),
        "designs": per_design,
        "curve_length": {"chunks_over_topk": by_length,
                         **line([(r * k, k) for r in by_length])},
        "curve_topk": {"chunks_over_topk": by_topk,
                       **line([(n, max(int(round(n / r)), 1)) for r in by_topk])},
    }  # fmt: skip


def _where(c: dict) -> str:
    return (f"{c['design']}: s={c['stride']}, W={c['window']}, T={c['seq_len']}, N={c['chunks']}, "
            f"k={c['indexer_topk']} (N/k = {c['chunks'] / c['indexer_topk']:g}), {c['seeds']} seeds")  # fmt: skip


def _hit_row(c: dict, p: dict, base: str) -> Row:
    measured = np.asarray(c["selection"]["hit"])
    predicted = np.asarray(p["hit"])
    worst, inside = footprint.per_phase_agreement(predicted, measured, c["selection"]["hit_ci"])
    return Row(
        "selection model: the indexer's hit rate by phase at another N or k, from the base design",
        f"{_where(c)}; needle means fitted at {base}; predicted {np.round(predicted, 3).tolist()}, "
        f"measured {np.round(measured, 3).tolist()}; holds when every phase's prediction lies in "
        "its 95% interval (seeds as clusters)",
        kind="fit", finding=True, predicted=predicted[worst], sgd=measured[worst],
        tolerance=math.inf, floor=1.0, holds=inside,
    )  # fmt: skip


def _gap_row(c: dict, p: dict, base: str) -> Row:
    ci = c["delta_max_ci"] or [c["delta_max"], c["delta_max"]]
    return Row(
        "selection model: the gap at another N or k, from the base design (P(hit) acc_read)",
        f"{_where(c)}; needle means and read accuracy fitted at {base}; holds when the "
        f"prediction lies in delta_max's interval {np.round(ci, 3).tolist()} (t over seeds)",
        kind="fit", finding=True, predicted=p["delta_max"], sgd=c["delta_max"],
        tolerance=math.inf, floor=1.0, holds=bool(ci[0] <= p["delta_max"] <= ci[1]),
    )  # fmt: skip


def _growth_row(low: dict, high: dict, what: str) -> Row:
    apart = (
        low["delta_max_ci"]
        and high["delta_max_ci"]
        and (high["delta_max_ci"][0] > low["delta_max_ci"][1])
    )
    return Row(
        f"selection model: the gap grows with N / k ({what})",
        f"{low['design']} (N/k = {low['chunks'] / low['indexer_topk']:g}) against "
        f"{high['design']} (N/k = {high['chunks'] / high['indexer_topk']:g}): delta_max "
        f"{low['delta_max']:.3f} {np.round(low['delta_max_ci'] or [], 3).tolist()} against "
        f"{high['delta_max']:.3f} {np.round(high['delta_max_ci'] or [], 3).tolist()} (t over "
        "seeds; mean accuracy "
        f"{low['mean_accuracy']:.3f} against {high['mean_accuracy']:.3f}); holds when the "
        "intervals are apart, the larger N / k's above",
        kind="prediction", finding=True, predicted=low["delta_max"], sgd=high["delta_max"],
        tolerance=math.inf, floor=1.0, holds=bool(apart),
    )  # fmt: skip


def rows(results: dict, predictions: dict) -> list[Row]:
    base = predictions["base"]
    designs = results["designs"]
    out = []
    for name, c in designs.items():
        if name == base:
            continue
        p = predictions["designs"][name]
        out += [_hit_row(c, p, base), _gap_row(c, p, base)]
    b = designs[base]
    longer = [c for c in designs.values() if c["indexer_topk"] == b["indexer_topk"]]
    same_n = [c for c in designs.values() if c["chunks"] == b["chunks"]]
    ratio = lambda c: c["chunks"] / c["indexer_topk"]  # noqa: E731
    for group, what in ((longer, f"at fixed k = {b['indexer_topk']}, longer contexts"),
                        (same_n, f"at fixed N = {b['chunks']}, smaller k")):  # fmt: skip
        if len(group) > 1:
            out.append(_growth_row(min(group, key=ratio), max(group, key=ratio), what))
    return out


EXPERIMENT = Experiment(
    "lm_selection",
    run,
    predict,
    rows,
    sizes=sizes_by_name(),
    version=1,
    drawn=True,
    study=__package__,
    engine=ENGINE,
)

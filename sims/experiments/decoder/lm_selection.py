"""Figure (i): the selection model (docs/theory.md §9.5) against decoders with a top-k indexer.

The designs of `sims.decoder.footprint.SELECTION`: the project's decoder (a sliding layer of
W = 2s tokens, then compressed entries of s = 4 tokens) whose compressed layer reads only
the top k = 4 entries of DeepSeek-V4's Lightning Indexer, at contexts of N = 30, 60, 120
entries (one fact density). Per design and phase, the hit rate (the indexer keeps one of the
fact's entries for the first query: `sims.decoder.carry.selection`) and the accuracy.

The selection model says `acc(phi) = P(hit | phi, N, k) acc_read(phi)`, the read among the k
kept entries not depending on N, and `P(hit)` an order statistic of the needle's score
against N - 1 distractors. Fitted at the shortest context (the needle's mean score per
phase from its hit rate, distractor and needle scores of unit variance:
`theory.topk_needle_mean`; `acc_read = acc / P(hit)`), it predicts the hit rates and the gap
at the longer ones (rows `fit`). That the gap grows with N / k at fixed k is the model's
parameter-free claim (`prediction`). Every row is a finding.
"""

from __future__ import annotations

import math

import numpy as np

from weakspots import theory
from weakspots.sims.decoder import footprint
from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name

SIGMA = 1.0
"""The needle score's standard deviation, in units of the distractors' (assumed, not fitted)."""
CURVE = np.geomspace(1.0, 64.0, 49)
"""N / k of the theory line in figure (i)."""


def run(size: str) -> dict:
    """Every selection design's report, as `footprint.summary` plus the indexer's hit rates."""
    cells = footprint.run("selection", size)
    out = {}
    for design, cell in cells.items():
        summary = footprint.summary(design, cell)
        summary["selection"] = cell["report"]["selection"]
        out[design] = summary
    return {"designs": out}


def _by_length(results: dict) -> list[dict]:
    return sorted(results["designs"].values(), key=lambda c: c["chunks"])


def _predicted_accuracy(mu, read, chunks: float, topk: int) -> np.ndarray:
    hit = 1.0 - theory.topk_miss_probability(mu, SIGMA, max(int(round(chunks)), topk + 1), topk)
    return hit * read, hit


def predict(size: str, results: dict) -> dict:
    """From the shortest context: the needle's mean score by phase and the read accuracy; at
    every design's N (and along `CURVE`) the predicted hit rate, accuracy and gap."""
    del size
    designs = _by_length(results)
    base = designs[0]
    k = base["indexer_topk"]
    hit = np.clip(np.asarray(base["selection"]["hit"]), 1e-4, 1 - 1e-4)
    mu = np.array([theory.topk_needle_mean(h, SIGMA, base["chunks"], k) for h in hit])
    read = np.clip(np.asarray(base["shared_accuracy"]) / hit, 0.0, 1.0)
    per_design = {}
    for c in designs:
        acc, h = _predicted_accuracy(mu, read, c["chunks"], k)
        per_design[c["design"]] = {"hit": h.tolist(), "accuracy": acc.tolist(),
                                   "delta_max": float(acc.max() - acc.min())}  # fmt: skip
    curve = [_predicted_accuracy(mu, read, r * k, k)[0] for r in CURVE]
    return {
        "base": base["design"],
        "needle_mean": mu.tolist(),
        "read_accuracy": read.tolist(),
        "designs": per_design,
        "curve": {"chunks_over_topk": CURVE.tolist(),
                  "delta_max": [float(a.max() - a.min()) for a in curve]},
    }  # fmt: skip


def _where(c: dict) -> str:
    return (f"{c['design']}: s={c['stride']}, W={c['window']}, T={c['seq_len']}, N={c['chunks']}, "
            f"k={c['indexer_topk']} (N/k = {c['chunks'] / c['indexer_topk']:g}), {c['seeds']} seeds")  # fmt: skip


def _hit_row(c: dict, p: dict, base: str) -> Row:
    measured = np.asarray(c["selection"]["hit"])
    predicted = np.asarray(p["hit"])
    lo, hi = np.asarray(c["selection"]["hit_ci"]).T
    worst = int(np.argmax(np.abs(predicted - measured)))
    return Row(
        "selection model: the indexer's hit rate by phase at a longer context, from the shortest",
        f"{_where(c)}; needle means fitted at {base}; predicted {np.round(predicted, 3).tolist()}, "
        f"measured {np.round(measured, 3).tolist()}; holds when every phase's prediction lies in "
        "its 95% interval (seeds as clusters)",
        kind="fit", finding=True, predicted=predicted[worst], sgd=measured[worst],
        tolerance=math.inf, floor=1.0, holds=bool(np.all((predicted >= lo) & (predicted <= hi))),
    )  # fmt: skip


def _gap_row(c: dict, p: dict, base: str) -> Row:
    ci = c["delta_max_ci"] or [c["delta_max"], c["delta_max"]]
    return Row(
        "selection model: the gap at a longer context, from the shortest (P(hit) acc_read)",
        f"{_where(c)}; needle means and read accuracy fitted at {base}; holds when the "
        f"prediction lies in delta_max's interval {np.round(ci, 3).tolist()} (t over seeds)",
        kind="fit", finding=True, predicted=p["delta_max"], sgd=c["delta_max"],
        tolerance=math.inf, floor=1.0, holds=bool(ci[0] <= p["delta_max"] <= ci[1]),
    )  # fmt: skip


def _growth_row(short: dict, long: dict) -> Row:
    apart = short["delta_max_ci"] and long["delta_max_ci"] and (
        long["delta_max_ci"][0] > short["delta_max_ci"][1]
    )
    return Row(
        "selection model: at fixed k the gap grows with N / k",
        f"{short['design']} (N/k = {short['chunks'] / short['indexer_topk']:g}) against "
        f"{long['design']} (N/k = {long['chunks'] / long['indexer_topk']:g}): delta_max "
        f"{short['delta_max']:.3f} {np.round(short['delta_max_ci'] or [], 3).tolist()} against "
        f"{long['delta_max']:.3f} {np.round(long['delta_max_ci'] or [], 3).tolist()} (t over "
        "seeds); holds when the intervals are apart, the longer context's above",
        kind="prediction", finding=True, predicted=short["delta_max"], sgd=long["delta_max"],
        tolerance=math.inf, floor=1.0, holds=bool(apart),
    )  # fmt: skip


def rows(results: dict, predictions: dict) -> list[Row]:
    designs = _by_length(results)
    base = predictions["base"]
    out = []
    for c in designs[1:]:
        p = predictions["designs"][c["design"]]
        out += [_hit_row(c, p, base), _gap_row(c, p, base)]
    if len(designs) > 1:
        out.append(_growth_row(designs[0], designs[-1]))
    return out


EXPERIMENT = Experiment(
    "lm_selection", run, predict, rows, sizes=sizes_by_name(), version=1, drawn=True
)

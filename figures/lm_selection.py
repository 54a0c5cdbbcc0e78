"""Figure `lm_selection`: the selection model's gap against N / k, theory lines and decoder points."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels

CAPTION = (
    "Decoders whose compressed layer reads only the Lightning Indexer's top k entries, at k = 4 over context lengths (N = 30, 60, 120 entries) and at N = 30 over k = 2 ... 16. Left: delta_max (best minus worst phase) against N / k, 95% intervals with the seeds as clusters; right: the indexer's hit rate (it keeps one of the fact's entries for the query), mean over phases.",
    "Lines: the selection model fitted at k = 4, N = 30 (needle score per phase from its hit rate, read accuracy among the k kept), P(hit | N, k) x acc_read, with N grown at k = 4 (solid) or k shrunk at N = 30 (dashed).",
)


def _ratio(c) -> float:
    return c["chunks"] / c["indexer_topk"]


def make(results, predictions):
    designs = list(results["designs"].values())
    base = results["designs"][predictions["base"]]
    series = {
        f"k = {base['indexer_topk']}, longer contexts": (
            [c for c in designs if c["indexer_topk"] == base["indexer_topk"]],
            predictions["curve_length"], "-", "o", COLORS[0],
        ),
        f"N = {base['chunks']}, smaller k": (
            [c for c in designs if c["chunks"] == base["chunks"]],
            predictions["curve_topk"], "--", "s", COLORS[1],
        ),
    }  # fmt: skip
    fig, axes = figure(2, 1, width=4.3, height=3.4)
    gap, hits = axes[0]
    for label, (members, curve, line, marker, color) in series.items():
        x = curve["chunks_over_topk"]
        gap.plot(x, curve["delta_max"], line, color=color, lw=1.2)
        hits.plot(x, curve["hit"], line, color=color, lw=1.2)
        members = sorted(members, key=_ratio)
        ratios = [_ratio(c) for c in members]
        value = np.array([c["delta_max"] for c in members])
        ci = np.array([c["delta_max_ci"] or [c["delta_max"]] * 2 for c in members])
        ci[:, 0] = np.maximum(ci[:, 0], 0.0)  # a best-minus-worst gap is never negative
        gap.errorbar(ratios, value, yerr=[value - ci[:, 0], ci[:, 1] - value], fmt=marker,
                     color=color, capsize=3, label=label)  # fmt: skip
        mean_hit = np.array([np.mean(c["selection"]["hit"]) for c in members])
        hits.plot(ratios, mean_hit, marker, color=color)
    for ax in (gap, hits):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("N / k")
    gap.set_ylabel("delta_max")
    gap.set_ylim(bottom=0)
    gap.set_title("gap against N / k", loc="left")
    hits.set_ylabel("indexer hit rate (mean over phases)")
    hits.set_ylim(0, 1.02)
    hits.set_title("hit rate against N / k", loc="left")
    handles, labels = gap.get_legend_handles_labels()
    legend_below(fig, ncol=2, handles=handles, labels=labels)
    fig.suptitle(
        f"Selection model (lines, fitted at k = {base['indexer_topk']}, N = {base['chunks']}) "
        "against decoders (points)"
    )
    return letter_panels(fig)

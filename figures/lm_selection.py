"""Figure (i): the selection model's gap against N / k, theory line and decoder points."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below

CAPTION = (
    "Left: delta_max (best minus worst phase) of decoders whose compressed layer reads only the Lightning Indexer's top k = 4 entries, against N / k (N entries the query sees; 95% intervals, t over seeds); line: the selection model fitted at the shortest context (needle score per phase from its hit rate, read accuracy among the k kept), P(hit | N, k) x acc_read.",
    "Right: the indexer's hit rate (it keeps one of the fact's entries for the query) by phase at each context; points measured (95% intervals, seeds as clusters), lines predicted from the shortest context.",
)


def make(results, predictions):
    designs = sorted(results["designs"].values(), key=lambda c: c["chunks"])
    fig, axes = figure(2, 1, width=4.3, height=3.4)
    gap, hits = axes[0]
    curve = predictions["curve"]
    gap.plot(curve["chunks_over_topk"], curve["delta_max"], "-", color="0.3",
             label="selection model (fitted at the shortest)")  # fmt: skip
    for j, c in enumerate(designs):
        ratio = c["chunks"] / c["indexer_topk"]
        ci = c["delta_max_ci"] or [c["delta_max"], c["delta_max"]]
        gap.errorbar([ratio], [c["delta_max"]], yerr=[[c["delta_max"] - ci[0]], [ci[1] - c["delta_max"]]],
                     fmt="o", color=COLORS[j], capsize=3, label=f"T = {c['seq_len']}")  # fmt: skip
        measured = np.asarray(c["selection"]["hit"])
        x = np.arange(measured.size)
        ci = np.asarray(c["selection"]["hit_ci"])
        hits.errorbar(x, measured, yerr=[measured - ci[:, 0], ci[:, 1] - measured], fmt="o",
                      color=COLORS[j], ms=4, capsize=2)  # fmt: skip
        hits.plot(x, predictions["designs"][c["design"]]["hit"], "-", color=COLORS[j], lw=1.2)
    gap.set_xscale("log", base=2)
    gap.set_xlabel("N / k")
    gap.set_ylabel("delta_max")
    gap.set_title("gap against N / k", loc="left")
    hits.set_xticks(np.arange(designs[0]["stride"]))
    hits.set_xlabel("phase of the queried value")
    hits.set_ylabel("indexer hit rate")
    hits.set_ylim(0, 1.02)
    hits.set_title("hit rate by phase", loc="left")
    handles, labels = gap.get_legend_handles_labels()
    legend_below(fig, ncol=4, handles=handles, labels=labels)
    fig.suptitle("Selection model against decoders with a top-k indexer")
    return fig

"""Figure 10: mitigations: delta_max and cost, predicted and measured."""

import numpy as np

from weakspots.figures.style import COLORS, figure

CAPTION = (
    "delta_max with each mitigation (2 heads): SGD over seeds (points, 95% interval) against the reduced flow of the mitigated loss from each run's start plus the accuracy formula (black).",
    "Right: the cost of each mitigation relative to plain chunking (cache entries, compression and attention compute).",
)


def make(results, predictions):
    names = list(results["mitigations"])
    fig, axes = figure(2, 1, width=4.0, height=3.2)
    ax = axes[0, 0]
    for i, name in enumerate(names):
        m, p = results["mitigations"][name], predictions[name]
        for key, x, marker, label in (("delta_max", i - 0.12, "o", "SGD (95% interval)"),):
            r = m[key]
            ax.errorbar(
                x,
                r["mean"],
                yerr=[[r["mean"] - r["ci"][0]], [r["ci"][1] - r["mean"]]],
                fmt=marker,
                color=COLORS[0],
                capsize=3,
                ms=5,
                label=label if i == 0 else None,
            )
        q = p["delta_max"]
        ax.hlines(
            q["mean"],
            i - 0.35,
            i + 0.35,
            color="black",
            lw=2,
            label="theory (flow from each run's start)" if i == 0 else None,
        )
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("delta_max (best - worst phase)")
    ax.set_xlabel("mitigation")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"Phase gap, H = {results['heads']}", loc="left")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    keys = ("cache_entries_per_token", "compress_compute", "attention_compute")
    width = 0.25
    for j, key in enumerate(keys):
        base = predictions[names[0]]["cost"][key]
        vals = [predictions[n]["cost"][key] / base for n in names]
        ax.bar(
            np.arange(len(names)) + (j - 1) * width,
            vals,
            width=width,
            color=COLORS[j + 1],
            label=key.replace("_", " "),
        )
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("cost relative to baseline (x)")
    ax.set_xlabel("mitigation")
    ax.set_title("Inference cost (theory.chunking_cost)", loc="left")
    ax.legend(fontsize=7)
    fig.suptitle("Mitigations of periodic weak spots (s=8, N=64, d=64, gain 16)")
    fig.tight_layout()
    return fig

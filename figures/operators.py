"""Figure `operators`: compression operators compared: delta_max, psc and mean accuracy."""

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels

METRICS = (  # (key, axis label, panel title)
    ("delta_max", "delta_max", "best - worst phase accuracy"),
    ("psc", "psc", "var / mean over phases"),
    ("mean_accuracy", "mean accuracy", "mean over phases"),
)


CAPTION = (
    "delta_max, psc and mean accuracy of each compression operator trained under the same budget (SGD, d=64, s=8, N=64, gain 16): coloured bar and dot, the mean over seeds; error bar, its 95% interval; grey dots, the seeds. The real-key operators (max_pool, low_rank, deepseek_v4) train only at --full.",
    "Black bars: theory for softmax_pool (the most probable k-state), mean_pool (uniform pooling) and deepseek_v4 (uniform pooling of the unit-normalised key, stable: every zero-sum mode decays at rate -lambda, docs/theory.md §7.12; its delta_max is the held-out binomial floor). linear and the other learned operators have no closed form here.",
)


def make(results, predictions):
    ops = [o for o in results["operators"] if "delta_max" in results["results"].get(o, {})]
    fig, axes = figure(3, 1, width=3.5, height=3.3)
    for ax, (metric, label, title) in zip(axes[0], METRICS, strict=True):
        for i, op in enumerate(ops):
            r = results["results"][op][metric]
            lo, hi = r["ci"]
            color = COLORS[i % len(COLORS)]
            ax.bar(i, r["mean"], color=color, alpha=0.35)
            ax.errorbar(
                i,
                r["mean"],
                yerr=[[r["mean"] - lo], [hi - r["mean"]]],
                fmt="o",
                color=color,
                capsize=3,
                ms=4,
            )
            ax.plot(np.full(len(r["values"]), i) + 0.15, r["values"], ".", color="0.3", ms=3)
            if op in predictions:
                ax.hlines(predictions[op][metric], i - 0.4, i + 0.4, color="black", lw=2)
        ax.set_xticks(range(len(ops)))
        ax.set_xticklabels(ops, rotation=30, ha="right")
        ax.set_ylabel(label)
        ax.set_title(title, loc="left")
        ax.set_xlabel("compression operator")
    handles = [
        (
            Patch(color="0.5", alpha=0.35),
            "SGD mean over seeds (bar and dot, one colour per operator)",
        ),
        (Line2D([], [], color="0.5", marker="o", ms=4), "95% interval of the mean"),
        (Line2D([], [], color="0.3", marker=".", ms=3, ls=""), "one seed"),
        (Line2D([], [], color="black", lw=2), "theory"),
    ]
    dsv4 = predictions.get("deepseek_v4", {})
    if "deepseek_v4" in ops and "growth_rate" in dsv4:
        handles.append(
            (
                Line2D([], []),
                f"deepseek_v4 uniform pooling: lambda = {dsv4['growth_rate']:.3f}"
                f" (softmax_pool {dsv4['softmax_pool_growth_rate']:+.3f})",
            )
        )
    legend_below(fig, ncol=2, handles=[h for h, _ in handles], labels=[t for _, t in handles])
    skipped = (
        f" (not run at this size: {', '.join(results['skipped'])})" if results["skipped"] else ""
    )
    fig.suptitle("Compression operators under one training budget" + skipped)
    return letter_panels(fig)

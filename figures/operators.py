"""Figure 8: compression operators compared: delta_max, psc and mean accuracy."""

import numpy as np

from weakspots.figures.style import COLORS, figure

METRICS = (
    ("delta_max", "delta_max (best - worst phase)"),
    ("psc", "psc = var/mean over phases"),
    ("mean_accuracy", "mean accuracy over phases"),
)


CAPTION = (
    "delta_max, psc and mean accuracy of each compression operator trained under the same budget (bars: mean; error bars: 95% interval over seeds; dots: seeds).",
    "Black bars: theory for softmax_pool (the most probable k-state), mean_pool (uniform pooling) and deepseek_v4 (uniform pooling of the unit-normalised key, stable: every zero-sum mode decays at rate -lambda, theory.normalised_growth_rate; its delta_max is the held-out binomial floor).",
)


def make(results, predictions):
    ops = [o for o in results["operators"] if "delta_max" in results["results"].get(o, {})]
    fig, axes = figure(3, 1, width=3.4, height=3.0)
    for ax, (metric, label) in zip(axes[0], METRICS, strict=True):
        for i, op in enumerate(ops):
            r = results["results"][op][metric]
            lo, hi = r["ci"]
            ax.bar(i, r["mean"], color=COLORS[i % len(COLORS)], alpha=0.35)
            ax.errorbar(
                i,
                r["mean"],
                yerr=[[r["mean"] - lo], [hi - r["mean"]]],
                fmt="o",
                color=COLORS[i % len(COLORS)],
                capsize=3,
                ms=4,
            )
            ax.plot(np.full(len(r["values"]), i) + 0.15, r["values"], ".", color="0.3", ms=3)
            if op in predictions:
                ax.hlines(
                    predictions[op][metric],
                    i - 0.4,
                    i + 0.4,
                    color="black",
                    lw=2,
                    label="theory" if op == "softmax_pool" else None,
                )
        ax.set_xticks(range(len(ops)))
        ax.set_xticklabels(ops, rotation=30, ha="right")
        ax.set_ylabel(label)
        ax.set_xlabel("compression operator")
        ax.legend(fontsize=7)
    note = f" (not run at this size: {', '.join(results['skipped'])})" if results["skipped"] else ""
    if "deepseek_v4" in ops and "growth_rate" in predictions.get("deepseek_v4", {}):
        dsv4 = predictions["deepseek_v4"]
        axes[0][0].annotate(
            f"deepseek_v4 uniform: lambda = {dsv4['growth_rate']:.3f}\n"
            f"(softmax_pool {dsv4['softmax_pool_growth_rate']:+.3f})",
            xy=(0.97, 0.5),
            xycoords="axes fraction",
            ha="right",
            va="bottom",
            fontsize=6,
        )
    fig.suptitle(
        "Operators under one budget: SGD mean, 95% interval and seeds; theory bars" + note,
        fontsize=8,
    )
    fig.tight_layout()
    return fig

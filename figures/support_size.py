"""Figure `support_size`: support size k and delta_max against stride and against context length."""

import numpy as np
from matplotlib.ticker import MaxNLocator

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels, spread_yerr
from weakspots.sims.experiments.measure import most_common


def _axis(results, predictions, axis):
    pts = [
        (p, q)
        for p, q in zip(results["points"], predictions["points"], strict=True)
        if p["axis"] == axis
    ]
    x = np.array([p["stride"] if axis == "stride" else p["chunks"] for p, _ in pts], float)
    return x, [p for p, _ in pts], [q for _, q in pts]


CAPTION = (
    "Top: support size k (phases covered) against N and against s at d=64, gain 16. Black bars: the distribution of k from near-uniform starts under the finite-d loss L_d (thickness = probability; docs/theory.md §7.9), grey: the admissible k at d=64; black line: the most probable k of a run, counting escapes from metastable uniform pooling to s-1 phases (§7.11), which is what the agreement row checks; dotted: the d=inf flow's most probable k. Blue: the SGD mode over seeds (the row's statistic), small dots: each seed.",
    "Bottom: delta_max at d=64: the k-state prediction (where uniform is stable, its SGD noise floor; where it is only metastable, the floor and escaped-state mixture) against the SGD mean (min-max over seeds). Top right, s=16: a seed can count all 16 phases while one phase already holds a third of the weight: the instability is slow there (lambda = 0.004, about 450 of the 1200 budget to leave uniform) and phases drain only algebraically (docs/theory.md §6.4), so at the end of the budget their weights still straddle the 1/(2s) = 0.031 cut that counts a phase as covered.",
)


def make(results, predictions):
    fig, axes = figure(2, 2, width=3.9, height=2.8)
    for col, axis in enumerate(("chunks", "stride")):
        x, meas, pred = _axis(results, predictions, axis)
        if not len(x):
            continue
        ax = axes[0, col]
        for xi, q in zip(x, pred, strict=True):
            adm = np.asarray(q["admissible"])
            if adm.size:
                ax.vlines(xi, adm.min() - 0.2, adm.max() + 0.2, color="0.8", lw=7, zorder=0)
            for k, prob in zip(q["sizes"], q["probabilities"], strict=True):
                ax.plot(xi, k, "_", color="black", ms=14, mew=1 + 3 * prob, zorder=1)
        label = "theory: most probable k (L_d flow at d=64, with escapes)"
        ax.plot(x, [q.get("mode", q["k"]) for q in pred], label=label, **THEORY)
        if all("sizes_inf" in q for q in pred):
            k_inf = [q["sizes_inf"][int(np.argmax(q["probabilities_inf"]))] for q in pred]
            ax.plot(x, k_inf, ":", color="0.4", label="theory: most probable k of the d=inf flow")
        # The row checks the SGD mode: draw it, and every seed beside it.
        ax.plot(
            x,
            [most_common(p["support"]) for p in meas],
            "o",
            ms=6,
            color=COLORS[0],
            zorder=3,
            label="SGD d=64: mode over seeds",
        )
        for xi, p in zip(x, meas, strict=True):
            seeds = np.asarray(p["support"], float)
            ax.plot(
                np.full(seeds.size, xi) * 1.06,
                seeds,
                "o",
                ms=4,
                mfc="none",
                color=COLORS[0],
                zorder=3,
                label="SGD d=64: each seed",
            )
        ax.plot([], [], color="0.8", lw=7, label="admissible k at d=64")
        ax.plot([], [], "_", color="black", ms=14, mew=3, label="theory: P(k) (bar thickness)")
        ax.set_ylabel("support size k")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(0.5, max(x.max() if axis == "stride" else 8, 8) + 1)
        ax = axes[1, col]
        ax.plot(x, [q["delta_max"] for q in pred], label="theory: delta_max at d=64", **THEORY)
        mean, yerr = spread_yerr([p["delta_max"] for p in meas])
        ax.errorbar(
            x,
            mean,
            yerr=yerr,
            color=COLORS[1],
            label="SGD d=64: delta_max (mean, min-max)",
            fmt="s",
            ms=4,
            capsize=2,
        )
        ax.set_ylabel("delta_max (best - worst phase)")
        ax.set_ylim(0, 1.05)  # a gap: never below 0
        label = "context length N (chunks), s = 8" if axis == "chunks" else "stride s, N = 64"
        for ax in axes[:, col]:
            ax.set_xlabel(label)
            ax.set_xscale("log")
            ax.set_xticks(x)
            ax.set_xticklabels([f"{v:g}" for v in x])
            ax.minorticks_off()
    legend_below(fig, ncol=3)
    fig.suptitle("Longer contexts and larger strides specialise onto fewer phases (gain 16)")
    return letter_panels(fig)

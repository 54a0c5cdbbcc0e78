"""Figure `finite_d_accuracy`: finite-d accuracy: the exact formula and the Gaussian approximation against Monte Carlo."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels, wilson_yerr

CAPTION = (
    "Accuracy at one phase for fixed pooling weights against key dimension d: exact chi-conditioned formula (solid, docs/theory.md §6.12), the independent-Gaussian approximation (dashed, docs/theory.md §7.3), Monte Carlo (points, Wilson).",
    "Cases: uniform pooling at N=12 and N=64, a covered and a dropped phase of the 3-phase state.",
)


def make(results, predictions):
    fig, axes = figure(1, 1, width=5.2, height=3.6)
    ax = axes[0, 0]
    for i, (case, pred) in enumerate(zip(results["cases"], predictions["cases"], strict=True)):
        c = COLORS[i % len(COLORS)]
        ax.plot(pred["dims"], pred["exact"], color=c, lw=1.5)
        ax.plot(pred["dims"], pred["gaussian"], color=c, lw=1, ls="--")
        acc = np.asarray(case["accuracy"])
        ax.errorbar(
            case["dims"],
            acc,
            yerr=wilson_yerr(acc, results["samples"]),
            fmt="o",
            color=c,
            ms=4,
            capsize=2,
            label=case["label"],
        )
    ax.plot([], [], label="exact formula (chi-conditioned)", **THEORY)
    ax.plot([], [], color="black", ls="--", lw=1, label="independent-Gaussian approximation")
    ax.plot([], [], "o", color="grey", label=f"Monte Carlo ({results['samples']} needles, Wilson)")
    ax.set_xscale("log")
    ax.set_xlabel("key dimension d")
    ax.set_ylabel("retrieval accuracy at the phase")
    ax.set_ylim(-0.03, 1.05)
    ax.set_title("Accuracy from the pooling weights (gain 16, s = 8)", loc="left")
    legend_below(fig, ncol=2)
    return letter_panels(fig)

"""The cost of a collision in the induction model: N x (collided - distinct loss) against N."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels
from weakspots.sims.experiments.induction.induction_collision import MODELS

CAPTION = (
    "N x the population loss of two heads on one position minus that of distinct positions, "
    "computed from the model's exact per-query softmax (dots), against the derived limit c1 = "
    "mean_r* (F_c - F_d) (dashed) and the two-term expansion c1 + c2/N (line), for two models.",
    "Distinct positions win only through the output normaliser, by c1/N: at N = 4096 about 0.003 "
    "nats for the paper-like model, against a loss near 7.",
)


def make(results, predictions):
    fig, axes = figure(1, 1, width=5.0, height=3.4)
    ax = axes[0, 0]
    for i, (model, measured, predicted) in enumerate(
        zip(MODELS, results["models"], predictions["models"], strict=True)
    ):
        s, m, big_l, gamma, beta = model
        label = f"S={s} m={m} L={big_l} gamma={gamma:g} beta={beta:g}"
        n = np.array([p["vocab"] for p in measured["losses"]], float)
        scaled = n * np.array([p["collided"] - p["distinct"] for p in measured["losses"]])
        two = np.array([p["two_terms"] for p in predicted["losses"]])
        ax.plot(n, scaled, "o", color=COLORS[i], label=f"model: {label}")
        ax.plot(n, two, "-", color=COLORS[i], lw=1, label="theory: c1 + c2/N")
        ax.axhline(predicted["coefficient"], ls="--", color=COLORS[i], lw=1, label="theory: c1")
    ax.set_xscale("log")
    ax.set_xlabel("vocabulary N")
    ax.set_ylabel("N x (L collided - L distinct)")
    ax.set_title("collision cost x N")
    legend_below(fig, ncol=2)
    return letter_panels(fig)

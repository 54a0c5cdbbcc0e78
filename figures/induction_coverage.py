"""Coverage in the induction model: P(k distinct positions) of m heads, theory beside
flows and SGD."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels
from weakspots.sims.experiments.induction.shared import wilson

CAPTION = (
    "Probability that m heads end on k distinct positions (of S-1), from rho-small starts: "
    "bars, the occupancy law of independent uniform selections; points, flows and SGD over the "
    "seeds run, with 99.9% Wilson intervals.",
    "Quiet SGD (small minibatch noise against its start) follows the law; noisy SGD, whose "
    "minibatch noise is shared by every head, collides its heads far more often.",
)


def make(results, predictions):
    shapes = list(results["flow"])
    fig, axes = figure(len(shapes), 1, width=3.6, height=3.0)
    n = results["seeds"]
    for ax, shape in zip(axes[0], shapes, strict=True):
        s, m = (int(v) for v in shape.split(","))
        law = np.asarray(predictions["distribution"][shape])
        k = np.arange(1, len(law))
        ax.bar(k, law[1:], width=0.6, color="0.85", edgecolor="black", label="theory: occupancy law")
        kinds = [("flow", "flow", 0)]
        if shape in results["sgd"]:
            kinds += [("sgd", "SGD, quiet", 1), ("sgd_noisy", "SGD, noisy", 2)]
        for j, (kind, label, c) in enumerate(kinds):
            counts = np.bincount(results[kind][shape]["distinct"], minlength=m + 1)[1:]
            freq = counts / n
            lo, hi = np.array([wilson(int(x), n) for x in counts]).T
            ax.errorbar(
                k + 0.15 * (j - 1), freq, yerr=[freq - lo, hi - freq], fmt="o", ms=4,
                capsize=2, color=COLORS[c], label=f"{label} ({n} seeds)",
            )
        ax.set_xticks(k)
        ax.set_xlabel("distinct positions k")
        ax.set_ylabel("probability")
        ax.set_title(f"S={s}, m={m}")
    legend_below(fig, ncol=2)
    return letter_panels(fig)

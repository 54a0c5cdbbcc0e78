"""The concentration plane of the induction model: static against per-window effective
offsets of key and value gates, from the start to the end state."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels

CAPTION = (
    "Each gate's static exp(H(E[alpha])) (x) against per-window E[exp(H(alpha))] (y), from "
    "uniform (S, S): static-gate flows, SGD and log-linear-gate flows (eps = 0), and a flow of "
    "gates that also read a content feature (reliability q = 0.8 against a position prior "
    "lambda = 0.1); circles mark the ends. Key gates left, value gates right.",
    "Position-only gates move down the diagonal to (1, 1): they concentrate statically, as "
    "Theorem 2 says. The content-reading gates end off it, one-hot per window and spread over "
    "about S - 1 positions on average.",
)


def make(results, predictions):
    del predictions
    fig, axes = figure(2, 1, width=3.6, height=3.4)
    sets = [("static", "flow, static gates", 0), ("sgd", "SGD, static gates", 1),
            ("loglinear", "flow, log-linear gates", 2), ("content", "flow, gates reading content", 3)]
    top = 1.0
    for branch, ax in enumerate(axes[0]):
        for key, label, c in sets:
            for run in results.get(key, []):
                off = np.asarray(run["offsets"])  # (T, H, 2, 2)
                top = max(top, float(off.max()))
                for h in range(off.shape[1]):
                    ax.plot(off[:, h, branch, 0], off[:, h, branch, 1], "-", lw=0.8,
                            color=COLORS[c], alpha=0.7, label=label)
                    ax.plot(off[-1, h, branch, 0], off[-1, h, branch, 1], "o", ms=3, color=COLORS[c])
        ax.plot([1, top], [1, top], ":", color="0.5", lw=0.8, label="static = per-window")
        ax.set_xlabel("static exp(H(E[alpha]))")
        ax.set_ylabel("per-window E[exp(H(alpha))]")
        ax.set_title("key gates" if branch == 0 else "value gates")
    legend_below(fig, ncol=2)
    return letter_panels(fig)

"""Figure (e): the toy's offset-ensemble mitigation in trained decoders."""

import numpy as np

from weakspots.figures.style import COLORS, SGD, figure, legend_below

CAPTION = (
    "Accuracy by the queried value's phase (facts beyond the query's reach, two seeds pooled, 95% intervals) of each decoder intact (black) and read under K = 2 and 4 chunkings shifted by k s / K tokens with the log-probabilities averaged (points; K forward passes per sequence); lines: the toy's prediction from the intact accuracy (theory.offset_ensemble_accuracy, the mean over the shifted phases).",
    "Stagger, overlap and the phase-entropy regulariser change the model or its training and are not measured in the decoders.",
)


def make(results, predictions):
    designs = results["designs"]
    fig, axes = figure(len(designs), 1, width=3.6, height=2.8)
    for col, (name, r) in enumerate(designs.items()):
        ax = axes[0, col]
        s = r["config"]["stride"]
        phases = np.arange(s)
        ax.plot(phases, r["phase_accuracy"], "o-", color="black", ms=4, lw=1, label="intact")
        for i, (k, e) in enumerate(r["ensembles"].items()):
            acc = np.asarray(e["accuracy"])
            ci = np.asarray(e["accuracy_ci"])
            yerr = np.maximum(np.stack([acc - ci[:, 0], ci[:, 1] - acc]), 0.0)
            x = phases + 0.12 * (i + 1)
            ax.errorbar(x, acc, yerr=yerr, color=COLORS[i], label=f"ensemble K={k}", **SGD)
            ax.plot(x, predictions[name][k], "-", color=COLORS[i], lw=1, alpha=0.7,
                    label=f"toy, K={k}")  # fmt: skip
        ax.set_xticks(phases)
        ax.set_xlabel("value phase")
        ax.set_ylabel("accuracy" if col == 0 else None)
        ax.set_title(f"{name}: {r['config']['operator']} s={s}", loc="left")
    legend_below(fig, axes, ncol=5)
    fig.suptitle("The toy's offset ensemble in decoders trained from scratch")
    return fig

"""Per-phase accuracy of an induction model whose heads collided beside one whose did not."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels
from weakspots.sims.experiments.induction.shared import FLOW

CAPTION = (
    "Top-1 accuracy of the successor per query position r* (over all N tokens) at the end of "
    "two flows: the first seed whose heads took distinct positions and the first whose heads "
    "collided, against the closed form of each assignment (black).",
    "A position no head selected gets no evidence: its successor's logit equals that of every "
    "token outside the context, and the model answers another token.",
)


def make(results, predictions):
    distinct = [i for i, p in enumerate(results["positions"]) if len(set(p)) == len(p)]
    collided = [i for i, p in enumerate(results["positions"]) if len(set(p)) < len(p)]
    picks = [(i, "distinct") for i in distinct[:1]] + [(i, "collided") for i in collided[:1]]
    fig, axes = figure(len(picks), 1, width=3.4, height=2.8)
    for ax, (i, kind) in zip(axes[0], picks, strict=True):
        acc = np.asarray(results["phase_accuracy"][i])
        r = np.arange(acc.size)
        ax.bar(r, acc, width=0.6, color=COLORS[0 if kind == "distinct" else 3], label=f"flow's end, {kind}")
        ax.plot(r, predictions["phase_accuracy"][i], "_", ms=22, mew=2, label="theory", **THEORY)
        ax.set_xticks(r)
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("query position r*")
        ax.set_ylabel("accuracy")
        ax.set_title(f"{kind}: heads on {results['positions'][i]} (seed {i})")
    fig.suptitle(
        f"S={FLOW.stride} m={FLOW.heads} L={FLOW.chunks} N={FLOW.vocab} gamma={FLOW.gamma:g} beta={FLOW.beta:g}"
    )
    legend_below(fig, ncol=2)
    return letter_panels(fig)

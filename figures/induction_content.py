"""Content-gated induction: the two regimes in the concentration plane, where the flow
ends against the optimum's boundary, and each regime's per-phase accuracy."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels
from weakspots.sims.experiments.induction.induction_content import BASE

CAPTION = (
    "Content-gated induction model (eps = 0): each key gate's static exp(H(E[alpha])) against "
    "per-window E[exp(H(alpha))] along gradient flows from a small start, coloured by the "
    "regime each ends in; which regime each (prior lambda, reliability q) flow ends in, beside "
    "the derived boundary q = lambda of the optimum; per-phase accuracy of one end state of "
    "each regime against its closed form.",
    "Content-driven gates end off the diagonal (concentrated per window, spread on average) and "
    "answer every phase alike; static gates end at (1, 1) and answer one phase.",
)
REGIME_COLOR = {"static": COLORS[0], "content": COLORS[1], "mixed": COLORS[3]}


def make(results, predictions):
    fig, axes = figure(3, 1, width=3.5, height=3.3)
    plane, grid, accuracy = axes[0]
    runs = results["runs"]
    top = 1.0
    for run in runs:
        off = np.asarray(run["offsets"])  # (T, H, 2, 2)
        top = max(top, float(off.max()))
        for h in range(off.shape[1]):
            plane.plot(off[:, h, 0, 0], off[:, h, 0, 1], "-", lw=0.8, alpha=0.7,
                       color=REGIME_COLOR[run["regime"]], label=f"flow, ends {run['regime']}")  # fmt: skip
            plane.plot(
                off[-1, h, 0, 0], off[-1, h, 0, 1], "o", ms=3, color=REGIME_COLOR[run["regime"]]
            )
    plane.plot([1, top], [1, top], ":", color="0.5", lw=0.8, label="static = per-window")
    plane.set_xlabel("static exp(H(E[alpha]))")
    plane.set_ylabel("per-window E[exp(H(alpha))]")
    plane.set_title("key gates")

    for run in runs:
        grid.plot(run["prior"], run["reliability"], "s", ms=7, color=REGIME_COLOR[run["regime"]])
    priors = sorted({r["prior"] for r in runs})
    line = np.linspace(0.0, max(1.0, max(priors)), 2)
    grid.plot(line, line, label="optimum's boundary q = lambda (derived)", **THEORY)
    grid.set_xlim(0, max(priors) + 0.1)
    grid.set_ylim(0, 1.05)
    grid.set_xlabel("position prior lambda")
    grid.set_ylabel("feature reliability q")
    grid.set_title("regime at the flow's end")

    width = 0.35
    for k, regime in enumerate(("static", "content")):
        picks = [i for i, r in enumerate(runs) if r["regime"] == regime]
        if not picks:
            continue
        # the end that shows its regime best: content at its least reliable feature (accuracy
        # flat below 1), static at its most reliable one (the feature there, yet unused)
        by_q = sorted(picks, key=lambda j: runs[j]["reliability"])
        i = by_q[0] if regime == "content" else by_q[-1]
        acc = np.asarray(runs[i]["phase_accuracy"])
        r = np.arange(acc.size) + (k - 0.5) * width
        accuracy.bar(r, acc, width=width, color=REGIME_COLOR[regime],
                     label=f"{regime}: lambda={runs[i]['prior']:g}, q={runs[i]['reliability']:g}")  # fmt: skip
        closed = predictions["runs"][i][regime]["phase_accuracy"]
        accuracy.plot(r, closed, "_", ms=12, mew=2, **THEORY)
    accuracy.set_xticks(np.arange(BASE.stride - 1))
    accuracy.set_ylim(0, 1.05)
    accuracy.set_xlabel("query position r*")
    accuracy.set_ylabel("accuracy")
    accuracy.set_title("per-phase accuracy at the end")
    fig.suptitle(
        f"S={BASE.stride} m={BASE.heads} L={BASE.chunks} N={BASE.vocab} gamma={BASE.gamma:g} "
        f"beta={BASE.beta:g}, favourite position {BASE.favourite}"
    )
    legend_below(fig, ncol=2)
    return letter_panels(fig)

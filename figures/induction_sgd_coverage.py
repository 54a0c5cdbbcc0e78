"""Coverage of the induction model under SGD: the shared-noise law against SGD per setting."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels
from weakspots.sims.experiments.induction.sgd_coverage.induction_sgd_coverage import (
    BY_NAME,
    distribution,
)
from weakspots.sims.experiments.induction.shared import wilson

CAPTION = (
    "(a) P(k distinct positions) of SGD against the law derived from the linearised pair modes "
    "driven by their own start and the minibatch noise every head shares, every setting and k, "
    "with 99.9% Wilson intervals. (b) P(all heads on one position) against the ratio of shared "
    "to own pair-mode variance where selection is read, predicted (open) and measured (filled).",
    "Settings by role: derivation (known while deriving), validation (unseen), remedy (what the "
    "law says lowers the shared noise against the start); v5 lies where the heads interact "
    "through the normaliser, outside the derivation.",
)

ROLES = {"derivation": 0, "validation": 1, "remedy": 2}


def make(results, predictions):
    fig, axes = figure(2, 1, width=3.6, height=3.2)
    ax_cal, ax_ratio = axes[0]
    shown = set()
    for name, measured in results["settings"].items():
        s = BY_NAME[name]
        m = s.config.heads
        n = len(measured["distinct"])
        got = np.asarray(distribution(measured["distinct"], m))
        law = np.asarray(predictions[name]["distribution"])
        counts = np.rint(got * n).astype(int)
        lo, hi = np.array([wilson(int(c), n) for c in counts]).T
        color = COLORS[ROLES[s.role]]
        label = s.role if s.role not in shown else None
        shown.add(s.role)
        marker = "s" if s.interacting else "o"
        k = np.arange(1, m + 1)
        ax_cal.errorbar(
            law[k],
            got[k],
            yerr=[got[k] - lo[k], hi[k] - got[k]],
            fmt=marker,
            ms=4,
            capsize=2,
            color=color,
            label=label,
        )
        ratio = max(predictions[name]["shared_noise_ratio"], 1e-5)
        ax_ratio.plot(ratio, law[1], marker, mfc="none", color=color, ms=6)
        ax_ratio.errorbar(
            ratio,
            got[1],
            yerr=[[got[1] - lo[1]], [hi[1] - got[1]]],
            fmt=marker,
            ms=4,
            capsize=2,
            color=color,
        )
        ax_ratio.annotate(
            name, (ratio, got[1]), textcoords="offset points", xytext=(4, 4), fontsize=6
        )
    ax_cal.plot([0, 1], [0, 1], color="0.5", lw=0.8, ls="--")
    ax_cal.set_xlabel("predicted P(k distinct)")
    ax_cal.set_ylabel("SGD P(k distinct)")
    n = len(next(iter(results["settings"].values()))["distinct"])
    ax_cal.set_title(f"{len(results['settings'])} settings, {n} seeds each")
    ax_ratio.set_xscale("log")
    ax_ratio.set_xlabel("shared / own pair-mode variance")
    ax_ratio.set_ylabel("P(all heads on one position)")
    ax_ratio.set_title("one position: predicted (open), SGD (filled)")
    legend_below(fig, ncol=3)
    return letter_panels(fig)

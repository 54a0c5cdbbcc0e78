"""Figure `lm_amplifier_profile`: per-phase accuracy of DeepSeek-V4's design, its dense control and its most
amplifying ablation (in the `csa_add` arms: the base, its control, the part with the largest gap)."""

import numpy as np

from weakspots.figures.lm_amplifier import panel_title
from weakspots.figures.style import COLORS, letter_panels, panel_grid

CAPTION = (
    "Accuracy by the queried value's phase (position mod the compression ratio) for DeepSeek-V4's attention at small scale, for the dense control (phases counted at the same ratio) and for the ablation with the largest delta_max in the amplifier study (then the base with every part off and K != V, at 8, 16 and 20 facts per sequence, beside its control and the part whose addition gives the largest delta_max; last panel: that base in HCA's layer beside its control); facts beyond the query's uncompressed reach, each seed on its own sequences.",
    "Bands: 95% intervals with the seeds as clusters.",
)


def make(results, predictions=None):
    del predictions
    profiles = results["profiles"]
    fig, shown = panel_grid(len(profiles), width=4.6, height=3.3)
    for ax, p in zip(shown, profiles, strict=True):
        for j, c in enumerate(p["designs"]):
            acc = np.asarray(c["phase_accuracy"])
            ci = np.asarray(c["phase_accuracy_ci"])
            x = np.arange(acc.size)
            color = "0.45" if c["design"] == "dense" else COLORS[j]
            ax.plot(
                x, acc, "o-", color=color, label=f"{c['design']} (delta_max {c['delta_max']:.3f})"
            )
            ax.fill_between(x, ci[:, 0], ci[:, 1], color=color, alpha=0.18, lw=0)
        ax.set_xticks(np.arange(len(p["designs"][0]["phase_accuracy"])))
        ax.set_xlabel("phase of the queried value")
        ax.set_ylabel("accuracy")
        ax.set_title(panel_title(p["arm"], p["seq_len"]), loc="left", fontsize=8)
        ax.set_ylim(-0.02, 1.02)  # one range for every panel: accuracies, compared
        # each panel its own designs: their legend under the panel, off the data
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7, frameon=False)
    fig.suptitle("Per-phase accuracy: reference design, dense control, largest-gap variant")
    return letter_panels(fig)

"""Figure (f): the weak-spot gap of DeepSeek-V4's design with each part switched off in training
(and, in the `csa_add` arm, each part switched on in a base that learns)."""

import numpy as np

from weakspots.figures.style import COLORS, legend_below, panel_grid

CAPTION = (
    "The amplifier study: delta_max (best minus worst value phase, each seed on its own sequences) of DeepSeek-V4's attention at small scale with V4's proportions (a sliding layer, then a compressed layer with a local window of 8 strides), of the same design with one part switched off in training, and of the dense control; one panel per arm (CSA: ratio 4, overlapping windows, indexer top-k; HCA: ratio 16) and context; then a base that learns the task (V4's CSA layer with every part off, values of their own, 1000 steps) with one part switched on, at 8 and at 16 facts per sequence, and with the indexer's top-k at 20 facts (each seed scored on 64 sequences per position); last panel: the same base in HCA's layer beside its control.",
    "Bars: 95% intervals of delta_max (t over seeds); grey ticks: the 95% noise floor with no phase effect (seeds as clusters); numbers: mean accuracy. A part whose removal lowers the bar below V4's, or whose addition lifts it above the base's, is an amplifier.",
)

TITLES = {
    "csa": "CSA (ratio 4): parts off",
    "hca": "HCA (ratio 16): parts off",
    "csa_add": "CSA, K != V, 8 facts: parts on",
    "csa_add16": "CSA, K != V, 16 facts: parts on",
    "csa_add20": "CSA, K != V, 20 facts",
    "hca_add": "HCA (ratio 16), K != V, 8 facts: base",
}
REFERENCES = ("v4", "base")


def panel_title(arm: str, seq_len: int) -> str:
    return f"{TITLES.get(arm, arm.upper())}, T = {seq_len}"


def make(results, predictions=None):
    del predictions
    cells = results["cells"]
    panels = list(dict.fromkeys((c["arm"], c["seq_len"]) for c in cells))
    fig, shown = panel_grid(len(panels), width=5.2, height=3.4)
    for ax, (arm, seq_len) in zip(shown, panels, strict=True):
        mine = [c for c in cells if (c["arm"], c["seq_len"]) == (arm, seq_len)]
        for i, c in enumerate(mine):
            color = (
                COLORS[0]
                if c["design"] in REFERENCES
                else "0.45"
                if c["design"] == "dense"
                else COLORS[1]
            )
            ci = c["delta_max_ci"] or [c["delta_max"], c["delta_max"]]
            ax.errorbar(
                i, c["delta_max"], yerr=[[c["delta_max"] - ci[0]], [ci[1] - c["delta_max"]]],
                fmt="o", color=color, capsize=3, label="delta_max, 95% CI (seeds)" if i == 0 else None,
            )  # fmt: skip
            ax.hlines(c["delta_max_noise_floor"], i - 0.3, i + 0.3, color="0.6", lw=2,
                      label="noise floor (95%)" if i == 0 else None)  # fmt: skip
            ax.annotate(f"{c['mean_accuracy']:.2f}", (i, ci[1]), textcoords="offset points",
                        xytext=(0, 4), ha="center", fontsize=7)  # fmt: skip
        ax.axhline(0, color="0.8", lw=0.8)
        ax.set_xticks(np.arange(len(mine)))
        ax.set_xticklabels([c["design"] for c in mine], rotation=30, ha="right")
        notes = [
            note for suffix, note in (("key_len2", "key_len2: two-token keys"),
                                      ("pairs", "pairs: each kept entry with the one before"),
                                      ("500steps", "500steps: half the training"))
            if any(c["design"].endswith(suffix) for c in mine)
        ]  # fmt: skip
        ax.set_xlabel("design" + (f" ({'; '.join(notes)})" if notes else ""))
        ax.set_ylabel("delta_max (best - worst phase)")
        ax.set_title(panel_title(arm, seq_len), loc="left", fontsize=8)
    handles, labels = shown[0].get_legend_handles_labels()
    legend_below(fig, ncol=2, handles=handles, labels=labels)
    fig.suptitle("Which part of DeepSeek-V4 makes the weak spot large")
    return fig

"""Figure `lm_footprint`: the footprint model's per-phase profile against decoders at several W / s."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels

CAPTION = (
    "Accuracy by the queried value's phase in decoders whose sliding layer (W tokens) carries a fact into the compressed layer's later entries (s tokens each), mean pooling, at W / s = 1/2, 1, 2, 4; points: the decoders on the shared evaluation set, bars 95% intervals with the seeds as clusters.",
    "Lines: the footprint model (flat carry over W, the design's N entries) with its carry gain, key gain and offset fitted to each profile (docs/theory.md §9.4).",
)


def make(results, predictions):
    designs = {n: c for n, c in results["designs"].items() if c["operator"] == "mean_pool"}
    strides = sorted({c["stride"] for c in designs.values()})
    fig, axes = figure(len(strides), 1, width=4.4, height=3.4)
    for ax, s in zip(axes[0], strides, strict=True):
        same = [c for c in designs.values() if c["stride"] == s]
        base = [c for c in same if c["seq_len"] == min(d["seq_len"] for d in same)]
        for j, c in enumerate(sorted(base, key=lambda c: c["window"])):
            acc = np.asarray(c["shared_accuracy"])
            ci = np.asarray(c["shared_accuracy_ci"])
            x = np.arange(s)
            color = COLORS[j]
            ratio = c["window"] / s
            label = f"W/s = {ratio:g}" if ratio >= 1 else f"W/s = 1/{s // c['window']}"
            ax.errorbar(x, acc, yerr=[acc - ci[:, 0], ci[:, 1] - acc], fmt="o", color=color,
                        ms=4, capsize=2, label=label)  # fmt: skip
            ax.plot(x, predictions[c["design"]]["fitted"], "-", color=color, lw=1.2)
        ax.set_xticks(np.arange(s))
        ax.set_xlabel("phase of the queried value")
        ax.set_ylabel("accuracy")
        ax.set_title(f"s = {s}", loc="left")
    handles, labels = axes[0][0].get_legend_handles_labels()
    legend_below(fig, ncol=4, handles=handles, labels=labels)
    fig.suptitle("Footprint model (lines, fitted) against decoders (points)")
    return letter_panels(fig)

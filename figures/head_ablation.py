"""Figure `head_ablation`: heads x phases ablation maps (accuracy lost when a head is removed), H = 1, 2, 4, 8."""

import numpy as np

from weakspots.figures.style import figure, letter_panels

CAPTION = (
    "Accuracy lost at each needle phase when one head is removed from the head average, for 1, 2, 4 and 8 SGD-trained heads (top: measured; bottom: head-averaged readout prediction, theory.interventions.readout_accuracy).",
    "Heads divide the phases between them; columns with no bright cell are phases no head covers: weak spots that capacity alone does not explain. Measured cells carry the binomial error of the needles drawn per phase (128 at --quick: a standard error of about 0.03 at an effect of 0.9); the largest measured-predicted difference is given above each predicted map, and lies within about two standard errors (docs/theory.md §7.13).",
)


def make(results, predictions):
    maps = results["maps"]
    fig, axes = figure(len(maps), 2, width=2.7, height=2.4, layout="constrained")
    for col, (m, p) in enumerate(zip(maps, predictions["maps"], strict=True)):
        worst = (
            None
            if m["effect"] is None or p["effect"] is None
            else float(np.max(np.abs(np.asarray(m["effect"]) - np.asarray(p["effect"]))))
        )
        for r, (data, label) in enumerate(((m["effect"], "measured"), (p["effect"], "predicted"))):
            ax = axes[r, col]
            if data is None:
                ax.set_axis_off()
                continue
            data = np.asarray(data)
            im = ax.imshow(data, vmin=0, vmax=1, cmap="magma", aspect="auto")
            title = f"H = {m['heads']}, {label}"
            if label == "predicted" and worst is not None:
                title += f"\n(max |difference| {worst:.2f})"
            ax.set_title(title, loc="left")
            ax.set_xticks(range(data.shape[1]))
            ax.set_yticks(range(data.shape[0]))
            ax.set_xlabel("needle phase phi")
            ax.set_ylabel("head h")
    fig.colorbar(im, ax=axes, shrink=0.8, label="accuracy drop when head h is ablated")
    fig.suptitle(
        "Heads divide the phases; some phases are covered by no head\n"
        "(measured: SGD d=64, s=8, N=64, gain 16; predicted: head-averaged readout)"
    )
    return letter_panels(fig)

"""Emergence during pretraining: copy accuracy at held-out induction positions and the small
lookup probe against training tokens, one line per recipe, the induction-head law marked."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels

CAPTION = (
    "Full-attention backbones pretrained on the project's corpus, two seeds per recipe (lines: "
    "mean over seeds; thin lines: each seed). Left: top-1 on names that follow their animal "
    "where the same pair came earlier in a held-out document; dashed with points: only where "
    "at least 3 names came earlier; grey: the chance of naming one of the earlier names at "
    "random (solid: all positions, dashed: those). Right: "
    "the lookup probe sized to the training context (records and demonstrations in the "
    "table's notes), prefix padding solid, in-sequence dashed; it is never in the corpus.",
    "Dotted verticals: the induction-head emergence law, 10^5.7 sqrt(B C) tokens per seed, "
    "in each recipe's colour. Tokens count one seed's training tokens.",
)


def _curve(ax, tokens, accuracy, color, label, **style):
    tokens = np.asarray(tokens, dtype=float) / 1e6
    accuracy = 100 * np.asarray(accuracy, dtype=float)
    ax.plot(tokens, accuracy.mean(axis=1), color=color, lw=1.6, label=label, **style)
    for seed in accuracy.T:
        ax.plot(tokens, seed, color=color, lw=0.5, alpha=0.45, **style)


def make(results, predictions):
    fig, axes = figure(2, 1, width=4.4, height=3.2)
    copy_ax, lookup_ax = axes[0]
    for i, recipe in enumerate(results["recipes"]):
        color = COLORS[i % len(COLORS)]
        _curve(copy_ax, recipe["tokens"], recipe["copy_accuracy"], color, recipe["name"])
        contested = recipe["copy_accuracy_contested"]
        copy_ax.plot(np.asarray(contested["tokens"]) / 1e6,
                     100 * np.mean(contested["accuracy"], axis=1), color=color, ls="--",
                     marker="o", ms=2.5, lw=1.0)  # fmt: skip
        for padding, ls in (("prefix", "-"), ("in-sequence", "--")):
            _curve(lookup_ax, recipe["tokens"], recipe["lookup_accuracy"][padding], color,
                   None, ls=ls)  # fmt: skip
        law = predictions[recipe["name"]] / 1e6
        for ax in (copy_ax, lookup_ax):
            ax.axvline(law, color=color, ls=":", lw=1.0)
    if results["summaries"]:
        s0 = results["summaries"][0]
        for level, ls in ((s0["copy_chance"], "-"), (s0["contested_chance"], "--")):
            copy_ax.axhline(100 * level, color="0.35", ls=ls, lw=0.8, zorder=0)
    for ls, label in (("--", "copy with >= 3 earlier names (contested)"),):
        copy_ax.plot([], [], color="black", ls=ls, marker="o", ms=2.5, lw=1.0, label=label)
    copy_ax.plot([], [], color="0.35", lw=0.8, label="grey: name-recall chance (all, contested)")
    for ax, what in ((copy_ax, "copy accuracy at induction positions (%)"),
                     (lookup_ax, "lookup probe top-1 (%)")):  # fmt: skip
        ax.set_xlabel("training tokens per seed (millions)")
        ax.set_ylabel(what)
        ax.set_ylim(-2, 102)
    for ls, label in (("-", "lookup: prefix padding"), ("--", "lookup: in-sequence padding"),
                      (":", "law: 10^5.7 sqrt(B C) tokens")):  # fmt: skip
        lookup_ax.plot([], [], color="black", ls=ls, lw=1.0, label=label)
    lookup_ax.axhline(50, color="0.8", lw=0.6, zorder=0)
    if not results["recipes"]:
        copy_ax.text(0.5, 0.5, "no recipe recorded", ha="center", transform=copy_ax.transAxes)
    best = max((s["copy"]["best"] for s in results["summaries"]), default=0.0)
    lookup_best = max((max(s["lookup prefix"]["best"], s["lookup in-sequence"]["best"])
                       for s in results["summaries"]), default=0.0)  # fmt: skip
    source = "made-up curves (tiny)" if results["source"] == "planted" else "recorded recipes"
    fig.suptitle(
        f"Emergence, {source}: best copy {100 * best:.0f}%, best lookup {100 * lookup_best:.0f}%",
        fontsize=9,
    )
    legend_below(fig, ncol=4)
    return letter_panels(fig)

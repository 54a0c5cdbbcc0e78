"""Emergence during pretraining: copy accuracy at held-out induction positions and the small
lookup probe against training tokens, one line per recipe, the induction-head law marked."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels

CAPTION = (
    "Backbones pretrained on the project's corpus, full attention unless the recipe's name "
    "ends in -w8s8 (W8/S8 compression, one KV head), two seeds per recipe (lines: "
    "mean over seeds; thin lines: each seed). Left: top-1 on names that follow their animal "
    "where the same pair came earlier in a held-out document; dashed with points: only where "
    "at least 3 names came earlier; faint horizontals, in each recipe's colour: the chance of "
    "naming one of the earlier names at random (solid: all positions, dashed: those). Right: "
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
    end = max((r["tokens"][-1] for r in results["recipes"]), default=1) / 1e6
    for i, summary in enumerate(results["summaries"]):
        color = COLORS[i % len(COLORS)]
        for level, ls in ((summary["copy_chance"], "-"), (summary["contested_chance"], "--")):
            copy_ax.plot([0, end], [100 * level] * 2, color=color, ls=ls, lw=0.7, alpha=0.5,
                         zorder=0)  # fmt: skip
    for ls, label in (("--", "copy with >= 3 earlier names (contested)"),):
        copy_ax.plot([], [], color="black", ls=ls, marker="o", ms=2.5, lw=1.0, label=label)
    copy_ax.plot([], [], color="0.35", lw=0.7, alpha=0.5,
                 label="faint: name-recall chance (all, contested)")  # fmt: skip
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
    lookup_best = max((max(s["lookup prefix"]["best"], s["lookup in-sequence"]["best"])
                       for s in results["summaries"]), default=0.0)  # fmt: skip
    source = "made-up curves (tiny)" if results["source"] == "planted" else "recorded recipes"
    lines = [f"Emergence, {source}"]
    if results["summaries"]:
        top = max(
            results["summaries"], key=lambda s: s["contested"]["final"] - s["contested_chance"]
        )
        excess = 100 * (top["contested"]["final"] - top["contested_chance"])
        lines.append(f"contested copying at most {excess:+.0f} points over name-recall chance "
                     f"({top['name']}, mean of seeds)")  # fmt: skip
    lines.append(f"lookup {'not learned' if lookup_best < 0.1 else 'learned'} "
                 f"(best {100 * lookup_best:.0f}%)")  # fmt: skip
    fig.suptitle("; ".join(lines[:2]) + "\n" + "; ".join(lines[2:]), fontsize=9)
    legend_below(fig, ncol=4)
    return letter_panels(fig)

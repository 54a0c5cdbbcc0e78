"""Figure `lm_position`: accuracy against the queried value's position in a decoder trained from scratch, compressed beside dense."""

import numpy as np

from weakspots.figures.style import (
    COLORS,
    beyond_floor,
    figure,
    legend_below,
    letter_panels,
    wilson_yerr,
)

CAPTION = (
    "Decoders trained from scratch on multi-query associative recall: accuracy on the first query against the position of its value in the context (left) and by the value's phase p mod s (right), the compressed design (last layer reads only mean-pooled windows of s tokens) beside its dense control on the same task and budget.",
    "Outcomes pooled over seeds; bands: 95% Wilson intervals of the pooled outcomes per position; bars: 95% intervals per phase with the seeds as clusters; grey lines: window boundaries. Facts in the shaded zone sit within the first query's sliding window (read without compression) and are left out of the phase statistics. The dashed lines on the right are the dense control's mean plus/minus half its delta_max noise floor (the spread of per-phase accuracies expected with no phase effect, seeds as clusters).",
)

LABELS = {"compressed": "compressed", "dense": "dense control"}


def make(results, predictions=None):
    del predictions  # no theory is laid over the decoders
    fig, axes = figure(2, 1, width=4.6, height=3.2)
    left, right = axes[0]
    designs = results["designs"]
    stride = designs["compressed"]["config"]["stride"]
    width = 0.7 / len(designs)
    for i, (name, design) in enumerate(designs.items()):
        pooled, color = design["pooled"], COLORS[i]
        config = design["config"]
        label = (
            f"{LABELS.get(name, name)} ({config['operator']}, s={config['stride']})"
            if name != "dense"
            else LABELS[name]
        )
        label += (
            f": delta_max {pooled['delta_max']:.3f} (noise floor "
            f"{pooled['delta_max_noise_floor']:.3f})"
        )
        pos = np.asarray(pooled["position_accuracy"]["value_start"])
        acc = np.asarray(pooled["position_accuracy"]["accuracy"])
        yerr = wilson_yerr(acc, pooled["position_accuracy"]["samples"])
        left.fill_between(pos, acc - yerr[0], acc + yerr[1], color=color, alpha=0.2, lw=0)
        left.plot(pos, acc, "-", color=color, lw=1.0, marker=".", ms=3, label=label)
        phase_acc = np.asarray(pooled["phase_accuracy"])
        ci = np.asarray(pooled["phase_accuracy_ci"])
        x = np.arange(len(phase_acc)) + (i - (len(designs) - 1) / 2) * width
        right.errorbar(
            x,
            phase_acc,
            yerr=np.maximum(np.stack([phase_acc - ci[:, 0], ci[:, 1] - phase_acc]), 0.0),
            fmt="o",
            color=color,
            capsize=3,
            ms=4,
        )
        if name == "dense":
            mean, half = pooled["mean_accuracy"], pooled["delta_max_noise_floor"] / 2
            for level in (mean - half, mean + half):
                right.axhline(
                    level,
                    color=color,
                    ls="--",
                    lw=0.8,
                    label="dense control's mean +/- half its noise floor",
                )
    for boundary in range(0, int(pos.max()) + 1, stride):
        left.axvline(boundary - 0.5, color="0.9", lw=0.6, zorder=0)
    near = designs["compressed"]["pooled"].get("near_query") or {}
    if near.get("first_value_start") is not None:
        left.axvspan(
            near["first_value_start"] - 0.5,
            pos.max() + 0.5,
            color="0.9",
            zorder=0,
            label="within the first query's sliding window (left out of the phase statistics)",
        )
    seeds = len(designs["compressed"]["seeds"])
    left.set_xlabel("position of the queried value (tokens)")
    left.set_ylabel(f"accuracy (pooled over {seeds} seeds)")
    left.set_title("accuracy against needle position", loc="left")
    right.set_xticks(range(stride))
    right.set_xlabel(f"value phase (position mod {stride})")
    right.set_ylabel("accuracy")
    right.set_title("accuracy by phase, 95% intervals (seeds as clusters)", loc="left")
    low = min(np.min(np.asarray(d["pooled"]["phase_accuracy_ci"])) for d in designs.values())
    high = max(np.max(np.asarray(d["pooled"]["phase_accuracy_ci"])) for d in designs.values())
    pad = 0.35 * (high - low + 1e-3)
    right.set_ylim(max(low - pad, -0.02), min(high + 1.2 * pad, 1.02))  # accuracies
    left.set_ylim(-0.02, 1.02)
    legend_below(fig, ncol=1)
    fig.suptitle(title(results))
    return letter_panels(fig)


def title(results) -> str:
    """A weak spot only where the compressed design's delta_max is beyond its noise floor
    and the dense control's is not; otherwise what the runs show at their budget."""
    designs = results["designs"]
    config = designs["compressed"]["config"]
    where = f"T={config['seq_len']}, {config['steps']} steps"
    gap = designs["compressed"]["pooled"]
    shown = beyond_floor(gap["delta_max"], gap["delta_max_noise_floor"])
    dense = designs.get("dense", {}).get("pooled")
    dense_shown = dense is not None and beyond_floor(
        dense["delta_max"], dense["delta_max_noise_floor"]
    )
    if shown and not dense_shown:
        return f"Periodic weak spots in a decoder trained from scratch ({where})"
    if shown:
        return f"Phase gaps beyond the noise floor in the compressed design and its dense control ({where})"
    return (
        f"Decoders trained from scratch ({where}): no weak spot beyond the noise floor at "
        f"this budget (delta_max {gap['delta_max']:.3f}, floor {gap['delta_max_noise_floor']:.3f})"
    )

"""Figures of a probe's report (`weakspots probe --figures DIR`): per-phase accuracy with
Wilson intervals, and heatmaps of accuracy by needle phase against depth and context length."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from weakspots.figures.style import COLORS, figure

CAPTION = (
    "A phase scan of a model: accuracy by needle phase (the answer's token index mod s) and by "
    "tail phase (the prompt's length mod s), and needle-phase accuracy against depth and length.",
    "Bars: 95% Wilson intervals. Cells: accuracy of the trials at that phase and grid value.",
)


def profile(stats: dict, stride: int):
    """Needle- and tail-phase accuracy with intervals, side by side, for one stride."""
    fig, axes = figure(2, 1, width=3.6, height=2.8)
    for ax, prefix, name, color in zip(axes[0], ("", "tail_"), ("needle", "tail"), COLORS,
                                       strict=False):  # fmt: skip
        acc = np.array([np.nan if v is None else v for v in stats[f"{prefix}phase_accuracy"]])
        ci = np.array(
            [[np.nan, np.nan] if c[0] is None else c for c in stats[f"{prefix}phase_accuracy_ci"]]
        )
        yerr = np.maximum(np.stack([acc - ci[:, 0], ci[:, 1] - acc]), 0.0)
        ax.errorbar(np.arange(stride), acc, yerr=np.nan_to_num(yerr), fmt="o", color=color,
                    capsize=2, ms=4)  # fmt: skip
        dm = stats[f"{prefix}delta_max"]
        ax.set_title(f"{name} phase" + ("" if dm is None else f" (delta_max {dm:.2f})"))
        ax.set_xlabel(f"{name} phase (mod {stride})")
        ax.set_ylim(-0.02, 1.02)
        if stride <= 16:
            ax.set_xticks(range(stride))
    axes[0][0].set_ylabel("accuracy")
    return fig


def heatmap(grid: dict, stride: int, label: str):
    """Needle-phase accuracy (columns) against a grid axis (rows: depth or context)."""
    values = grid["values"]
    data = np.array([[np.nan if v is None else v for v in row] for row in grid["phase_accuracy"]])
    fig, axes = figure(1, 1, width=max(3.0, 0.35 * stride + 1.8), height=max(2.2, 0.4 * len(values) + 1.2))
    ax = axes[0][0]
    image = ax.imshow(data, aspect="auto", vmin=0.0, vmax=1.0, cmap="viridis", origin="lower")
    ax.set_yticks(range(len(values)), [f"{v:g}" for v in values])
    ax.set_xlabel(f"needle phase (mod {stride})")
    ax.set_ylabel(label)
    fig.colorbar(image, ax=ax, label="accuracy")
    return fig


def save(report: dict, directory) -> list[str]:
    """Write each stride's profile and heatmaps as PNG files in `directory`; returns their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for s, stats in report["by_stride"].items():
        figures = {f"probe_phase_s{s}.png": profile(stats, int(s))}
        for key, label in (("by_depth", "depth"), ("by_context", "context (tokens)")):
            if stats[key]["values"]:
                figures[f"probe_phase_{label.split()[0]}_s{s}.png"] = heatmap(stats[key], int(s), label)
        for name, fig in figures.items():
            fig.savefig(out / name)
            plt.close(fig)
            paths.append(str(out / name))
    return paths

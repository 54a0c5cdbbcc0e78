"""The practitioner's scan drawn (`weakspots probe --press ... --figures DIR`): accuracy by
needle phase (columns) for each method (rows), the uncompressed model first."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from weakspots.figures.style import figure

CAPTION = (
    "Accuracy by needle phase (the answer's first token index mod s), one row per method, the "
    "uncompressed model on the same prompts first.",
    "Cells: the fraction right of the trials at that phase (their count under the title); the "
    "row's label ends with its delta_max and permutation p at this stride.",
)


SHORT = (("compression_ratio", "ratio"), ("chunk_length", "chunk"), ("block_size", "B"),
         ("window_size", "window"), ("Press", ""))  # fmt: skip


def _label(report: dict, stats: dict) -> str:
    name = report.get("press") or "uncompressed"
    for long, short in SHORT:
        name = name.replace(long, short)
    if report.get("question_aware"):
        name += " [q-aware]"
    if len(name) > 60:
        name = name[:57] + "..."
    dm, p = stats["delta_max"], stats["delta_max_p"]
    return name if dm is None else f"{name}\ndelta_max {dm:.2f}, p {p:.3f}"


def make(reports: list[dict], stride: int):
    """One heatmap: rows the runs of `reports` in order, columns the needle phases mod `stride`."""
    rows = [r["by_stride"][str(stride)] for r in reports]
    data = np.array([[np.nan if v is None else v for v in st["phase_accuracy"]] for st in rows])
    fig, axes = figure(1, 1, width=max(4.0, 0.45 * stride + 4.2), height=0.55 * len(rows) + 1.4)
    ax = axes[0][0]
    image = ax.imshow(data, aspect="auto", vmin=0.0, vmax=1.0, cmap="viridis")
    for i, row in enumerate(data):
        for j, value in enumerate(row):
            if np.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="black" if value > 0.6 else "white")  # fmt: skip
    ax.set_yticks(
        range(len(rows)), [_label(r, st) for r, st in zip(reports, rows, strict=True)], fontsize=6
    )
    ax.set_xticks(range(stride))
    ax.set_xlabel(f"needle phase (mod {stride})")
    counts = sorted({int(n) for st in rows for n in st["phase_samples"]})
    ax.set_title(f"accuracy by needle phase, stride {stride} ({'/'.join(map(str, counts))} trials per cell)",
                 fontsize=8)  # fmt: skip
    fig.colorbar(image, ax=ax, label="accuracy")
    return fig


def save(reports: list[dict], directory) -> list[str]:
    """One PNG per stride the reports share (`probe_presses_s{s}.png`); returns their paths."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    strides = [s for s in reports[0]["by_stride"] if all(s in r["by_stride"] for r in reports)]
    paths = []
    for s in strides:
        fig = make(reports, int(s))
        fig.savefig(out / f"probe_presses_s{s}.png", dpi=150)
        plt.close(fig)
        paths.append(str(out / f"probe_presses_s{s}.png"))
    return paths

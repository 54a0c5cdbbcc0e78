"""A records scan beside the paper's five DeepSeek profiles, and a flip scan's margins.

`records(scans)`: accuracy by the target key's residue with 95% Wilson intervals,
the paper's DeepSeek models (`probe/data/deepseek_profiles.json`) in one panel and the
given scans (reports of `weakspots probe --task records --stride 4,8`) in the other.
`flip(report)`: the log-probability margin of the first candidate over the second at
every prompt length, one line per filler family.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below
from weakspots.probe.records import deepseek_profiles

CAPTION = (
    "Needle accuracy by the target key's position mod R (the paper's position-matched records "
    "test): left, the paper's DeepSeek models at R = 8 (128K-token prompts, 256 per residue; "
    "2,560 for V4.1); right, the scans named in the legend, at their own R and size.",
    "Bars: 95% Wilson intervals.",
)


def _profile(stats: dict):
    acc = np.array([np.nan if v is None else v for v in stats["phase_accuracy"]], float)
    ci = np.array(
        [[np.nan, np.nan] if c[0] is None else c for c in stats["phase_accuracy_ci"]], float
    )
    return acc, np.maximum(np.stack([acc - ci[:, 0], ci[:, 1] - acc]), 0.0)


def records(scans: dict[str, dict], residues: int = 8):
    """The DeepSeek profiles (left, mod 8) and each scan's profile at `residues` (right)."""
    fig, axes = figure(2, 1, width=4.4, height=3.2)
    left, right = axes[0]
    x = np.arange(8)
    for i, model in enumerate(deepseek_profiles()["models"]):
        acc = np.array(model["acc"]) / 100
        yerr = np.stack([acc - np.array(model["lo"]) / 100, np.array(model["hi"]) / 100 - acc])
        left.errorbar(x + 0.06 * (i - 2), acc, yerr=yerr, fmt="o-", ms=3, lw=1, capsize=2,
                      color=COLORS[i % len(COLORS)], label=f"{model['name']} (S={model['S']})")  # fmt: skip
    left.set_title("DeepSeek (paper)")
    for i, (label, report) in enumerate(scans.items()):
        stats = report["by_stride"].get(str(residues))
        if stats is None:
            continue
        acc, yerr = _profile(stats)
        right.errorbar(np.arange(residues) + 0.06 * (i - len(scans) / 2), acc, yerr=yerr,
                       fmt="s--", ms=3, lw=1, capsize=2, color=COLORS[(i + 5) % len(COLORS)],
                       label=label)  # fmt: skip
    right.set_title(f"scans ({sum(r['trials'] for r in scans.values())} prompts in all)")
    for ax, mod in ((left, 8), (right, residues)):
        ax.set_xlabel(f"target key position mod {mod}")
        ax.set_xticks(range(mod))
        ax.set_ylim(-0.02, 1.02)
    left.set_ylabel("accuracy")
    legend_below(fig, ncol=2)
    return fig


def flip(report: dict):
    """Margin log p(first candidate) - log p(second) against prompt length, per family."""
    fig, axes = figure(1, 1, width=5.0, height=3.0)
    ax = axes[0][0]
    rows = report["rows"]
    for f in sorted({r["family"] for r in rows}):
        mine = sorted((r for r in rows if r["family"] == f), key=lambda r: r["length"])
        ax.plot([r["length"] for r in mine], [r["logprobs"][0] - r["logprobs"][1] for r in mine],
                "o-", ms=3, lw=1, color=COLORS[f % len(COLORS)], label=f"family {f}")  # fmt: skip
    ax.axhline(0.0, color="gray", lw=0.8)
    a, b = report["candidates"][:2]
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel(f"log p({a!r}) - log p({b!r})")
    period = report["period"]
    ax.set_title("no period beyond noise" if period is None else f"period {period}: "
                 f"{report['follows']} of {report['rankings']} rankings follow it")  # fmt: skip
    legend_below(fig, ncol=4)
    return fig


def save_records(report: dict, directory, label: str = "this scan") -> list[str]:
    """This records scan beside the DeepSeek profiles, as a PNG in `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    residues = 8 if "8" in report["by_stride"] else int(report["period"])
    fig = records({label: report}, residues)
    path = out / "probe_records_deepseek.png"
    fig.savefig(path)
    plt.close(fig)
    return [str(path)]


def save_flip(report: dict, directory) -> list[str]:
    """The flip scan's margins as a PNG in `directory`."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    fig = flip(report)
    path = out / "probe_flip.png"
    fig.savefig(path)
    plt.close(fig)
    return [str(path)]

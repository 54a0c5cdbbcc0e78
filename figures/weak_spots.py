"""Figure `weak_spots`: periodic weak spots: accuracy against needle position, the mean hiding the sawtooth."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels, wilson_yerr

CAPTION = (
    "Accuracy of the canonical SGD model (s=8, d=64, gain 16) against needle position over 4 chunks: past N_c (N=64) it repeats a sawtooth with period s, whole phases falling to chance; below N_c (N=12) no phase falls to chance, and what swing is left follows the unevenness of the learned weights that the exact formula reads (each panel's delta_max in its title).",
    "Points: SGD with 95% Wilson intervals; black steps: exact finite-d formula from the learned pooling weights; dashed: the mean over phases, which hides the weak spots.",
)


def make(results, predictions):
    fig, axes = figure(1, len(results["runs"]), width=7.0, height=2.4)
    for ax, run, pred, color in zip(
        axes[:, 0], results["runs"], predictions["runs"], COLORS, strict=False
    ):
        hits, counts = np.asarray(run["hits"]), np.asarray(run["counts"])
        shown, stride = hits.shape
        pos = np.arange(shown * stride)
        acc = (hits / np.maximum(counts, 1)).ravel()
        yerr = np.concatenate(
            [wilson_yerr(a, max(n, 1)) for a, n in zip(acc, counts.ravel(), strict=True)],
            axis=-1,
        ).reshape(2, -1)
        theory = np.tile(pred["phase_accuracy"], shown)
        ax.step(pos, theory, where="mid", label="theory (exact formula, learned weights)", **THEORY)
        ax.errorbar(
            pos,
            acc,
            yerr=yerr,
            fmt="o",
            ms=3.5,
            capsize=1.5,
            lw=0.8,
            color=color,
            label=f"SGD, N = {run['chunks']}, d=64 (95% Wilson, ~{int(counts.mean())} needles/point)",
        )
        ax.axhline(
            run["mean_accuracy"],
            color="grey",
            ls="--",
            lw=1.2,
            label="mean over phases",
        )
        for c in range(1, shown):
            ax.axvline(c * stride - 0.5, color="0.85", lw=0.8, zorder=0)
        ax.set_ylim(-0.03, 1.05)
        ax.set_xlim(-0.7, shown * stride - 0.3)
        regime = "past" if run["chunks"] > pred["critical_chunks"] else "below"
        ax.set_title(
            f"N = {run['chunks']} chunks ({regime} N_c = {pred['critical_chunks']:.1f}),"
            f" stride 8, gain 16: mean accuracy {run['mean_accuracy']:.2f},"
            f" delta_max {float(np.ptp(hits.sum(0) / np.maximum(counts.sum(0), 1))):.2f}",
            loc="left",
        )
        ax.set_ylabel("retrieval accuracy")
    axes[-1, 0].set_xlabel("needle position (tokens; grey lines = chunk boundaries)")
    fig.suptitle(title(results))
    legend_below(fig, ncol=2)
    return letter_panels(fig)


COLLAPSED, KEPT = 0.3, 0.7  # a weak phase reads below COLLAPSED while the best reads above KEPT


def title(results) -> str:
    """Periodic weak spots only where some run has a phase collapsed (accuracy below
    COLLAPSED) while its best phase is kept (above KEPT)."""
    for run in results["runs"]:
        hits, counts = np.asarray(run["hits"]), np.asarray(run["counts"])
        phase = hits.sum(0) / np.maximum(counts.sum(0), 1)
        if phase.min() < COLLAPSED and phase.max() > KEPT:
            return "Periodic weak spots: accuracy repeats with the chunk, the mean hides it"
    return "Accuracy against needle position: no phase collapsed at this size"

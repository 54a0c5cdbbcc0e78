"""Figure 9: RoPE anchoring pins which phases are weak: per-phase accuracy and harmonic spectrum."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, wilson_yerr
from weakspots.idealized.metrics import harmonic_spectrum

CAPTION = (
    "RoPE anchoring at the chunk's first token attenuates the needle's self-product by kappa(phi), which pins which phases are weak.",
    "Middle: per-phase accuracy predicted (lines) and simulated (points, Wilson); right: its harmonic spectrum (bars measured, black ticks theory).",
)


def make(results, predictions):
    cases = results["cases"]
    fig, axes = figure(3, 1, width=3.5, height=3.0)
    phases = np.arange(len(predictions["kappa"]))
    ax = axes[0, 0]
    ax.plot(phases, predictions["kappa"], "o-", **THEORY)
    ax.set_xlabel("needle phase phi (tokens after the chunk's anchor)")
    ax.set_ylabel("kappa(phi): needle logit attenuation")
    ax.set_title(f"RoPE attenuation (rope_dim {results['rope_dim']}, d = 64)", loc="left")
    ax = axes[0, 1]
    for i, (case, pred) in enumerate(zip(cases, predictions["cases"], strict=True)):
        acc = np.asarray(case["phase_accuracy"])
        ax.plot(
            phases, pred["phase_accuracy"], color=COLORS[i], lw=1.5, label=f"theory, {case['name']}"
        )
        ax.errorbar(
            phases,
            acc,
            yerr=wilson_yerr(acc, case["samples"]),
            fmt="o",
            ms=4,
            capsize=2,
            color=COLORS[i],
            label=f"simulation, {case['name']}",
        )
    ax.set_xlabel("needle phase phi")
    ax.set_ylabel("retrieval accuracy")
    ax.set_ylim(-0.03, 1.05)
    ax.set_title("Weak phases: predicted and measured", loc="left")
    ax.legend(fontsize=6)
    ax = axes[0, 2]
    width = 0.8 / max(1, len(cases))
    for i, (case, pred) in enumerate(zip(cases, predictions["cases"], strict=True)):
        spec = harmonic_spectrum(case["phase_accuracy"])[1:]
        k = np.arange(1, spec.size + 1) + (i - (len(cases) - 1) / 2) * width
        ax.bar(k, spec, width=width, color=COLORS[i], alpha=0.5, label=f"measured, {case['name']}")
        ax.plot(
            k,
            np.asarray(pred["spectrum"])[1:],
            "_",
            ms=12,
            mew=2,
            color="black",
            label="theory" if i == 0 else None,
        )
    ax.set_xlabel("harmonic k (cycles per chunk)")
    ax.set_ylabel("|rfft(acc)|_k / s")
    ax.set_title("Harmonic spectrum of accuracy", loc="left")
    ax.legend(fontsize=6)
    fig.suptitle("RoPE anchoring at the chunk's first token makes late phases weak (N=64, gain 16)")
    fig.tight_layout()
    return fig

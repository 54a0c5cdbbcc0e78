"""Figure `rope_anchoring`: RoPE anchoring pins which phases are weak: per-phase accuracy and harmonic spectrum."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels, wilson_yerr
from weakspots.idealized.metrics import harmonic_spectrum

CAPTION = (
    "RoPE anchoring at the chunk's first token attenuates the needle's self-product by kappa(phi) (left; docs/theory.md §7.7), which pins which phases are weak.",
    "Middle: per-phase accuracy predicted (lines) and simulated (points, 95% Wilson); right: its harmonic spectrum, measured (bars, with 95% intervals from the per-phase binomial error propagated through the Fourier transform) against theory (black ticks): the measured harmonics differ from theory by no more than that sampling error.",
)


def harmonic_yerr(accuracy, samples) -> np.ndarray:
    """1.96 standard errors of |rfft(acc)|_k / s (k >= 1) from each phase's binomial variance.

    Linear error propagation: d|X_k| / d acc_phi = (Re X_k cos t - Im X_k sin t) / |X_k| with
    t = 2 pi k phi / s and X_k = sum_phi acc_phi e^{-i t}. Returns (s // 2,).
    """
    acc = np.asarray(accuracy, float)
    s = acc.size
    var = acc * (1.0 - acc) / samples
    k = np.arange(1, s // 2 + 1)[:, None]
    t = 2.0 * np.pi * k * np.arange(s)[None, :] / s
    re, im = acc @ np.cos(t).T, -(acc @ np.sin(t).T)
    size = np.maximum(np.hypot(re, im), 1e-12)
    slope = (re[:, None] * np.cos(t) - im[:, None] * np.sin(t)) / size[:, None]
    return 1.96 * np.sqrt((slope**2) @ var) / s


def make(results, predictions):
    cases = results["cases"]
    fig, axes = figure(3, 1, width=3.6, height=3.1)
    phases = np.arange(len(predictions["kappa"]))
    ax = axes[0, 0]
    ax.plot(phases, predictions["kappa"], "o-", **THEORY)
    ax.set_xlabel("needle phase phi (tokens after the anchor)")
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
            label=f"simulation, {case['name']} (95% Wilson)",
        )
    ax.set_xlabel("needle phase phi")
    ax.set_ylabel("retrieval accuracy")
    ax.set_ylim(-0.03, 1.05)
    ax.set_title("Weak phases: predicted and measured", loc="left")
    ax = axes[0, 2]
    width = 0.8 / max(1, len(cases))
    for i, (case, pred) in enumerate(zip(cases, predictions["cases"], strict=True)):
        spec = harmonic_spectrum(case["phase_accuracy"])[1:]
        k = np.arange(1, spec.size + 1) + (i - (len(cases) - 1) / 2) * width
        ax.bar(k, spec, width=width, color=COLORS[i], alpha=0.5, label=f"measured, {case['name']}")
        ax.errorbar(
            k,
            spec,
            yerr=harmonic_yerr(case["phase_accuracy"], case["samples"]),
            fmt="none",
            color=COLORS[i],
            capsize=3,
            lw=1,
        )
        ax.plot(
            k,
            np.asarray(pred["spectrum"])[1:],
            "_",
            ms=12,
            mew=2,
            color="black",
            label="theory: harmonic amplitude" if i == 0 else None,
        )
    ax.set_xlabel("harmonic k (cycles per chunk)")
    ax.set_ylabel("|rfft(acc)|_k / s")
    ax.set_title("Harmonic spectrum of accuracy", loc="left")
    legend_below(fig, ncol=3)
    fig.suptitle("RoPE anchoring at the chunk's first token makes late phases weak (N=64, gain 16)")
    return letter_panels(fig)

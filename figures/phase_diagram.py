"""Figure `phase_diagram`: phase diagram: specialisation over (context chunks, gain/stride) with N_c drawn on it."""

import numpy as np
from matplotlib.patheffects import withStroke

from weakspots.figures.style import THEORY, figure, legend_below, letter_panels

CAPTION = (
    "Specialisation index of the reduced flow at t = lr x steps = 1200 (the SGD budget), from init scale 0.01, over context length N and gain/stride (s=8), with the critical curve N_c = 1 + 2 exp(gain/stride) (docs/theory.md §6.3). Red markers: finite-d SGD runs at d=64 (filled: collapsed onto fewer than s phases; open: stayed uniform). At gain/stride 2 (gain 16): N_c(d=64) of the finite-d loss L_d (cross, §7.9), and the N past which half the SGD runs leave uniform pooling within the budget (triangle, the SGD recursion on L_d, §7.11). Orange diamonds: the derived escape boundary N_esc(d=64, lr 2, B 256, 600 steps) where the passage law puts P(escape) at 1/2 (§9.2; gains 12-32 at --full, gain 16 below it).",
    "Filled markers on the uniform side of the curve are runs that escaped metastable uniform pooling: at d=64 uniform pooling is linearly stable there, but a state on fewer phases has lower L_d behind a barrier a fraction of SGD's noise temperature high, so SGD leaves it before N_c(d) (at gain/stride 4, N=64: the 6- and 7-phase states lie below uniform, the barrier is 0.3 noise temperatures, and the recursion escapes with probability about 1 within the budget; docs/theory.md §7.11, §8).",
)


def make(results, predictions):
    fig, axes = figure(1, 1, width=5.6, height=4.2)
    ax = axes[0, 0]
    chunks, ratios = np.asarray(results["chunks"]), np.asarray(results["ratios"])
    index = np.asarray(results["index"])
    mesh = ax.pcolormesh(chunks, ratios, index.T, shading="nearest", cmap="viridis", vmin=0, vmax=1)
    fig.colorbar(mesh, ax=ax, label="specialisation index 1 - H(alpha)/log s (ODE)")
    ax.plot(
        predictions["critical_chunks"],
        predictions["ratios"],
        label="theory: N_c = 1 + 2 exp(gain/stride)",
        **{**THEORY, "color": "white"},
        path_effects=[withStroke(linewidth=3.2, foreground="black")],  # reads on any colour
    )
    escape = predictions.get("escape_boundary")  # theory.escape_boundary_curve
    if escape:
        ax.plot(
            escape["chunks"],
            escape["ratio"],
            "D--",
            ms=5,
            color="orange",
            mec="black",
            label="theory: N_esc, SGD escapes uniform (d=64, P=1/2)",
        )
    gain_16 = 2.0  # gain / stride of the finite-d predictions (gain 16, s = 8)
    if "critical_chunks_finite_d" in predictions:
        ax.plot(
            predictions["critical_chunks_finite_d"],
            gain_16,
            "X",
            ms=9,
            mfc="white",
            mec="black",
            label=f"theory: N_c(d=64) = {predictions['critical_chunks_finite_d']:.1f} (L_d)",
        )
    if "escape_chunks" in predictions:
        ax.plot(
            predictions["escape_chunks"],
            gain_16,
            "^",
            ms=10,
            mfc="none",
            mec="black",
            mew=1.5,
            label=f"L_d recursion: half the runs escape at N = {predictions['escape_chunks']:.1f}",
        )
    for p in results["sgd"]:
        special = p["support"] < 8
        ax.plot(
            p["chunks"],
            p["ratio"],
            "o" if special else "s",
            ms=7,
            mec="red",
            mew=1.5,
            mfc="red" if special else "none",
        )
    ax.plot([], [], "o", mec="red", mfc="red", label="SGD d=64: specialised")
    ax.plot([], [], "s", mec="red", mfc="none", label="SGD d=64: uniform")
    ax.set_xscale("log")
    ax.set_xlim(chunks.min(), chunks.max())
    ax.set_ylim(ratios.min(), ratios.max())
    ax.set_xlabel("context length N (chunks)")
    ax.set_ylabel("gain / stride (beta / s)")
    ax.set_title(
        f"Specialisation at t = {results['t_end']:g} (s = 8): uniform above-left of the curve",
        loc="left",
    )
    legend_below(fig, ncol=2)
    return letter_panels(fig)

"""Figure 3: phase diagram: specialisation over (context chunks, gain/stride) with N_c drawn on it."""

import numpy as np

from weakspots.figures.style import THEORY, figure

CAPTION = (
    "Specialisation index of the reduced flow at t = lr x steps = 1200 (the SGD budget), from init scale 0.01, over context length N and gain/stride (s=8), with the critical curve N_c = 1 + 2 exp(gain/stride).",
    "Red markers: finite-d SGD runs (filled: collapsed onto fewer than s phases; open: stayed uniform).",
)


def make(results, predictions):
    fig, axes = figure(1, 1, width=5.2, height=3.8)
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
    )
    escape = predictions.get("escape_boundary")  # theory.escape_boundary_curve, if predicted
    if escape:
        ax.plot(
            escape["chunks"],
            escape["ratio"],
            "o--",
            ms=3,
            color="orange",
            label="theory: SGD escapes uniform (d=64, P=1/2)",
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
        f"Specialisation at t = {results['t_end']:g} (s = 8); above-left of the curve"
        " pooling stays uniform",
        loc="left",
        fontsize=8,
    )
    ax.legend(loc="upper left", fontsize=7, facecolor="0.9")
    fig.tight_layout()
    return fig

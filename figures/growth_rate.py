"""Figure `growth_rate`: growth rate of the instability: measured (reduced flow) against predicted."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, letter_panels, spread_yerr

CAPTION = (
    "Left: exponential growth rate of the order parameter delta in the reduced flow from tiny starts, against the predicted lambda (docs/theory.md §6.2), across configs.",
    "Right: measured and predicted lambda through the threshold at s=8, gain 16; the sign change sits at N_c.",
)


def make(results, predictions):
    fig, axes = figure(2, 1, width=4.0, height=3.3)
    ax = axes[0, 0]
    pred = np.asarray(predictions["configs"])
    heads = sorted({c["heads"] for c in results["configs"]})
    for i, h in enumerate(heads):
        idx = [j for j, c in enumerate(results["configs"]) if c["heads"] == h]
        mean, yerr = spread_yerr([results["configs"][j]["rates"] for j in idx])
        ax.errorbar(
            pred[idx],
            mean,
            yerr=yerr,
            fmt="o",
            ms=4,
            capsize=2,
            color=COLORS[i],
            label=f"ODE, H = {h} (min-max over starts)",
        )
    lim = np.array([pred.min() * 0.8, pred.max() * 1.25])
    ax.plot(lim, lim, label="measured = predicted", **THEORY)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("predicted lambda (1 / unit of t)")
    ax.set_ylabel("measured growth rate of delta (1 / unit of t)")
    ax.set_title("Across (s, N, gain, H)", loc="left")
    ax.legend()
    ax = axes[0, 1]
    ax.plot(
        predictions["sweep_chunks"], predictions["sweep_rate"], label="theory lambda(N)", **THEORY
    )
    sweep = results["threshold_sweep"]
    mean, yerr = spread_yerr([p["rates"] for p in sweep])
    ax.errorbar(
        [p["chunks"] for p in sweep],
        mean,
        yerr=yerr,
        fmt="o",
        ms=4,
        capsize=2,
        color=COLORS[1],
        label="ODE measured",
    )
    ax.axhline(0, color="grey", lw=0.8)
    ax.axvline(
        predictions["critical_chunks"],
        color="grey",
        ls="--",
        lw=1,
        label=f"N_c = {predictions['critical_chunks']:.2f}",
    )
    ax.set_xlabel("context length N (chunks)")
    ax.set_ylabel("growth rate lambda (1 / unit of t)")
    ax.set_title("Through the threshold (s = 8, gain 16)", loc="left")
    ax.legend()
    fig.suptitle("Uniform pooling is unstable at rate lambda = -(N/(N-1)) beta^2/s^3 l''(beta/s)")
    return letter_panels(fig)

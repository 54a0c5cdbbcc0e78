"""Figure `learned_gain`: learned gain: the race between gain growth and the instability."""

import numpy as np
from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels

CAPTION = (
    "Reduced flow with the gain learned from 1.0 under weight decay wd (s=8, N=64): gain (left) and specialisation index (right) against time; the race margin is how far the instability's accumulated growth passed what the start needed to reach the specialisation event (docs/theory.md §6.6).",
    "Uniform pooling is stable above beta_c; the gain's equilibrium under wd decides the race: below beta_c the instability wins and pooling specialises. Dotted: the uniform-state equilibrium gain (values in the legend); stars: the predicted gain at t_end after the race and the re-entry ladder (dropped phases re-enter while their weight exceeds the finite-weight barrier), which is why wd = 0 and 1e-4 specialise for a while and end uniform.",
)

GAIN_TICKS = (1, 2, 5, 10, 20, 50, 100, 200)


def make(results, predictions):
    fig, axes = figure(2, 1, width=4.3, height=3.5)
    t = np.asarray(results["times"])
    keep = t > 0
    gain_ax, index_ax = axes[0]
    for i, wd in enumerate(results["weight_decays"]):
        c = COLORS[i % len(COLORS)]
        gain = np.asarray(results["gain"][i])
        idx = np.asarray(results["specialization_index"][i])
        eq = predictions["equilibrium_gain"][i]
        at = f"equilibrium gain {eq:.1f}, " if np.isfinite(eq) else ""
        label = f"ODE, wd = {wd:g} ({at}race margin {predictions['margin'][i]:+.1f})"
        gain_ax.plot(t[keep], gain[keep], "o", ms=2.5, color=c, label=label)
        if np.isfinite(eq):
            gain_ax.axhline(eq, color=c, ls=":", lw=1.2)
        if "final_gain" in predictions:
            gain_ax.plot(
                t[-1], predictions["final_gain"][i], "*", ms=9, mfc="none", color=c, mew=1.2
            )
        index_ax.plot(t[keep], idx[keep], "o-", ms=2.5, lw=0.8, color=c)
    beta_c = predictions["critical_gain"]
    gain_ax.axhline(
        beta_c, label=f"beta_c = s log((N-1)/2) = {beta_c:.1f}", **{"color": "black", "lw": 1.6}
    )
    gain_ax.plot([], [], "k:", label="theory: uniform-state equilibrium gain")
    if "final_gain" in predictions:
        gain_ax.plot([], [], "k*", mfc="none", label="theory: end state (race + re-entry ladder)")
    gain_ax.set_yscale("log")
    top = max(float(np.nanmax(np.asarray(results["gain"], float))), beta_c) * 1.3
    gain_ax.set_ylim(0.8, top)
    gain_ax.yaxis.set_major_locator(FixedLocator([v for v in GAIN_TICKS if v <= top]))
    gain_ax.yaxis.set_major_formatter(ScalarFormatter())
    gain_ax.yaxis.set_minor_locator(NullLocator())
    gain_ax.set_ylabel("gain beta (log scale)")
    gain_ax.set_title("Gain: uniform pooling is stable above beta_c", loc="left")
    index_ax.set_ylabel("specialisation index")
    index_ax.set_ylim(-0.03, 1.03)
    index_ax.set_title("Specialisation index 1 - H(alpha)/log s", loc="left")
    for ax in axes[0]:
        ax.set_xscale("log")
        ax.set_xlabel("gradient-flow time t")
    legend_below(fig, ncol=2)
    fig.suptitle(
        "Learned gain from 1.0 (s=8, N=64, dbeta/dt = -dL/dbeta): weight decay tips the race"
    )
    return letter_panels(fig)

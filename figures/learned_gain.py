"""Figure 12: learned gain: the race between gain growth and the instability."""

import numpy as np

from weakspots.figures.style import COLORS, figure

CAPTION = (
    "Reduced flow with the gain learned from 1.0 under weight decay wd (s=8, N=64): gain (left) and specialisation index (right) against time.",
    "Uniform pooling is stable above beta_c; the gain's equilibrium under wd decides the race: below beta_c the instability wins and pooling specialises; stars: the predicted gain at t_end after the race and the re-entry ladder (dropped phases re-enter while their weight exceeds the finite-weight barrier).",
)


def make(results, predictions):
    fig, axes = figure(2, 1, width=4.0, height=3.2)
    t = np.asarray(results["times"])
    keep = t > 0
    for i, wd in enumerate(results["weight_decays"]):
        c = COLORS[i % len(COLORS)]
        gain = np.asarray(results["gain"][i])
        idx = np.asarray(results["specialization_index"][i])
        label = f"wd = {wd:g}"
        axes[0, 0].plot(t[keep], gain[keep], "o", ms=2.5, color=c, label=f"ODE, {label}")
        eq = predictions["equilibrium_gain"][i]
        if np.isfinite(eq):
            axes[0, 0].axhline(eq, color=c, ls=":", lw=1.2)
        if "final_gain" in predictions:
            axes[0, 0].plot(
                t[-1], predictions["final_gain"][i], "*", ms=9, mfc="none", color=c, mew=1.2
            )
        axes[0, 1].plot(
            t[keep],
            idx[keep],
            "o-",
            ms=2.5,
            lw=0.8,
            color=c,
            label=f"{label}: race margin {predictions['margin'][i]:+.1f}",
        )
    axes[0, 0].axhline(
        predictions["critical_gain"],
        color="black",
        lw=1.6,
        label=f"beta_c = s log((N-1)/2) = {predictions['critical_gain']:.1f}",
    )
    axes[0, 0].plot([], [], "k:", label="uniform-state equilibrium gain (theory)")
    if "final_gain" in predictions:
        axes[0, 0].plot(
            [], [], "k*", mfc="none", label="end state: race + re-entry ladder (theory)"
        )
    axes[0, 0].set_yscale("log")
    axes[0, 0].set_ylabel("gain beta")
    axes[0, 0].set_title("Gain: uniform pooling is stable above beta_c", loc="left")
    axes[0, 1].set_ylabel("specialisation index 1 - H(alpha)/log s")
    axes[0, 1].set_title("Specialisation", loc="left")
    for ax in axes[0]:
        ax.set_xscale("log")
        ax.set_xlabel("gradient-flow time t")
        ax.legend(fontsize=6)
    fig.suptitle(
        "Learned gain from 1.0 (s=8, N=64, dbeta/dt = -dL/dbeta): weight decay tips the race"
    )
    fig.tight_layout()
    return fig

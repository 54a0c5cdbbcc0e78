"""Figure `specialization_time`: time to specialise against init scale: t* theory line, ODE and SGD points."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels

CAPTION = (
    "Time for delta = |log alpha - mean log alpha| to reach 0.25 against the initial pooling-logit scale: theory line, ODE and SGD (d=64) points.",
    "The linear-phase law log(1/init)/lambda plus the nonlinear offset tau (docs/theory.md §7.1). SGD at small init scales leaves uniform pooling earlier than the law: its gradient noise, not the initial logits, sets the perturbation the instability amplifies, so below init scale ~0.01 its time no longer grows with log(1/init scale).",
)


def make(results, predictions):
    fig, axes = figure(1, 1, width=5.0, height=3.6)
    ax = axes[0, 0]
    # Where the start is already past the event (delta_0 > 0.25) the linear law does not apply.
    line = np.asarray(predictions["time"], float)
    ax.plot(
        predictions["init_scales"],
        np.where(line > 0, line, np.nan),
        label="theory t* = (log 0.25 - E log delta_0)/lambda + tau",
        **THEORY,
    )
    for p in results["ode"]:
        t = np.asarray(p["times"], float)
        ax.errorbar(
            p["init_scale"],
            t.mean(),
            yerr=[[t.mean() - t.min()], [t.max() - t.mean()]],
            fmt="o",
            ms=5,
            capsize=3,
            color=COLORS[0],
            label="ODE (d = inf), min-max over starts" if p is results["ode"][0] else None,
        )
    scales = sorted({q["init_scale"] for q in results["sgd"]})
    for i, a in enumerate(scales):
        t = np.array([q["time"] for q in results["sgd"] if q["init_scale"] == a], float)
        done = t[np.isfinite(t)]
        x = a * 1.15
        if done.size:
            ax.errorbar(
                x,
                done.mean(),
                yerr=[[done.mean() - done.min()], [done.max() - done.mean()]],
                fmt="s",
                ms=5,
                capsize=3,
                color=COLORS[1],
                label="SGD d = 64, min-max over seeds" if i == 0 else None,
            )
        if done.size < t.size:
            t_end = max(q["t_end"] for q in results["sgd"])
            ax.plot(
                x,
                t_end,
                "v",
                color=COLORS[1],
                ms=6,
                label=f"SGD: not yet at t = {t_end:g}" if i == 0 else None,
            )
    ax.set_xscale("log")
    ax.set_xlabel("init scale (std of the initial pooling logits)")
    ax.set_ylabel("time to specialise t* (t = lr x steps)")
    ax.set_title("Time to specialise grows as log(1/init scale) / lambda", loc="left")
    legend_below(fig, ncol=1)
    fig.suptitle("Time to specialise (s=8, N=64, gain 16)")
    return letter_panels(fig)

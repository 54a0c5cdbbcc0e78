"""Figure `pooling_dynamics`: pooling weights against time: reduced-flow (ODE) curves with SGD points on top."""

import numpy as np

from weakspots.figures.style import COLORS, figure, legend_below, letter_panels, spread_yerr

CAPTION = (
    "Pooling weights per phase (one colour per phase) against gradient-flow time t = lr x steps: the reduced ODE at d = inf (solid) and the ODE of the finite-d expected loss L_d (dashed, docs/theory.md §7.9), both from the SGD run's own start, against SGD (points) at d=64 and d=1024.",
    "Right: the largest SGD-ODE weight difference over time (mean, min-max over seeds), against the d = inf flow (circles) and the L_d flow (squares). It peaks during the collapse, where a small shift in time is a large shift in weight, and then settles lower at d=1024 than at d=64: there both flows sit on the same 3-phase state (their curves coincide) and what remains is SGD's fluctuation about it, which shrinks as d grows (docs/theory.md §6.10).",
)


def make(results, predictions):
    times = np.asarray(results["times"])
    dims = sorted({r["dim"] for r in results["runs"]})
    fig, axes = figure(len(dims) + 1, 1, width=3.7, height=3.2)
    every = max(1, len(times) // 20)
    for ax, dim in zip(axes[0], dims, strict=False):
        run = next(r for r in results["runs"] if r["dim"] == dim)
        sgd, ode = np.asarray(run["sgd"]), np.asarray(run["ode"])
        for j in range(sgd.shape[1]):
            c = COLORS[j % len(COLORS)]
            ax.plot(times, ode[:, j], color=c, lw=1.3)
            if run.get("corrected") is not None:
                ax.plot(times, np.asarray(run["corrected"])[:, j], color=c, lw=1.0, ls="--")
            ax.plot(times[::every], sgd[::every, j], "o", ms=3, color=c)
        ax.axhline(predictions["uniform"], color="grey", ls=":", lw=1)
        ax.set_title(f"d = {dim}, seed {run['seed']}", loc="left")
        ax.set_xlabel("gradient-flow time t = lr x steps")
        ax.set_ylabel("pooling weight alpha[phi]")
    # line styles, once for both weight panels (colours are phases)
    axes[0, 0].plot([], [], color="0.3", lw=1.3, label="ODE, d = inf")
    axes[0, 0].plot([], [], color="0.3", lw=1.0, ls="--", label="ODE of L_d at the run's d")
    axes[0, 0].plot([], [], "o", ms=3, color="0.3", label="SGD")
    axes[0, 0].plot([], [], color="grey", ls=":", lw=1, label="uniform 1/s")
    ax = axes[0, -1]
    for i, dim in enumerate(dims):
        runs = [r for r in results["runs"] if r["dim"] == dim]
        refs = [("ode", "o-", "d = inf flow")]
        if all(r.get("corrected") is not None for r in runs):
            refs.append(("corrected", "s--", "L_d flow"))
        for ref, fmt, name in refs:
            gap = np.stack(
                [np.abs(np.asarray(r["sgd"]) - np.asarray(r[ref])).max(axis=1) for r in runs],
                axis=-1,
            )
            mean, yerr = spread_yerr(gap)
            ax.errorbar(
                times[::every],
                mean[::every],
                yerr=yerr[:, ::every],
                fmt=fmt,
                ms=3,
                capsize=2,
                lw=1,
                color=COLORS[i],
                label=f"d = {dim}: SGD vs {name} ({len(runs)} seeds)",
            )
    ax.set_title("SGD against the ODEs", loc="left")
    ax.set_xlabel("gradient-flow time t = lr x steps")
    ax.set_ylabel("max_phi |SGD - ODE| weight")
    legend_below(fig, ncol=4)
    k = np.asarray(predictions["support_sizes"])[np.argmax(predictions["support_probabilities"])]
    fig.suptitle(
        f"Pooling weights collapse onto k = {k} phases (s=8, N=64, gain 16, init scale "
        f"{results.get('init_scale', 0.01)}; lambda = {predictions['growth_rate']:.4f})"
    )
    return letter_panels(fig)

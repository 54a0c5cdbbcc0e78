"""Figure 2: pooling weights against time: reduced-flow (ODE) curves with SGD points on top."""

import numpy as np

from weakspots.figures.style import COLORS, figure, spread_yerr

CAPTION = (
    "Pooling weights per phase against gradient-flow time t = lr x steps: reduced ODE (solid, d = inf) and finite-d corrected ODE (dashed, theory.finite_d_loss) from the SGD run's own start, SGD (points) at d=64 and d=1024.",
    "Right: the largest SGD-ODE weight difference over time (mean, min-max over seeds), against the d = inf flow (circles) and the corrected flow (squares).",
)


def make(results, predictions):
    times = np.asarray(results["times"])
    dims = sorted({r["dim"] for r in results["runs"]})
    fig, axes = figure(len(dims) + 1, 1, width=3.6, height=3.0)
    every = max(1, len(times) // 20)
    for ax, dim in zip(axes[0], dims, strict=False):
        run = next(r for r in results["runs"] if r["dim"] == dim)
        sgd, ode = np.asarray(run["sgd"]), np.asarray(run["ode"])
        for j in range(sgd.shape[1]):
            c = COLORS[j % len(COLORS)]
            ax.plot(times, ode[:, j], color=c, lw=1.3, label="ODE (d = inf)" if j == 0 else None)
            if run.get("corrected") is not None:
                corrected = np.asarray(run["corrected"])
                label = f"ODE, L_d at d = {dim}" if j == 0 else None
                ax.plot(times, corrected[:, j], color=c, lw=1.0, ls="--", label=label)
            ax.plot(
                times[::every], sgd[::every, j], "o", ms=3, color=c, label="SGD" if j == 0 else None
            )
        ax.axhline(predictions["uniform"], color="grey", ls=":", lw=1, label="uniform 1/s")
        ax.set_title(f"d = {dim}, seed {run['seed']} (one colour per phase)", loc="left")
        ax.set_xlabel("gradient-flow time t = lr x steps")
        ax.set_ylabel("pooling weight alpha[phi]")
        ax.legend(fontsize=7, loc="upper left")
    ax = axes[0, -1]
    for i, dim in enumerate(dims):
        runs = [r for r in results["runs"] if r["dim"] == dim]
        refs = [("ode", "o-", "d = inf flow")]
        if all(r.get("corrected") is not None for r in runs):
            refs.append(("corrected", "s--", "corrected flow"))
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
                label=f"d = {dim} vs {name} ({len(runs)} seeds)",
            )
    ax.set_title("SGD vs ODE: max_phi |difference|", loc="left")
    ax.set_xlabel("gradient-flow time t = lr x steps")
    ax.set_ylabel("max weight difference (mean, min-max)")
    ax.legend(fontsize=7)
    k = np.asarray(predictions["support_sizes"])[np.argmax(predictions["support_probabilities"])]
    fig.suptitle(
        f"Pooling weights collapse onto k = {k} phases (s=8, N=64, gain 16, init scale "
        f"{results.get('init_scale', 0.01)}); "
        f"lambda = {predictions['growth_rate']:.4f}"
    )
    fig.tight_layout()
    return fig

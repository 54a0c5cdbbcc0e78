"""The induction model at eps > 0: concentration and coverage as eps grows, against the
eps below which the bound guarantees them."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, legend_below, letter_panels
from weakspots.sims.experiments.induction.induction_eps import BASE

CAPTION = (
    "Explicit embeddings with Gram error exactly eps (d = 4 random directions mixed into "
    "orthonormal tokens): the fraction of flow and SGD end states one-hot at (r, r + 1), "
    "N (L_collided - L_distinct) of the one-hot assignments on the flows' sample of "
    "contexts, and the flows' mean top-1 accuracy; vertical lines: the eps below which the "
    "bound guarantees concentration and coverage.",
    "The vertical lines are the bound's worst-case guarantees; the points show how far past "
    "them the end states stay one-hot and distinct positions keep winning at the size run.",
)


def make(results, predictions):
    fig, axes = figure(3, 1, width=3.4, height=3.0)
    conc, cover, acc = axes[0]
    for k, (got, want) in enumerate(zip(results["by_vocab"], predictions["by_vocab"], strict=True)):
        n = got["vocab"]
        eps = np.asarray(got["eps"])
        for key, marker, label in (("flow", "o-", "flow"), ("sgd", "s--", "SGD")):
            frac = [np.mean([r["concentrated"] for r in got[key] if r["eps"] == e]) for e in eps]
            conc.plot(
                eps,
                frac,
                marker,
                color=COLORS[2 * k + (key == "sgd")],
                ms=4,
                label=f"{label}, N={n}",
            )
        gap = n * (np.asarray(got["collided_loss"]) - np.asarray(got["distinct_loss"]))
        cover.plot(eps, gap, "o-", color=COLORS[2 * k], ms=4, label=f"measured, N={n}")
        mean_acc = [
            np.mean([np.mean(r["phase_accuracy"]) for r in got["flow"] if r["eps"] == e])
            for e in eps
        ]
        acc.plot(eps, mean_acc, "o-", color=COLORS[2 * k], ms=4)
        for ax in (conc, cover, acc):
            ax.axvline(want["eps_concentration"], ls=":", label="bound: concentration", **THEORY)
            ax.axvline(want["eps_coverage"], ls="--", label="bound: coverage", **THEORY)
    cover.axhline(0.0, color="0.5", lw=0.8)
    for ax in (conc, cover, acc):
        ax.set_xscale("symlog", linthresh=1e-7)
        ax.set_xlim(0, 1.5)
        ax.set_xlabel("eps (linear below 1e-7)")
    conc.set_ylim(-0.05, 1.05)
    conc.set_ylabel("fraction of ends one-hot")
    conc.set_title("concentration")
    cover.set_ylabel("N (L_collided - L_distinct)")
    cover.set_title("coverage: > 0 when distinct wins")
    acc.set_ylim(0, 1.05)
    acc.set_ylabel("flows' mean accuracy")
    acc.set_title("accuracy")
    fig.suptitle(
        f"S={BASE.stride} m={BASE.heads} L={BASE.chunks} gamma={BASE.gamma:g} beta={BASE.beta:g}, "
        f"d={BASE.dim}"
    )
    legend_below(fig, ncol=3)
    return letter_panels(fig)

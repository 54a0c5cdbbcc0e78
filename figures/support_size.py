"""Figure 6: support size k and delta_max against stride and against context length."""

import numpy as np

from weakspots.figures.style import COLORS, THEORY, figure, spread_yerr


def _axis(results, predictions, axis):
    pts = [
        (p, q)
        for p, q in zip(results["points"], predictions["points"], strict=True)
        if p["axis"] == axis
    ]
    x = np.array([p["stride"] if axis == "stride" else p["chunks"] for p, _ in pts], float)
    return x, [p for p, _ in pts], [q for _, q in pts]


CAPTION = (
    "Top: support size k reached (theory: distribution from near-uniform starts under the finite-d loss L_d at d=64, bar thickness = probability, grey = admissible k at d=64; line: the most probable k of a run, counting escapes from metastable uniform pooling to s-1 phases; dotted: most probable k of the d=inf flow; points = SGD) against N and against s.",
    "Bottom: delta_max at d=64: the k-state prediction (where uniform is stable, its SGD noise floor; where it is only metastable, the floor and escaped-state mixture) against SGD (mean, min-max over seeds).",
)


def make(results, predictions):
    fig, axes = figure(2, 2, width=3.8, height=2.8)
    for col, axis in enumerate(("chunks", "stride")):
        x, meas, pred = _axis(results, predictions, axis)
        if not len(x):
            continue
        ax = axes[0, col]
        for xi, q in zip(x, pred, strict=True):
            adm = np.asarray(q["admissible"])
            if adm.size:
                ax.vlines(xi, adm.min() - 0.2, adm.max() + 0.2, color="0.8", lw=7, zorder=0)
            for k, prob in zip(q["sizes"], q["probabilities"], strict=True):
                ax.plot(xi, k, "_", color="black", ms=14, mew=1 + 3 * prob, zorder=1)
        label = "theory: most probable k (L_d at d=64, with escapes)"
        ax.plot(x, [q.get("mode", q["k"]) for q in pred], label=label, **THEORY)
        if all("sizes_inf" in q for q in pred):
            k_inf = [q["sizes_inf"][int(np.argmax(q["probabilities_inf"]))] for q in pred]
            ax.plot(x, k_inf, ":", color="0.4", label="d=inf flow: most probable k")
        mean, yerr = spread_yerr([p["support"] for p in meas])
        ax.errorbar(
            x,
            mean,
            yerr=yerr,
            color=COLORS[0],
            label="SGD d=64 (min-max over seeds)",
            fmt="o",
            ms=4,
            capsize=2,
        )
        ax.plot([], [], color="0.8", lw=7, label="admissible k (stable)")
        ax.set_ylabel("support size k (phases covered)")
        ax.legend(fontsize=7)
        ax = axes[1, col]
        ax.plot(x, [q["delta_max"] for q in pred], label="theory at d=64", **THEORY)
        mean, yerr = spread_yerr([p["delta_max"] for p in meas])
        ax.errorbar(x, mean, yerr=yerr, color=COLORS[1], label="SGD d=64", fmt="o", ms=4, capsize=2)
        ax.set_ylabel("delta_max (best - worst phase)")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=7)
        label = (
            "context length N (chunks), s = 8" if axis == "chunks" else "stride s (tokens), N = 64"
        )
        for ax in axes[:, col]:
            ax.set_xlabel(label)
            if axis == "chunks":
                ax.set_xscale("log")
            ax.set_xticks(x)
            ax.set_xticklabels([f"{v:g}" for v in x])
            ax.minorticks_off()
    fig.suptitle("Longer contexts and larger strides specialise onto fewer phases (gain 16)")
    fig.tight_layout()
    return fig

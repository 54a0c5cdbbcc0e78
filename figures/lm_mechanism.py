"""Figure `lm_mechanism`: causal interventions in the trained decoders, and the mechanism each design shows."""

import textwrap

import numpy as np

from weakspots.figures.style import COLORS, SGD, figure, legend_below, letter_panels

CAPTION = (
    "Top: accuracy by the queried value's phase (facts beyond the query's reach, two seeds pooled; 95% intervals with the seeds as clusters, or Wilson with outcomes pooled in recordings without per-seed accuracies) of each decoder design intact and after the component interventions of `weakspots lm ablate`; dashed: the weak phase's compressed entries patched from a world where the fact sits at the best phase. Bottom: accuracy drop per layer x head x phase when one head is ablated.",
    "The title names the mechanism the interventions support (sims.experiments.decoder.ablation.causal_study: straddle, pooling specialisation, RoPE anchoring, or none/unexplained) and the measurements behind it are the row's config in the agreement table.",
)

LINES = (  # component kinds drawn, in this order
    ("no_rope_compressed", "RoPE removed from compressed keys"),
    ("zero_position_bias", "position bias zeroed"),
    ("roll_position_bias", "position bias rolled one phase"),
    ("no_local_window", "local window removed"),
)


def make(results, predictions):
    del predictions
    designs = results["designs"]
    fig, axes = figure(len(designs), 2, width=3.0, height=2.6)
    im = None
    for col, (name, r) in enumerate(designs.items()):
        s = r["config"]["stride"]
        phases = np.arange(s)
        acc = np.asarray(r["phase_accuracy"])
        ci = np.asarray(r["phase_accuracy_ci"])
        ax = axes[0, col]
        yerr = np.maximum(np.stack([acc - ci[:, 0], ci[:, 1] - acc]), 0.0)
        ax.errorbar(phases, acc, yerr=yerr, color="black", label="intact", **SGD)
        by_kind = {c["kind"]: c for c in r["components"]}
        for i, (kind, label) in enumerate(LINES):
            if kind in by_kind:
                ax.plot(
                    phases, by_kind[kind]["accuracy"], "-", color=COLORS[i], lw=1.2, label=label
                )
        patch = r.get("patch")
        if patch is not None:
            best = int(np.argmax(acc))
            patched = [patch["patched"][p][best] for p in range(s)]
            ax.plot(
                phases,
                patched,
                "--",
                color=COLORS[5],
                lw=1.2,
                label="entries patched from best phase",
            )
        ax.set_xticks(phases)
        ax.set_xlabel("value phase")
        ax.set_ylabel("accuracy" if col == 0 else None)
        verdict = textwrap.fill(r["verdict"], 28)
        ax.set_title(f"{name}\nmechanism: {verdict}", loc="left")
        effect = np.asarray(r["effect"], np.float64)
        layers, heads = effect.shape[:2]
        ax = axes[1, col]
        limit = max(0.05, float(np.abs(effect).max()))
        im = ax.imshow(
            effect.reshape(layers * heads, s), cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto"
        )
        ax.set_yticks(
            range(layers * heads), [f"L{i} h{h}" for i in range(layers) for h in range(heads)]
        )
        ax.set_xticks(phases)
        ax.set_xlabel("value phase")
        ax.set_title(f"head ablation drop (max |{limit:.2f}|)", loc="left")
        fig.colorbar(im, ax=ax, shrink=0.8)
    legend_below(fig, axes[0], ncol=3)
    fig.suptitle(
        "Causal interventions in decoders trained from scratch: each design's phase gap, "
        "taken apart"
    )
    return letter_panels(fig)

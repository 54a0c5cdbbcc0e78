"""Figure `lm_amplifier`: the weak-spot gap of DeepSeek-V4's design with each part switched off in training
(and, in the `csa_add` arm, each part switched on in a base that learns)."""

import numpy as np
from matplotlib.lines import Line2D

from weakspots.figures.style import COLORS, beyond_floor, legend_below, letter_panels, panel_grid

CAPTION = (
    "The amplifier study: delta_max (best minus worst value phase, each seed on its own sequences) of DeepSeek-V4's attention at small scale with V4's proportions (a sliding layer, then a compressed layer with a local window of 8 strides), of the same design with one part switched off in training, and of the dense control; one panel per arm (CSA: ratio 4, overlapping windows, indexer top-k; HCA: ratio 16) and context; then a base that learns the task (V4's CSA layer with every part off, values of their own, 1000 steps) with one part switched on, at 8 and at 16 facts per sequence, and with the indexer's top-k at 20 facts (each seed scored on 64 sequences per position); last panel: the same base in HCA's layer beside its control.",
    "Bars: 95% intervals of delta_max (t over seeds); grey ticks: the 95% noise floor with no phase effect (seeds as clusters); numbers: mean accuracy. A part whose removal lowers the bar below V4's, or whose addition lifts it above the base's, is an amplifier.",
)

TITLES = {
    "csa": "CSA (ratio 4): parts off",
    "hca": "HCA (ratio 16): parts off",
    "csa_add": "CSA, K != V, 8 facts: parts on",
    "csa_add16": "CSA, K != V, 16 facts: parts on",
    "csa_add20": "CSA, K != V, 20 facts",
    "hca_add": "HCA (ratio 16), K != V, 8 facts: base",
}
REFERENCES = ("v4", "base")


def panel_title(arm: str, seq_len: int) -> str:
    return f"{TITLES.get(arm, arm.upper())}, T = {seq_len}"


def _color(design: str):
    if design in REFERENCES:
        return COLORS[0]
    return "0.45" if design == "dense" else COLORS[1]


def _interval(c) -> tuple[float, float]:
    """delta_max's 95% interval, cut at 0: a best-minus-worst gap is never negative."""
    lo, hi = c["delta_max_ci"] or [c["delta_max"], c["delta_max"]]
    return max(lo, 0.0), hi


def make(results, predictions=None):
    del predictions
    cells = results["cells"]
    panels = list(dict.fromkeys((c["arm"], c["seq_len"]) for c in cells))
    fig, shown = panel_grid(len(panels), width=5.2, height=3.4)
    top = max(max(_interval(c)[1], c["delta_max_noise_floor"]) for c in cells)
    for ax, (arm, seq_len) in zip(shown, panels, strict=True):
        mine = [c for c in cells if (c["arm"], c["seq_len"]) == (arm, seq_len)]
        for i, c in enumerate(mine):
            lo, hi = _interval(c)
            ax.errorbar(
                i, c["delta_max"], yerr=[[c["delta_max"] - lo], [hi - c["delta_max"]]],
                fmt="o", color=_color(c["design"]), capsize=3,
            )  # fmt: skip
            ax.hlines(c["delta_max_noise_floor"], i - 0.3, i + 0.3, color="0.6", lw=2)
            ax.annotate(f"{c['mean_accuracy']:.2f}", (i, hi), textcoords="offset points",
                        xytext=(0, 4), ha="center", fontsize=7)  # fmt: skip
        ax.set_ylim(0, 1.15 * top if top > 0 else 1.0)  # one range: the panels are compared
        ax.set_xticks(np.arange(len(mine)))
        ax.set_xticklabels([c["design"] for c in mine], rotation=30, ha="right")
        notes = [
            note for suffix, note in (("key_len2", "key_len2: two-token keys"),
                                      ("pairs", "pairs: each kept entry with the one before"),
                                      ("500steps", "500steps: half the training"))
            if any(c["design"].endswith(suffix) for c in mine)
        ]  # fmt: skip
        ax.set_xlabel("design" + (f" ({'; '.join(notes)})" if notes else ""))
        ax.set_ylabel("delta_max (best - worst phase)")
        ax.set_title(panel_title(arm, seq_len), loc="left", fontsize=8)
    marker = dict(marker="o", ls="-", lw=1)
    handles = [
        Line2D([], [], color=COLORS[0], **marker),
        Line2D([], [], color=COLORS[1], **marker),
        Line2D([], [], color="0.45", **marker),
        Line2D([], [], color="0.6", lw=3),
    ]
    labels = [
        "reference design (v4, or the base), delta_max with its 95% interval (seeds)",
        "one part switched off (or, in a base, on)",
        "dense control",
        "noise floor (95%, no phase effect)",
    ]
    legend_below(fig, ncol=2, handles=handles, labels=labels)
    fig.suptitle(title(results))
    return letter_panels(fig)


def separated(cells) -> list[tuple[dict, str]]:
    """The switched parts whose delta_max interval lies wholly on one side of their panel's
    reference design's, paired with "above" or "below": the amplifiers these runs can name
    (above: the gap of a part switched on, or beyond its floor; below: the reference's gap,
    beyond its floor, without the part)."""
    found = []
    for c in cells:
        if c["design"] in REFERENCES or c["design"] == "dense":
            continue
        panel = (c["arm"], c["seq_len"])
        refs = [r for r in cells if (r["arm"], r["seq_len"]) == panel and r["design"] in REFERENCES]
        if not refs:
            continue
        (lo, hi), (ref_lo, ref_hi) = _interval(c), _interval(refs[0])
        if lo > ref_hi and beyond_floor(c["delta_max"], c["delta_max_noise_floor"]):
            found.append((c, "above"))
        elif hi < ref_lo and beyond_floor(refs[0]["delta_max"], refs[0]["delta_max_noise_floor"]):
            found.append((c, "below"))
    return found


def title(results) -> str:
    """Names an amplifier only where one's interval separates from its reference's."""
    found = separated(results["cells"])
    if not found:
        return (
            "DeepSeek-V4's design, one change at a time: no part's delta_max interval separates from "
            "its reference design's at this size"
        )
    parts = [
        f"{side} the reference's with {', '.join(dict.fromkeys(c['design'] for c, s in found if s == side))}"
        for side in ("above", "below")
        if any(s == side for _, s in found)
    ]
    return "DeepSeek-V4's design, one change at a time: delta_max " + "; ".join(parts)

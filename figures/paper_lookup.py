"""The paper's lookup at small scale: accuracy by the target key's residue for each pretrained
design, both paddings, beside the full-attention control."""

import numpy as np

from weakspots.figures.style import COLORS, legend_below, letter_panels, panel_grid

CAPTION = (
    "The paper's lookup (64 one-token animal->name records, 8 demonstrations, a target key, or "
    "fewer records in a shorter context; top-1 over the full vocabulary) on models pretrained on "
    "the project's corpus, which never shows it: accuracy by the target key's position modulo "
    "24 (or a smaller multiple of every stride), every residue group with the "
    "same query position and the same mean and variance of the target position; one panel per "
    "compressed design, prefix padding (records move together) and in-sequence padding (the gaps "
    "between records vary), beside the full-attention control with as many KV heads (prefix).",
    "Lines: mean over seeds; bands: 95% intervals with seeds as clusters. Panel titles: the gap "
    "(best minus worst residue, prefix padding), whether it lies beyond both intervals, and the "
    "dominant period of the residue profile.",
)

UNLEARNED = 0.05  # mean top-1 below which neither model does the lookup at all
STYLE = {"prefix": dict(ls="-"), "in-sequence": dict(ls="--")}


def _control(designs, kv_heads):
    controls = [d for d in designs if d["stride"] is None and d["padding"] == "prefix"]
    same = [d for d in controls if (d["config"] or {}).get("kv_heads") == kv_heads]
    return (same or controls or [None])[0]


def _band(ax, d, color, label, **style):
    x = np.arange(d["modulus"])
    mean = 100 * np.asarray(d["residue_mean"])
    ci = 100 * np.asarray(d["residue_interval"])
    ax.plot(x, mean, color=color, lw=1.4, label=label, **style)
    ax.fill_between(x, ci[:, 0], ci[:, 1], color=color, alpha=0.18, lw=0)


def _title(d) -> str:
    if d is None:
        return ""
    beyond = "beyond" if d["gap_beyond_intervals"] else "within"
    period = d["dominant_period"]
    shown = "none (flat)" if period is None else f"{period:g}"
    return f"gap {100 * d['gap']:.0f} pts ({beyond} intervals), period {shown}"


def make(results, predictions=None):
    del predictions
    designs = results["designs"]
    labels = list(dict.fromkeys(d["label"] for d in designs if d["stride"] is not None))
    fig, axes = panel_grid(max(len(labels), 1), width=4.4, height=3.2)
    for ax, label in zip(axes, labels, strict=False):
        mine = {d["padding"]: d for d in designs if d["label"] == label}
        kv = next(iter(mine.values()))["config"].get("kv_heads")
        control = _control(designs, kv)
        if control is not None:
            _band(ax, control, "0.45", f"control: {control['label']}, prefix", ls="-")
        for i, padding in enumerate(("prefix", "in-sequence")):
            if padding in mine:
                _band(ax, mine[padding], COLORS[i], f"compressed, {padding} padding",
                      **STYLE[padding])  # fmt: skip
        stride = mine[next(iter(mine))]["stride"]
        for start in range(0, mine[next(iter(mine))]["modulus"], stride):
            ax.axvline(start - 0.5, color="0.85", lw=0.6, zorder=0)
        modulus = mine[next(iter(mine))]["modulus"]
        ax.set_xlabel(f"target key position mod {modulus} (grid: windows of S = {stride})")
        ax.set_ylabel("top-1 accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"{label}\n{_title(mine.get('prefix'))}", loc="left", fontsize=8)
    if not labels:  # nothing recorded yet: say so on labelled, empty axes
        axes[0].text(0.5, 0.5, "no compressed design recorded", ha="center", va="center",
                     transform=axes[0].transAxes)  # fmt: skip
        axes[0].set_xlabel("target key position mod 24")
        axes[0].set_ylabel("top-1 accuracy (%)")
    legend_below(fig, ncol=3)
    h = results.get("headline")
    if h is not None and h["design"]["gap_beyond_intervals"]:
        head = (f"{h['design']['label']}: worst residue {100 * h['design']['gap']:.0f} points "
                f"below the best; full attention {100 * h['control']['gap']:.0f}")  # fmt: skip
    elif h is not None and max(h["design"]["mean_accuracy"], h["control"]["mean_accuracy"]) < UNLEARNED:
        head = (f"the lookup is not learned at this budget (mean {100 * h['design']['mean_accuracy']:.0f}%, "
                f"control {100 * h['control']['mean_accuracy']:.0f}%): no gap can show")  # fmt: skip
    elif h is not None:
        head = f"{h['design']['label']}: gap {100 * h['design']['gap']:.0f} points, within the intervals"
    else:
        head = "lookup accuracy by residue"
    source = {
        "planted": "Planted models (a pipeline test, not pretrained)",
        "recorded": "Pretrained at small scale",
        "trained": "Pretrained at small scale",
    }
    fig.suptitle(f"{source[results['source']]}:\n{head}", fontsize=10)  # fmt: skip
    return letter_panels(fig)

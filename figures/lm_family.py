"""Figure `lm_family`: the decoder family, weak-spot gap by operator x stride x context length."""

import numpy as np

from weakspots.figures.style import COLORS, beyond_floor, figure, legend_below, letter_panels

CAPTION = (
    "The decoder family under one training budget: delta_max (best minus worst value phase, outcomes pooled over seeds) for each compression operator at each stride, one panel per context length; 'none' is the dense control, its phases counted at the same stride.",
    "Filled markers: the worst phase's 95% interval (seeds as clusters) lies wholly below the best phase's (a weak spot beyond the intervals); hollow: not separated. Grey ticks: the delta_max noise floor (95% quantile with no phase effect, seeds as clusters); small dots: single seeds.",
)


def make(results, predictions=None):
    del predictions  # no theory is laid over the decoders
    rows = results["rows"]
    seq_lens = sorted({r["seq_len"] for r in rows})
    strides = sorted({r["stride"] for r in rows})
    operators = list(dict.fromkeys(r["operator"] for r in rows))
    fig, axes = figure(len(seq_lens), 1, width=max(4.6, 0.9 * len(operators) + 1.6), height=3.4)
    top = max(max(r["delta_max"], r["delta_max_noise_floor"], *r["seed_delta_max"]) for r in rows)
    width = 0.6 / len(strides)
    for ax, seq_len in zip(axes[0], seq_lens, strict=True):
        for j, stride in enumerate(strides):
            color = COLORS[j]
            for i, op in enumerate(operators):
                match = [
                    r
                    for r in rows
                    if (r["operator"], r["stride"], r["seq_len"]) == (op, stride, seq_len)
                ]
                if not match:
                    continue
                r = match[0]
                x = i + (j - (len(strides) - 1) / 2) * width
                separated = r["interval_gap"] > 0
                ax.plot(
                    x,
                    r["delta_max"],
                    "o",
                    ms=6,
                    color=color,
                    mfc=color if separated else "white",
                    label=f"s = {stride}" if i == 0 else None,
                )
                ax.hlines(
                    r["delta_max_noise_floor"],
                    x - width / 2,
                    x + width / 2,
                    color="0.5",
                    lw=2,
                    label="noise floor (95%, no phase effect)",
                )
                seeds = np.asarray(r["seed_delta_max"])
                ax.plot(
                    np.full(seeds.size, x + width / 4),
                    seeds,
                    ".",
                    color="0.3",
                    ms=2.5,
                    label="single seeds",
                )
        ax.set_xticks(range(len(operators)))
        ax.set_xticklabels(operators, rotation=30, ha="right")
        ax.set_xlabel("compression operator")
        ax.set_ylabel("delta_max (best - worst phase)")
        ax.set_title(f"context T = {seq_len}", loc="left")
        ax.set_ylim(0, 1.1 * top if top > 0 else 1.0)
    handles = dict(zip(*reversed(axes[0][0].get_legend_handles_labels()), strict=True))
    order = sorted(handles, key=lambda label: (not label.startswith("s = "), label))
    legend_below(fig, ncol=len(order), handles=[handles[k] for k in order], labels=order)
    fig.suptitle(title(results))
    return letter_panels(fig)


def title(results) -> str:
    """Names what varies (operator, stride, context) and what is fixed, and a weak spot only
    where some compressed operator's delta_max is beyond its noise floor."""
    rows = results["rows"]
    axes = {"operator": "operator", "stride": "s", "seq_len": "T"}
    values = {key: list(dict.fromkeys(r[key] for r in rows)) for key in axes}
    varied = [key.replace("seq_len", "context") for key, v in values.items() if len(v) > 1]
    fixed = [f"{axes[key]} = {v[0]}" for key, v in values.items() if len(v) == 1]
    shown = [
        r["operator"]
        for r in rows
        if r["operator"] != "none" and beyond_floor(r["delta_max"], r["delta_max_noise_floor"])
    ]
    what = (
        f"delta_max beyond the noise floor for {', '.join(dict.fromkeys(shown))}"
        if shown
        else "no operator's delta_max beyond the noise floor"
    )
    by = f" by {', '.join(varied)}" if varied else ""
    at = f" ({', '.join(fixed)})" if fixed else ""
    return f"Decoder family{by}{at}: {what}"

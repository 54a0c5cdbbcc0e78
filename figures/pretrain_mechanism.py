"""The paper's mechanism measurements on the pretrained designs: knockout maps by residue, the
gates' concentration plane, and gate cycling's observed against predicted changes."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from weakspots.figures.style import COLORS, legend_below, letter_panels

MAX_UNIT_LABELS = 16  # a map of more units names every second (third, ...) one
MIN_INTACT = 0.05  # below this intact accuracy a relative change is noise: the cell is greyed
MASKED = "0.85"
# inches: a knockout map's width; a lower panel's width and plot height; one legend row
MAP_WIDTH, PANEL_WIDTH, PANEL_HEIGHT, LEGEND_ROW = 3.6, 4.4, 3.0, 0.19

CAPTION = (
    "Knockout maps, one per design (full-attention control first): mean-replacement knockout "
    "of each unit (one KV head's query heads, or a whole layer, at the prompt's last position) "
    "on the lookup, prefix padding unless the title names another; colour: relative accuracy change by the target key's residue on a fixed "
    "scale from -100% to +100% (larger gains at the top colour); grey: residues whose intact "
    "accuracy (mean over seeds) is below 5%, where a relative change is noise; dots: the "
    "change's interval lies below 0 (seeds as clusters; not drawn on grey); thin verticals: "
    "phase boundaries. Gate concentration: every key (filled) and value "
    "(hollow) gate's static exp(H(E[alpha])) against per-window E[exp(H(alpha))], effective "
    "offsets from 1 (one-hot) to W (uniform, dotted), at the last checkpoint; lines: their "
    "paths over the kept checkpoints; dashed: the diagonal (the same preference in every "
    "window); legend: key gates classed content-driven, per recording.",
    "Gate cycling, one panel per design (W = S): the gate parameters cycled by delta; per "
    "residue, the observed accuracy change (mean over seeds) against the change predicted from "
    "the intact phase profile, A_0((r - delta) mod S) - A_0(r); dashed: observed = predicted; "
    "hollow: the boundary phase S - 1; legend: R^2 with the boundary phase left out (in "
    "brackets: with it), mean over seeds. Title: the designs recorded, each with the "
    "measurements and seeds, and the range of the cycling R^2 over the shifts delta.",
)


def _knockout_map(ax, entry):
    units = entry["units"]
    data = np.array([[np.nan if v is None else 100 * v for v in u["relative_change"]]
                     for u in units], dtype=float).reshape(len(units), entry["modulus"])  # fmt: skip
    noise = np.asarray(entry["intact_residue_mean"], dtype=float) < MIN_INTACT
    data[:, noise] = np.nan
    cmap = matplotlib.colormaps["RdBu"].with_extremes(bad=MASKED)
    image = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=-100, vmax=100, aspect="auto",
                      interpolation="nearest")  # fmt: skip
    for i, u in enumerate(units):
        hurt = [r for r in u["hurt_residues"] if not noise[r]]
        ax.plot(hurt, [i] * len(hurt), "k.", ms=2.5)
    for start in range(0, entry["modulus"] + 1, entry["period"]):
        ax.axvline(start - 0.5, color="0.3", lw=0.5)
    shown = range(0, len(units), -(-len(units) // MAX_UNIT_LABELS))
    ax.set_yticks(shown)
    ax.set_yticklabels(
        [units[i]["name"].replace("layer ", "L").replace(", KV ", " KV") for i in shown]
    )
    ax.set_xlabel(f"target key position mod {entry['modulus']} (phases mod {entry['period']})")
    ax.set_ylabel("knocked-out unit")
    padding = entry.get("padding")
    suffix = "" if padding in (None, "prefix") else f", {padding}"
    ax.set_title(f"{entry['label']}: knockout{suffix}", loc="left")
    return image


def _map_legend(fig, knockouts):
    handles = {"change interval below 0": plt.Line2D([], [], color="k", marker=".", ls="none")}
    if any(min(e["intact_residue_mean"]) < MIN_INTACT for e in knockouts):
        handles[f"intact accuracy below {MIN_INTACT:.0%}"] = Patch(facecolor=MASKED,
                                                                   edgecolor="0.6", lw=0.5)  # fmt: skip
    legend_below(fig, ncol=2, handles=list(handles.values()), labels=list(handles))


def _plane(ax, gates):
    if not gates:
        _empty(ax, "gates", "static exp(H(E[α])) (offsets)", "per-window E[exp(H(α))] (offsets)",
               "gate concentration")  # fmt: skip
        return
    top = max(e["window"] or 1 for e in gates)
    for i, entry in enumerate(gates):
        color = COLORS[i % len(COLORS)]
        s = entry["summary"]
        label = (f"{entry['label']}{' (over training)' if entry['over_training'] else ''}: "
                 f"{s['content_driven']}/{s['key_gates']} key gates content-driven")  # fmt: skip
        for g in entry["gates"]:
            key = g["branch"] == "key"
            if g["trajectory"] is not None:
                t = g["trajectory"]
                ax.plot(t["static"], t["per_window"], color=color, lw=0.6, alpha=0.5, zorder=1)
            ax.plot(g["static"], g["per_window"], "o" if key else "^", ms=4, zorder=3,
                    color=color, mfc=color if key else "none", label=label)  # fmt: skip
        if entry["window"]:
            ax.axvline(entry["window"], color=color, ls=":", lw=0.8)
    ax.plot([1, top], [1, top], "k--", lw=0.8, label="diagonal: static = per-window")
    ax.axhline(1, color="0.6", lw=0.6)
    ax.axvline(1, color="0.6", lw=0.6)
    ax.plot([], [], "ko", ms=4, label="key gate")
    ax.plot([], [], "k^", ms=4, mfc="none", label="value gate")
    ax.plot([], [], color="0.4", ls=":", lw=0.8, label="W (uniform)")
    ax.set_xlim(0.8, top + 0.3)
    ax.set_ylim(0.8, top + 0.3)
    ax.set_xlabel("static exp(H(E[α])) (offsets)")
    ax.set_ylabel("per-window E[exp(H(α))] (offsets)")
    ax.set_title("gate concentration", loc="left")


def _r2(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _cycling(ax, entry):
    stride, boundary = entry["stride"], entry["boundary_phase"]
    at_boundary = np.arange(entry["modulus"]) % stride == boundary
    span = 1.0
    for i, d in enumerate(entry["deltas"]):
        color = COLORS[i % len(COLORS)]
        x = 100 * np.asarray(d["predicted_change"])
        y = 100 * np.asarray(d["observed_change"])
        span = max(span, np.abs(x).max(initial=0), np.abs(y).max(initial=0))
        label = (f"δ = {d['delta']:+d}: R² {_r2(d['r_squared_without_boundary'][0])} "
                 f"({_r2(d['r_squared'][0])})")  # fmt: skip
        ax.plot(x[~at_boundary], y[~at_boundary], "o", ms=3.5, color=color, label=label)
        ax.plot(x[at_boundary], y[at_boundary], "o", ms=5, mfc="none", color=color)
    ax.plot([], [], "o", ms=5, mfc="none", color="black", label=f"boundary phase {boundary}")
    lim = 1.05 * span
    ax.plot([-lim, lim], [-lim, lim], "k--", lw=0.8)
    ax.axhline(0, color="0.8", lw=0.5, zorder=0)
    ax.axvline(0, color="0.8", lw=0.5, zorder=0)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_xlabel("predicted change (points)")
    ax.set_ylabel("observed change (points)")
    ax.set_title(f"{entry['label']}: gate cycling", loc="left")


def _empty(ax, what, xlabel, ylabel, title):
    ax.text(0.5, 0.5, f"no {what} recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left")


def _seeds(entry) -> int:
    seeds = entry["seeds"]
    return seeds if isinstance(seeds, int) else len(seeds)


def _designs(results) -> list[str]:
    """Each design recorded, with its measurements and seeds."""
    designs = {}
    for kind, name in (("knockout", "knockout"), ("gates", "gates"), ("cycle", "cycling")):
        for e in results[kind]:
            kinds, seeds = designs.setdefault(e["label"], ({}, set()))
            kinds[name] = None
            seeds.add(_seeds(e))
    out = []
    for label, (kinds, seeds) in designs.items():
        low, high = min(seeds), max(seeds)
        count = f"{low}" if low == high else f"{low}-{high}"
        out.append(f"{label} ({', '.join(kinds)}; {count} seed{'s' * (high > 1)})")
    return out


def _cycling_said(results) -> str | None:
    values = [d["r_squared_without_boundary"][0] for e in results["cycle"] for d in e["deltas"]]
    values = [v for v in values if v is not None]
    if not values:
        return None
    return (f"gate cycling R² {min(values):.2f}-{max(values):.2f} over {len(values)} shifts "
            "(boundary phase left out, mean over seeds)")  # fmt: skip


def _wrap(head, parts, width) -> str:
    """`head` and `parts` (joined by semicolons) in lines of about `width` characters, broken
    only between parts."""
    lines = [head]
    for i, part in enumerate(parts):
        piece = part + (";" if i < len(parts) - 1 else "")
        if len(lines[-1]) + 1 + len(piece) > width:
            lines.append(piece)
        else:
            lines[-1] += " " + piece
    return "\n".join(lines)


def _legend_rows(entries, ncol) -> int:
    return -(-entries // ncol)


def make(results, predictions=None):
    del predictions
    knockouts, cycles, gates = results["knockout"], results["cycle"], results["gates"]
    n_maps, n_lower = max(len(knockouts), 1), 1 + max(len(cycles), 1)
    units = max((len(e["units"]) for e in knockouts), default=2)
    map_height = min(max(0.22 * min(units, 2 * MAX_UNIT_LABELS), 1.4), 4.0)
    plane_rows = _legend_rows(len(gates) + 4, 1)
    cycle_rows = max((_legend_rows(len(e["deltas"]) + 1, 2) for e in cycles), default=0)
    upper = map_height + 1.9  # title, axis label, colour bar, legend
    lower = PANEL_HEIGHT + 0.9 + LEGEND_ROW * max(plane_rows, cycle_rows)
    width = max(MAP_WIDTH * n_maps, PANEL_WIDTH * n_lower)
    fig = plt.figure(layout="constrained", figsize=(width, upper + lower + 0.6))
    top, bottom = fig.subfigures(2, 1, height_ratios=[upper, lower])
    ko_axes = list(top.subplots(1, n_maps, squeeze=False).flat)
    images = [_knockout_map(ax, entry) for ax, entry in zip(ko_axes, knockouts, strict=False)]
    if images:  # one scale for every map, under them all
        top.colorbar(images[-1], ax=ko_axes, location="bottom", shrink=min(0.5, 4 / width),
                     aspect=30, extend="max", label="relative accuracy change (%)")  # fmt: skip
        _map_legend(top, knockouts)
    else:
        _empty(ko_axes[0], "knockout", "target key position mod 24", "knocked-out unit",
               "knockout")  # fmt: skip
    plane_fig, *cycle_figs = bottom.subfigures(1, n_lower)
    plane_ax = plane_fig.subplots()
    _plane(plane_ax, gates)
    if gates:
        legend_below(plane_fig, ncol=1)
    for sub, entry in zip(cycle_figs, cycles, strict=False):
        _cycling(sub.subplots(), entry)
        legend_below(sub, ncol=2)
    if not cycles:
        _empty(cycle_figs[0].subplots(), "gate cycling", "predicted change (points)",
               "observed change (points)", "gate cycling")  # fmt: skip
    planted = results["source"] == "planted"
    source = ("Planted results (a pipeline test, nothing measured)" if planted
              else "Mechanism measurements")  # fmt: skip
    wrap = int(12 * width)  # characters of the suptitle's size per line
    cycling = _cycling_said(results)
    title = _wrap(f"{source}:", _designs(results) or ["nothing recorded yet"], wrap)
    fig.suptitle(title + (f"\n{cycling}" if cycling else ""))
    return letter_panels(fig)

"""Figure `lm_mitigations`: the toy's four mitigations in trained decoders."""

import numpy as np

from weakspots.figures.style import COLORS, SGD, figure, legend_below, letter_panels
from weakspots.sims.decoder.evaluate import report_noise_floor

CAPTION = (
    "Top: accuracy by the queried value's phase (facts beyond the query's reach, two seeds pooled; 95% intervals with the seeds as clusters, or Wilson with outcomes pooled in recordings without per-seed accuracies) of each decoder intact (black) and read under K = 2 and 4 chunkings shifted by k s / K tokens with the log-probabilities averaged (points; K forward passes per sequence); lines: the toy's prediction from the intact accuracy (theory.offset_ensemble_accuracy, the mean over the shifted phases).",
    "Top right: every mitigation's gap delta_max (points) against its design intact (black bars), with the 95% noise floor of the mitigated evaluation (grey). Bottom: decoders trained from scratch with a mitigation (colours) beside their design intact (black), same seeds and evaluation: stagger (head h's windows shifted h s / H tokens), the phase-entropy regulariser at two weights, and DeepSeek-V4's overlapping windows of 2s tokens. Two seeds pooled: a seed that learns recall late pulls a whole curve down (softmax_s8 with stagger; each seed's numbers are in the rows).",
)
TRAINED_LABELS = {
    "stagger": "stagger",
    "phase_entropy": "phase entropy",
    "overlap": "overlap",
}


def _label(changes: dict) -> str:
    (key, value), *_ = changes.items()
    return TRAINED_LABELS[key] + ("" if isinstance(value, bool) else f" {value:g}")


def _accuracy(ax, x, acc, ci, color, label):
    acc, ci = np.asarray(acc), np.asarray(ci)
    yerr = np.maximum(np.stack([acc - ci[:, 0], ci[:, 1] - acc]), 0.0)
    ax.errorbar(x, acc, yerr=yerr, color=color, label=label, **SGD)


def _ensembles(ax, name, r, predictions):
    s = r["config"]["stride"]
    phases = np.arange(s)
    ax.plot(phases, r["phase_accuracy"], "o-", color="black", ms=4, lw=1, label="intact")
    for i, (k, e) in enumerate(r["ensembles"].items()):
        x = phases + 0.12 * (i + 1)
        _accuracy(ax, x, e["accuracy"], e["accuracy_ci"], COLORS[i], f"ensemble K={k}")
        ax.plot(x, predictions[name][k], "-", color=COLORS[i], lw=1, alpha=0.7,
                label=f"toy, K={k}")  # fmt: skip
    ax.set_xticks(phases)
    ax.set_xlabel("value phase")
    ax.set_title(f"{name}: {r['config']['operator']} s={s}, ensembles", loc="left")


def _gaps(ax, results):
    """delta_max of every mitigation (points) against its intact design (bars), floors grey."""
    items = []
    for name, r in results["designs"].items():
        intact = float(np.ptp(r["phase_accuracy"]))
        for k, e in r["ensembles"].items():
            acc = np.asarray(e["accuracy"])
            floor = report_noise_floor(acc, r["samples"], e.get("accuracy_per_seed"))
            items.append((f"{name} ensemble K={k}", intact, float(np.ptp(acc)), floor, 0))
    for found in results.get("trained", {}).values():
        base, mitigated = found["base"], found["mitigated"]
        items.append((f"{found['design']} {_label(found['changes'])}", base["delta_max"],
                      mitigated["delta_max"], mitigated["delta_max_noise_floor"],
                      _colour(results, found)))  # fmt: skip
    y = np.arange(len(items))[::-1]
    for i, (yi, (_, intact, gap, floor, colour)) in enumerate(zip(y, items, strict=True)):
        first = i == 0
        ax.barh(yi, floor, height=0.7, color="0.85", zorder=1,
                label="noise floor (95%)" if first else None)  # fmt: skip
        ax.barh(yi, intact, height=0.25, color="black", zorder=2,
                label="intact delta_max" if first else None)  # fmt: skip
        ax.plot(gap, yi, "o", ms=5, color=COLORS[colour], zorder=3)
    ax.set_yticks(y, [item[0] for item in items], fontsize=7)
    ax.set_xlabel("delta_max")
    ax.set_title("gap: mitigated (points), intact (bars)", loc="left")


def _colour(results, found) -> int:
    """Colour index of a trained mitigation: after the ensembles', one per mitigation label."""
    labels = sorted({_label(f["changes"]) for f in results.get("trained", {}).values()})
    return 2 + labels.index(_label(found["changes"]))


def _trained(ax, design, results):
    found = [f for f in results["trained"].values() if f["design"] == design]
    base = found[0]["base"]
    s = len(base["phase_accuracy"])
    phases = np.arange(s)
    _accuracy(ax, phases, base["phase_accuracy"], base["phase_accuracy_ci"], "black", "intact")
    for i, f in enumerate(found):
        m = f["mitigated"]
        _accuracy(ax, phases + 0.14 * (i + 1), m["phase_accuracy"], m["phase_accuracy_ci"],
                  COLORS[_colour(results, f)], _label(f["changes"]))  # fmt: skip
    ax.set_xticks(phases)
    ax.set_xlabel("value phase")
    c = found[0]["config"]
    ax.set_title(f"{design}: {c['operator']} s={c['stride']}, retrained", loc="left")


def make(results, predictions):
    designs = results["designs"]
    trained = results.get("trained", {})
    bases = list(dict.fromkeys(f["design"] for f in trained.values()))
    cols = max(len(designs) + 1, len(bases), 1)
    rows = 2 if trained else 1
    fig, axes = figure(cols, rows, width=3.6, height=2.9)
    for col, (name, r) in enumerate(designs.items()):
        _ensembles(axes[0, col], name, r, predictions)
    _gaps(axes[0, len(designs)], results)
    for col, design in enumerate(bases):
        _trained(axes[1, col], design, results)
    for row in axes:
        row[0].set_ylabel("accuracy")
    for ax in axes[0, len(designs) + 1 :]:
        ax.set_visible(False)
    for ax in axes[1, len(bases) :] if rows == 2 else ():
        ax.set_visible(False)
    legend_below(fig, axes, ncol=5)
    fig.suptitle("The toy's mitigations in decoders trained from scratch")
    return letter_panels(fig)

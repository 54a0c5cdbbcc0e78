"""Figure `lm_toy`: the toy's predictions against the decoders' measurements."""

import numpy as np

from weakspots.figures.style import COLORS, SGD, THEORY, figure, legend_below, letter_panels
from weakspots.sims.experiments.decoder.ablation.lm_mechanism import chunks, compressed_weights
from weakspots.sims.experiments.decoder.ablation.lm_toy import STRIDE_PAIRS, measured_support

CAPTION = (
    "(a) delta_max of fixed mean pooling against the chunk count N at stride 8 (the toy predicts none at any N; grey: 95% noise floor); (b) delta_max against stride at T = 128 with 4 and with 8 facts P (bars: 95% noise floor; the field's claim: larger stride, larger weak spot); (c) support size of the learned softmax pooling (phases above 1/(2s), mean over heads and seeds) against the toy's d = inf flow at the decoder's effective gain, with and without weight decay; (d) the learned pooling weights per head.",
    "Points: decoders (two seeds pooled). Black: the toy's prediction. The agreement table states which predictions carried over.",
)


def _delta(r):
    return max(r["phase_accuracy"]) - min(r["phase_accuracy"])


def make(results, predictions):
    d = results["designs"]
    fig, axes = figure(4, 1, width=2.9, height=2.7)
    ax = axes[0, 0]
    names = [n for n in ("mean_s8_T64", "mean_s8") if n in d]
    n = [chunks(d[k]["config"]) for k in names]
    ax.errorbar(n, [_delta(d[k]) for k in names], color=COLORS[0], label="decoder", **SGD)
    ax.fill_between(
        n, 0, [d[k]["delta_max_noise_floor"] for k in names], color="0.85", label="noise floor"
    )
    ax.plot(n, [0.0] * len(n), label="toy", **THEORY)
    ax.set_xlabel("chunks N (mean pooling, s = 8)")
    ax.set_ylabel("delta_max")
    ax.set_ylim(bottom=0)
    ax.set_title("(a) gap vs N", loc="left")
    ax = axes[0, 1]
    for i, pair in enumerate(STRIDE_PAIRS):
        names = [k for k in pair if k in d]
        if not names:
            continue
        s = [d[k]["config"]["stride"] for k in names]
        delta = [_delta(d[k]) for k in names]
        floor = [d[k]["delta_max_noise_floor"] for k in names]
        ax.errorbar(s, delta, yerr=floor, color=COLORS[i], **SGD)
        ax.plot(s, delta, lw=0.8, color=COLORS[i])
        for x, y in zip(s[-1:], delta[-1:], strict=True):
            ax.annotate(
                f"P = {d[names[0]]['config']['pairs']}", (x, y), xytext=(-6, 0),
                textcoords="offset points", ha="right", va="center", color=COLORS[i],
            )  # fmt: skip
        ax.set_xticks(s)
    ax.set_xlim(3, 9)
    ax.set_ylim(bottom=0)  # a gap: never below 0
    ax.set_xlabel("stride s (mean pooling, T = 128)")
    ax.set_title("(b) gap vs stride", loc="left")
    ax = axes[0, 2]
    names = [k for k in ("softmax_s8", "softmax_s8_wd") if k in d]
    x = np.arange(len(names))
    ax.errorbar(x, [measured_support(d[k]) for k in names], color=COLORS[0], **SGD)
    ax.plot(
        x, [predictions["support"][k] for k in names], "s", color="black", ms=5,
        label="toy's support (d = inf flow)",
    )  # fmt: skip
    ax.set_xticks(x, [f"wd {d[k]['config']['weight_decay']:g}" for k in names])
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylim(0, 8.5)
    ax.set_ylabel("support size (phases)")
    ax.set_title("(c) learned pooling support", loc="left")
    ax = axes[0, 3]
    if "softmax_s8" in d:
        w = compressed_weights(d["softmax_s8"])
        s = w.shape[-1]
        for r in range(w.shape[0]):
            for h in range(w.shape[1]):
                ax.plot(range(s), w[r, h], "o-", ms=3, lw=1, color=COLORS[2 + h], alpha=0.8)
        ax.axhline(1 / s, color="0.5", lw=1, ls="-", label="uniform 1/s")
        ax.axhline(0.5 / s, color="black", lw=1, ls=":", label="coverage threshold 1/(2s)")
        ax.set_xticks(range(s))
    ax.set_xlabel("phase (softmax pooling, s = 8)")
    ax.set_ylabel("pooling weight")
    ax.set_title("(d) weights, 2 heads x 2 seeds", loc="left")
    legend_below(fig, axes[0], ncol=4)
    fig.suptitle("The toy's predictions held against decoders trained from scratch")
    return letter_panels(fig)

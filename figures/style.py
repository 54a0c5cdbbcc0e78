"""Shared look of the paper figures: theory as lines, simulation as points with intervals."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from weakspots.idealized.metrics import wilson_interval

THEORY = dict(color="black", lw=1.6, zorder=2)
ODE = dict(lw=1.4, zorder=2)
SGD = dict(fmt="o", ms=4, capsize=2, lw=1, zorder=3)
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]

plt.rcParams.update(
    {
        "figure.dpi": 100,
        "savefig.dpi": 110,
        "font.size": 9,
        "axes.titlesize": 10,
        "axes.labelsize": 9,
        "legend.fontsize": 8,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
)


def figure(ncols=1, nrows=1, width=4.2, height=3.2, **kwargs):
    """A figure of `nrows x ncols` panels, each about `width x height` inches."""
    return plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kwargs
    )


def wilson_yerr(accuracy, samples) -> np.ndarray:
    """Asymmetric error bars `(2, n)` of the 95% Wilson interval around each accuracy."""
    acc = np.asarray(accuracy, float)
    ci = wilson_interval(acc, samples)
    return np.maximum(np.stack([acc - ci[..., 0], ci[..., 1] - acc]), 0.0)


def spread_yerr(values) -> tuple[np.ndarray, np.ndarray]:
    """Per entry of `values` (a list of per-seed lists): mean and min-max spread as error bars `(2, n)`."""
    rows = [np.asarray(v, float) for v in values]
    mean = np.array([r.mean() for r in rows])
    low = np.array([r.min() for r in rows])
    high = np.array([r.max() for r in rows])
    return mean, np.maximum(np.stack([mean - low, high - mean]), 0.0)


def panel_label(ax, text: str) -> None:
    ax.set_title(text, loc="left")

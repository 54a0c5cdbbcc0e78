"""Shared look of the paper figures: one font-size scheme, theory as lines, simulation as
points with intervals, and legends in their own row under the panels, never over data."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from weakspots.idealized.metrics import wilson_interval

THEORY = dict(color="black", lw=1.6, zorder=2)
ODE = dict(lw=1.4, zorder=2)
SGD = dict(fmt="o", ms=4, capsize=2, lw=1, zorder=3)
COLORS = plt.rcParams["axes.prop_cycle"].by_key()["color"]

# The one font-size scheme (points): nothing smaller than SMALL anywhere in a figure.
BASE, SMALL, TITLE, SUPTITLE = 9.0, 8.0, 10.0, 11.0

plt.rcParams.update(
    {
        "figure.dpi": 100,
        "savefig.dpi": 110,
        "font.size": BASE,
        "axes.titlesize": TITLE,
        "axes.labelsize": BASE,
        "xtick.labelsize": SMALL,
        "ytick.labelsize": SMALL,
        "legend.fontsize": SMALL,
        "legend.title_fontsize": SMALL,
        "figure.titlesize": SUPTITLE,
        "axes.spines.top": False,
        "axes.spines.right": False,
    }
)


def figure(ncols=1, nrows=1, width=4.2, height=3.2, **kwargs):
    """A figure of `nrows x ncols` panels, each about `width x height` inches.

    Constrained layout (so labels, colour bars and outside legends are never clipped).
    Returns (figure, axes (nrows, ncols)).
    """
    kwargs.setdefault("layout", "constrained")
    return plt.subplots(
        nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False, **kwargs
    )


def panel_grid(panels, max_cols=3, width=4.2, height=3.2):
    """`panels` panels in rows of at most `max_cols` (`figure`), the unused axes hidden.

    Returns (figure, the first `panels` axes in reading order).
    """
    ncols = min(max_cols, panels)
    fig, axes = figure(ncols, -(-panels // ncols), width=width, height=height)
    for ax in axes.flat[panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:panels])


def legend_below(fig, axes=None, ncol=3, handles=None, labels=None):
    """One legend for the figure, in its own row under the panels (never over data).

    axes: where to collect the labelled artists (default every axes of `fig`); entries with
    the same label appear once. Or pass `handles` and `labels` explicitly.
    """
    if handles is None:
        seen = {}
        for ax in fig.axes if axes is None else np.ravel(axes):
            for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
                seen.setdefault(label, h)
        labels, handles = list(seen), list(seen.values())
    return fig.legend(handles, labels, loc="outside lower center", ncol=ncol, frameon=False)


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


def beyond_floor(delta_max, floor) -> bool:
    """Whether a measured delta_max exceeds its noise floor: the one test behind every
    figure title that says "weak spot"."""
    return floor is not None and delta_max is not None and float(delta_max) > float(floor)


def letter_panels(fig):
    """Prefix each titled, visible panel's title with its letter, (a), (b), ..., in the
    order the panels were made (reading order); returns `fig`. One panel: no letter."""
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison and _title(ax)[1]]
    if len(panels) < 2:
        return fig
    for i, ax in enumerate(panels):
        loc, text = _title(ax)
        if not (text.startswith("(") and text[2:4] == ") "):
            # the title's own Text, so its font size and place stay as the figure set them
            artist = {"left": ax._left_title, "center": ax.title, "right": ax._right_title}[loc]
            artist.set_text(f"({chr(ord('a') + i)}) {text}")
    return fig


def _title(ax) -> tuple[str, str]:
    for loc in ("left", "center", "right"):
        if ax.get_title(loc=loc):
            return loc, ax.get_title(loc=loc)
    return "left", ""

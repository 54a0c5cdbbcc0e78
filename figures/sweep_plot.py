"""Plot a sweep's result store: one column against another, one line per value of a third.

    fig = plot_store("results/tiny", x="gain", y="delta_max", hue="operator")
    fig = plot_store("results/tiny", x="phase", y="phase_accuracy", hue="chunks")
    fig = plot_store("results/tiny", x="gain", y="phase_accuracy[0]")

Columns are those of `sims.store.load`. A list column (one list per run, such as
`phase_accuracy` or the per-head `support_size`) is read either one entry at a time
(`phase_accuracy[3]`) or whole, in long form (`long_table`): one row per entry, its
position in a new column (`phase` for per-phase lists, `head` for per-head ones), which
then serves as `x` or `hue`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from weakspots.figures.style import COLORS, figure
from weakspots.idealized.metrics import mean_interval

# The position column a list column expands into.
LIST_POSITION = {
    "phase_accuracy": "phase",
    "support_size": "head",
    "specialization_index": "head",
    "final_gain": "head",
}
MAX_TICKS = 12  # numeric x with at most this many distinct values gets a tick at each
_ENTRY = re.compile(r"^(?P<name>\w+)\[(?P<index>-?\d+)\]$")


class PlotError(ValueError):
    """A column that the table lacks or cannot be plotted; the message names the argument."""


def is_list_column(table: pd.DataFrame, column: str) -> bool:
    """True when `column` holds a list (or array) per run."""
    values = table[column].dropna() if column in table else []
    return len(values) > 0 and all(isinstance(v, list | tuple | np.ndarray) for v in values)


def position_column(column: str) -> str:
    """The column a list column's positions go to: `phase`, `head`, or `<column>_index`."""
    return LIST_POSITION.get(column, f"{column}_index")


def long_table(table: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """`table` with the list columns `columns` in long form: one row per entry of each list.

    The entry's position goes to `position_column` (0-based; the columns must share
    it, and each run's lists their length); values stay under their column. Runs whose
    list is missing are dropped.
    """
    (position,) = {position_column(c) for c in columns}
    rows = table.dropna(subset=list(columns)).copy()
    for column in columns:
        rows[column] = [list(v) for v in rows[column]]
    rows[position] = [list(range(len(v))) for v in rows[columns[0]]]
    out = rows.explode([*columns, position], ignore_index=True)
    for column in columns:
        out[column] = pd.to_numeric(out[column])
    out[position] = out[position].astype(int)
    return out


def resolve(table: pd.DataFrame, names: Mapping[str, str | None]) -> pd.DataFrame:
    """`table` with every requested column present: entries `name[k]` taken, lists expanded.

    `names` maps an argument (`x`, `y`, `hue`) to the column it asks for. A list column
    asked for whole is expanded with `long_table`; its position column must then be
    asked for too (as `x` or `hue`), or the plot would pool the entries of a run.
    Raises PlotError naming the argument at fault.
    """
    wanted = {arg: name for arg, name in names.items() if name is not None}
    lists = [c for c in table.columns if table[c].dtype == object and is_list_column(table, c)]
    positions = {position_column(c): c for c in lists}
    for name in wanted.values():
        entry = _ENTRY.match(name)
        if entry and entry["name"] in lists:
            k = int(entry["index"])
            table = table.assign(**{name: [_entry(v, k) for v in table[entry["name"]]]})
    for arg, name in wanted.items():
        if name not in table and name not in positions:
            listed = ", ".join(c for c in table.columns if c not in ("hash", "written_ns"))
            raise PlotError(f"{arg}: no column {name!r}; columns: {listed}")
    whole = sorted({n for n in wanted.values() if n in lists})
    for position in sorted({position_column(n) for n in whole}):
        columns = [n for n in whole if position_column(n) == position]
        if position not in wanted.values():
            arg = next(a for a, n in wanted.items() if n == columns[0])
            raise PlotError(
                f"{arg}: {columns[0]} holds a list per run; plot it against {position!r} "
                f"(as x or hue) or pick one entry, e.g. {columns[0]}[0]"
            )
        table = long_table(table, *columns)
    for arg, name in wanted.items():
        if name not in table:
            raise PlotError(
                f"{arg}: {name!r} is the position in the list column {positions[name]}; "
                f"plot {positions[name]} against it"
            )
    return table


def _entry(value, k: int) -> float:
    if isinstance(value, list | tuple | np.ndarray) and -len(value) <= k < len(value):
        return float(value[k])
    return math.nan


def _bounds(name: str) -> tuple[float, float]:
    base = _ENTRY.sub(r"\g<name>", name)
    if "accuracy" in base or base in ("delta_max", "specialization_index"):
        return 0.0, 1.0
    if base in ("psc", "psc_std", "support_size", "final_gain"):
        return 0.0, math.inf
    return -math.inf, math.inf


def summarise(table: pd.DataFrame, x: str, y: str, hue: str | None = None) -> pd.DataFrame:
    """Per `(hue, x)`: runs `n`, `mean` of `y`, and its 95% t interval `lo`, `hi`.

    The interval is cut to the range `y` can take (accuracies and `delta_max` in [0, 1],
    `psc` >= 0); with one run it is NaN.
    """
    keys = [hue, x] if hue else [x]
    low, high = _bounds(y)
    rows = []
    for key, group in table.dropna(subset=[y]).groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        mean, lo, hi = mean_interval(group[y].to_numpy(float), low, high)
        rows.append(
            {**dict(zip(keys, key, strict=True)), "n": len(group), "mean": mean, "lo": lo, "hi": hi}
        )
    return pd.DataFrame(rows, columns=[*keys, "n", "mean", "lo", "hi"])


def _numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def plot_store(
    source: str | os.PathLike | pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    *,
    where: Mapping[str, Any] | None = None,
    logx: bool = False,
    logy: bool = False,
):
    """Plot `y` against `x` for the runs of a result store, one line per value of `hue`.

    Arguments:
        source: a store directory (`sims.store.load`) or the table it gives.
        x, y, hue: column names; `name[k]` for entry k of a list column; a list column
            whole is expanded (`resolve`) and its position (`phase`, `head`) is a column.
        where: keep only runs whose column equals the value (`{"stride": 8}`).
        logx, logy: logarithmic axes.
    Every run is a faint point; the line joins the means over the runs that share
    `(x, hue)` (e.g. seeds), with their 95% interval as error bars (`summarise`).
    Returns the matplotlib Figure; PlotError names a missing column or empty selection.
    """
    if isinstance(source, pd.DataFrame):
        table = source
    else:  # the store (pyarrow) only for a store, not a table given
        from weakspots.sims.store import load

        table = load(source)
    for key, value in (where or {}).items():
        if key not in table:
            raise PlotError(f"where: no column {key!r}")
        table = table[table[key] == value]
    if table.empty:
        raise PlotError("where: no run matches" if where else "source: the store holds no run")
    table = resolve(table, {"x": x, "y": y, "hue": hue})
    table = table.dropna(subset=[y])
    if not _numeric(table[y]):
        raise PlotError(f"y: {y!r} is not numeric")
    stats = summarise(table, x, y, hue)
    numeric_x = _numeric(table[x])
    categories = sorted(table[x].unique(), key=str) if not numeric_x else None

    def position(values):
        if numeric_x:
            return np.asarray(values, float)
        return np.asarray([categories.index(v) for v in values], float)

    fig, axes = figure(1, 1, width=5.0, height=3.4)
    ax = axes[0, 0]
    groups = (
        [(None, table, stats)]
        if hue is None
        else [
            (value, table[table[hue] == value], stats[stats[hue] == value])
            for value in sorted(table[hue].unique(), key=_sort_key)
        ]
    )
    # Categories: hue groups side by side around each category, no line between categories.
    width = 0.5 if not numeric_x and len(groups) > 1 else 0.0
    for i, (value, runs, line) in enumerate(groups):
        color = COLORS[i % len(COLORS)]
        shift = width * (i / max(len(groups) - 1, 1) - 0.5)
        ax.plot(position(runs[x]) + shift, runs[y], "o", ms=3, alpha=0.3, color=color, zorder=2)
        lo = np.where(np.isnan(line["lo"]), line["mean"], line["lo"])
        hi = np.where(np.isnan(line["hi"]), line["mean"], line["hi"])
        mean = line["mean"].to_numpy(float)
        ax.errorbar(
            position(line[x]) + shift,
            mean,
            yerr=np.maximum(np.stack([mean - lo, hi - mean]), 0.0),
            fmt="-o" if numeric_x else "o",
            ms=4,
            capsize=2,
            lw=1.4,
            color=color,
            zorder=3,
            label=None if hue is None else f"{hue} = {_label(value)}",
        )
    if not numeric_x:
        ax.set_xticks(range(len(categories)), [_label(c) for c in categories])
        if max(len(_label(c)) for c in categories) * len(categories) > 40:
            ax.tick_params(axis="x", labelrotation=30)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    grid_values = sorted(table[x].unique()) if numeric_x else []
    if 0 < len(grid_values) <= MAX_TICKS:  # a sweep's grid: a tick at each value, written plainly
        ax.set_xticks(grid_values, [_label(v) for v in grid_values])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    most = int(stats["n"].max()) if len(stats) else 0
    ax.set_title(
        f"{table['hash'].nunique() if 'hash' in table else len(table)} runs; "
        + (
            "mean of up to " + str(most) + " (95% interval); dots: runs"
            if most > 1
            else "dots: runs"
        ),
        loc="left",
    )
    if hue is not None:
        # Outside the axes, so the legend never covers data.
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    return fig  # style.figure's constrained layout makes room for the outside legend


def _sort_key(value):
    return (
        (0, float(value), "")
        if isinstance(value, int | float | np.number)
        else (1, 0.0, str(value))
    )


def _label(value) -> str:
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def save(fig, path: str | os.PathLike, *, close: bool = True) -> None:
    """Save `fig` (format by the suffix), the legend outside the axes included; then close it."""
    fig.savefig(path, bbox_inches="tight")
    if close:
        plt.close(fig)

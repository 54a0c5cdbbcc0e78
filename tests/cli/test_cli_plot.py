"""`weakspots plot` and `figures.sweep_plot`: a store's columns drawn, list columns expanded."""

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from weakspots.cli import main
from weakspots.figures import sweep_plot
from weakspots.sims import store

matplotlib.use("Agg")

GAINS, SEEDS, STRIDE = (8.0, 16.0), (0, 1, 2), 4


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory):
    """A store of 2 operators x 2 gains x 3 seeds, with made-up but known metrics."""
    root = tmp_path_factory.mktemp("plot") / "store"
    rng = np.random.default_rng(0)
    for operator in ("softmax_pool", "mean_pool"):
        for gain in GAINS:
            for seed in SEEDS:
                acc = rng.uniform(0, 1, STRIDE).round(4).tolist()
                store.write_run(
                    root,
                    {"kind": "train", "operator": operator, "gain": gain, "seed": seed},
                    {
                        "phase_accuracy": acc,
                        "delta_max": max(acc) - min(acc),
                        "support_size": [2, 3],
                    },
                )
    return root


def _line_data(fig):
    """The (x, y) of every line that joins means (the errorbar lines, not the run dots)."""
    lines = [
        (line.get_xdata(), line.get_ydata())
        for line in fig.axes[0].get_lines()
        if line.get_linestyle() == "-"
    ]
    plt.close(fig)
    return lines


def test_means_per_hue_and_x_match_pandas(sweep_store):
    table = store.load(sweep_store)
    fig = sweep_plot.plot_store(sweep_store, "gain", "delta_max", "operator")
    expected = table.groupby(["operator", "gain"])["delta_max"].mean()
    lines = _line_data(fig)
    assert len(lines) == 2
    for (xs, ys), operator in zip(lines, ["mean_pool", "softmax_pool"], strict=True):
        np.testing.assert_allclose(xs, GAINS)
        np.testing.assert_allclose(ys, expected[operator].loc[list(GAINS)].to_numpy())


def test_list_column_long_form_and_entries(sweep_store):
    table = store.load(sweep_store)
    long = sweep_plot.long_table(table, "phase_accuracy")
    assert len(long) == len(table) * STRIDE and sorted(long["phase"].unique()) == [0, 1, 2, 3]
    # the long form's entry at phase 2 is the loader's acc_2 column, run by run
    merged = long[long["phase"] == 2].set_index("hash")["phase_accuracy"]
    pd.testing.assert_series_equal(
        merged.sort_index(), table.set_index("hash")["acc_2"].sort_index(), check_names=False
    )
    fig = sweep_plot.plot_store(table, "phase", "phase_accuracy", "gain")
    (xs, ys), _ = _line_data(fig)
    np.testing.assert_allclose(xs, range(STRIDE))
    np.testing.assert_allclose(ys, [table[table.gain == 8.0][f"acc_{j}"].mean() for j in range(4)])
    fig = sweep_plot.plot_store(table, "gain", "phase_accuracy[1]")
    ((xs, ys),) = _line_data(fig)
    np.testing.assert_allclose(ys, table.groupby("gain")["acc_1"].mean().to_numpy())


def test_plot_verb_writes_a_png_and_names_bad_columns(sweep_store, tmp_path, capsys):
    out = tmp_path / "dm.png"
    argv = ["plot", str(sweep_store), "--x", "gain", "--y", "delta_max", "--hue", "operator"]
    assert main([*argv, "--where", "seed=0", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", str(sweep_store), "--x", "gainz", "--y", "delta_max"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("weakspots plot: error: --x: no column 'gainz'")
    assert main(["plot", str(sweep_store), "--x", "gain", "--y", "phase_accuracy"]) == 2
    assert "--y: phase_accuracy holds a list per run" in capsys.readouterr().err

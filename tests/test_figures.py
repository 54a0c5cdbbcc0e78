"""Smoke tests: every figure's make() draws, headless, from tiny-run results.

The inputs in tests/data/figure_inputs.json are the results and predictions of
`sims.experiments` at the `tiny` size (regenerate with `python tests/test_figures.py`),
so the figures see data of exactly the shape the drivers produce.
"""

import importlib
import json
import sys
from pathlib import Path

import matplotlib
import pytest

from weakspots.sims.experiments import FIGURES

DATA = Path(__file__).parent / "data" / "figure_inputs.json"


@pytest.fixture(scope="module")
def inputs():
    return json.loads(DATA.read_text())


@pytest.mark.parametrize("name", FIGURES)
def test_figure_draws_headless(name, inputs, tmp_path):
    assert matplotlib.get_backend().lower() == "agg"
    module = importlib.import_module(f"weakspots.figures.{name}")
    assert len(module.CAPTION) == 2 and all(module.CAPTION)
    fig = module.make(inputs[name]["results"], inputs[name]["predictions"])
    try:
        axes = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
        assert axes, "no visible axes"
        labelled = [ax for ax in axes if ax.get_xlabel() and ax.get_ylabel()]
        assert labelled, "no panel has labelled axes"
        fig.savefig(tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    finally:
        matplotlib.pyplot.close(fig)


def test_every_figure_has_inputs(inputs):
    assert set(inputs) == set(FIGURES)


def _regenerate(store_dir="/tmp/weakspots_tiny_store"):
    from weakspots.sims import experiments

    size = experiments.SIZES["tiny"]
    out = {}
    for name in FIGURES:
        run, predict, _ = experiments.experiment(name)
        results = run(size, store_dir)
        predictions = predict(size, results, store_dir)
        out[name] = experiments.plain({"results": results, "predictions": predictions})
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    _regenerate(*sys.argv[1:])

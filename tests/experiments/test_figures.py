"""Smoke tests: every figure draws, headless, from tiny-run results; each is found by name.

The inputs in tests/data/figure_inputs.json are the results and predictions of the
experiments at the `tiny` size (regenerate with `python tests/experiments/test_figures.py
[NAME ...]`), so the figures see data of exactly the shape the experiments produce.
"""

import json
import sys
from pathlib import Path

import matplotlib
import pytest

from weakspots import figures
from weakspots.sims import experiments

DATA = Path(__file__).resolve().parents[1] / "data" / "figure_inputs.json"
DRAWN = [e for e in experiments.EXPERIMENTS if e.drawn]


@pytest.fixture(scope="module")
def inputs():
    out = json.loads(DATA.read_text())
    for extra in sorted(DATA.parent.glob("figure_inputs_*.json")):  # one file per figure family
        out.update(json.loads(extra.read_text()))
    return out


@pytest.mark.parametrize("experiment", DRAWN, ids=lambda e: e.name)
def test_figure_draws_headless(experiment, inputs, tmp_path):
    assert matplotlib.get_backend().lower() == "agg"
    name = experiment.name
    drawing = figures.DRAWINGS[name]
    assert len(drawing.CAPTION) == 2 and all(drawing.CAPTION)
    fig = drawing.make(inputs[name]["results"], inputs[name]["predictions"])
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
    assert set(inputs) == {e.name for e in DRAWN}


def test_figures_are_found_by_the_names_of_the_experiments_sims_marks_as_drawn():
    # sims marks an experiment as drawn (it cannot import figures); figures has a drawing
    # for exactly those, by name, each in the module of that name.
    assert set(figures.DRAWINGS) == {e.name for e in DRAWN}
    for name, module in figures.DRAWINGS.items():
        assert module.__name__ == f"weakspots.figures.{name}"
        assert callable(module.make)


def _regenerate(*names, store_dir="/tmp/weakspots_tiny_store"):
    """Recompute the tiny inputs of the experiments `names` (default: every drawn one)
    that figure_inputs.json holds; the other entries are kept."""
    out = json.loads(DATA.read_text()) if DATA.exists() else {}
    chosen = [e for e in DRAWN if e.name in names] if names else DRAWN
    for experiment in chosen:
        results, predictions, _ = experiments.evaluate(experiment, "tiny", store_dir)
        out[experiment.name] = {"results": results, "predictions": predictions}
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":  # python tests/experiments/test_figures.py [NAME ...]
    _regenerate(*sys.argv[1:])

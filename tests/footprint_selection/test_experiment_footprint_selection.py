"""The footprint_selection experiment: its rows pass, are predictions, and can fail."""

import dataclasses

import pytest

from weakspots.sims.experiments import EXPERIMENTS, evaluate
from weakspots.sims.experiments.toy import footprint_selection


def test_registered():
    assert footprint_selection.EXPERIMENT in EXPERIMENTS


@pytest.mark.slow
def test_rows_pass_and_a_wrong_prediction_fails():
    results, predictions, rows = evaluate(footprint_selection.EXPERIMENT, "quick")
    assert len(rows) == 9 and all(r.kind == "prediction" and r.passed for r in rows)
    off = dict(predictions, miss=[p + 0.05 for p in predictions["miss"]])
    assert not all(r.passed for r in footprint_selection.rows(results, off))
    assert dataclasses.is_dataclass(rows[0])

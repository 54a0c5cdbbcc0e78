"""Experiment (e) lm_mitigations: the toy's prediction per trained mitigation, rows that fail
when the measurement says so, the recordings checked against their configs."""

import dataclasses

import numpy as np
import pytest

from weakspots.idealized.decoder.config import LM_OPTIONAL_FIELDS, LMConfig
from weakspots.sims.experiments.decoder.ablation import lm_mitigations, study


def _measured(delta_max, floor=0.02, weights=None):
    return {
        "delta_max": delta_max,
        "delta_max_noise_floor": floor,
        "mean_accuracy": 0.9,
        "parameters": 100,
        "flops_per_step": 1e6,
        "wall_seconds": 10.0,
        "chunking_cost": {"compress_compute": 1.0},
        "seeds": [0, 1],
        "per_seed": {"delta_max": [delta_max] * 2, "mean_accuracy": [0.9] * 2},
        "pooling_weights": [[None, weights]],
    }


def _found(changes, base, mitigated, design="softmax_s8"):
    return {
        "design": design,
        "changes": changes,
        "config": {"operator": "softmax_pool", "stride": 8, "seq_len": 128},
        "base": base,
        "mitigated": mitigated,
    }


def test_toy_predictions_per_mitigation():
    uniform = np.full((2, 8), 1 / 8).tolist()
    sharp = np.full((2, 8), 0.01)
    sharp[:, :2] = (1 - 6 * 0.01) / 2  # phases 2..7 below 1/(2s): uncovered
    entropy = lm_mitigations.toy_prediction(
        _found({"phase_entropy": 0.1}, _measured(0.06), _measured(0.03))
    )
    assert entropy["delta_max"] == 0.0 and entropy["kind"] == "prediction"
    stagger = lm_mitigations.toy_prediction(
        _found({"stagger": True}, _measured(0.06), _measured(0.03))
    )
    assert stagger["delta_max"] == 0.06 and stagger["kind"] == "fit"
    covered = lm_mitigations.toy_prediction(
        _found({"overlap": True}, _measured(0.05, weights=uniform), _measured(0.03))
    )
    assert covered["delta_max"] == 0.05 and covered["kind"] == "fit"
    uncovered = lm_mitigations.toy_prediction(
        _found({"overlap": True}, _measured(0.05, weights=sharp.tolist()), _measured(0.03))
    )
    assert uncovered["delta_max"] == 0.0 and uncovered["kind"] == "prediction"


@pytest.mark.parametrize("gap, holds", [(0.01, True), (0.05, False)])
def test_a_gap_beyond_the_floor_does_not_hold(gap, holds):
    """Phase entropy predicts no gap: a measured gap within the floor (0.02) holds, beyond fails."""
    results = {"trained": {"x": _found({"phase_entropy": 1.0}, _measured(0.06), _measured(gap))}}
    predictions = {"trained": {"x": lm_mitigations.toy_prediction(results["trained"]["x"])}}
    (row,) = lm_mitigations.trained_rows(results, predictions)
    assert row.finding and row.passed == holds
    assert row.sgd == gap and row.tolerance == 0.02


def test_asdict_leaves_out_the_mitigations_only_at_their_defaults():
    plain = LMConfig()
    assert "stagger" not in plain.asdict() and "phase_entropy" not in plain.asdict()
    assert plain.asdict() == {
        k: v for k, v in dataclasses.asdict(plain).items() if k not in LM_OPTIONAL_FIELDS
    }
    assert plain.replace(stagger=True).asdict()["stagger"] is True
    assert (
        plain.replace(operator="softmax_pool", phase_entropy=0.5).asdict()["phase_entropy"] == 0.5
    )


@pytest.mark.parametrize("name", list(study.TRAINED_MITIGATIONS))
def test_recorded_trained_mitigations_match_their_configs(name):
    found = study.recorded_trained_mitigation(name)
    design, changes = study.TRAINED_MITIGATIONS[name]
    assert found["design"] == design and found["changes"] == changes
    for part in ("base", "mitigated"):
        acc, samples = np.asarray(found[part]["phase_accuracy"]), found[part]["samples"]
        assert found[part]["delta_max"] == pytest.approx(np.ptp(acc))
        assert len(acc) == len(samples) == study.config(design, "full").stride


def test_recorded_base_designs_are_the_recorded_intact_reports():
    """The base decoders of the trained mitigations are the cached decoders of `sims.experiments.decoder.ablation.study.STUDY_DESIGNS`; where
    `lm ablate` recorded the design, its intact per-phase accuracy is the same numbers."""
    for name in ("mean_s8_stagger", "softmax_s8_stagger"):
        found = study.recorded_trained_mitigation(name)
        intact = study.recorded(found["design"])
        np.testing.assert_array_equal(found["base"]["phase_accuracy"], intact["phase_accuracy"])
        assert found["base"]["samples"] == intact["samples"]

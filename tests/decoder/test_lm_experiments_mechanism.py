"""Experiments (c) lm_mechanism and (d) lm_toy: the toy's predictions from known weights, the
recorded reports checked against their designs, rows that fail when the measurement says so."""

import json
import math

import numpy as np
import pytest

from weakspots.sims.experiments.decoder.ablation import lm_mechanism, lm_toy, study


def _report(stride=8, operator="softmax_pool", weights=None, acc=None, floor=0.02, **config):
    acc = acc if acc is not None else [0.9] * stride
    return {
        "config": {
            "seq_len": 128, "pairs": 4, "key_len": 1, "value_len": 1, "stride": stride,
            "operator": operator, "d_model": 64, "heads": 2, "steps": 10, "weight_decay": 0.0,
            **config,
        },
        "seeds": [0],
        "phase_accuracy": acc,
        "margins": {"layer": 1, "gain": [[4.0, 4.0]]},
        "pooling_weights": [None, weights],
        "delta_max_noise_floor": floor,
        "verdict": "none",
        "shown_by": "",
    }  # fmt: skip


def test_uniform_pooling_gives_no_toy_weak_spot_and_a_sharp_one_gives_one():
    uniform = _report(weights=[np.full((2, 8), 1 / 8).tolist()])
    assert lm_mechanism.toy_delta_max(uniform) == pytest.approx(0.0, abs=1e-12)
    assert lm_mechanism.toy_delta_max(_report(operator="mean_pool")) == 0.0
    sharp = np.full((2, 8), 0.01)
    sharp[:, :4] = (1 - 4 * 0.01) / 4  # both heads drop phases 4..7
    assert lm_mechanism.toy_delta_max(_report(weights=[sharp.tolist()])) > 0.3


def test_per_channel_weights_average_to_per_phase():
    w = np.random.default_rng(0).random((1, 2, 8, 16))  # (R, H, s, channels) as deepseek_v4
    out = lm_mechanism.compressed_weights(_report(weights=w.tolist()))
    np.testing.assert_allclose(out, w.mean(axis=-1))


def test_a_recording_of_another_config_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(study, "RECORDED", tmp_path)
    fields = {**study.STUDY_DESIGNS["mean_s4"]}
    report = {
        "config": {**json.loads(json.dumps(study.config("mean_s4", "full").__dict__))},
        "phase_accuracy": [0.9, 0.8, 0.9, 0.9],
        "samples": [100] * 4,
        "phase_accuracy_ci": [[0.85, 0.95], [0.75, 0.85], [0.85, 0.95], [0.85, 0.95]],
        "straddle": {
            k: {"accuracy": 0.9, "samples": 100, "ci": [0.85, 0.95]}
            for k in ("same_window", "straddling")
        },
        "components": [],
        "patch": None,
        "margins": None,
        "pooling_weights": None,
    }
    (tmp_path / "ablate_mean_s4.json").write_text(json.dumps(report))
    assert study.recorded("mean_s4")["config"]["stride"] == fields["stride"]
    report["config"]["steps"] += 1
    (tmp_path / "ablate_mean_s4.json").write_text(json.dumps(report))
    with pytest.raises(ValueError, match="steps"):
        study.recorded("mean_s4")


def _toy_results(delta_s4, delta_s8, support_wd):
    flat = [0.9] * 8
    weak = lambda d, s: [0.9] * (s - 1) + [0.9 - d]  # noqa: E731
    uniform = np.full((1, 2, 8), 1 / 8)
    sharp = np.full((1, 2, 8), 1e-3)
    sharp[..., :support_wd] = (1 - (8 - support_wd) * 1e-3) / support_wd
    return {
        "designs": {
            "mean_s8_T64": _report(operator="mean_pool", acc=flat, seq_len=64),
            "mean_s8": _report(operator="mean_pool", acc=weak(delta_s8, 8)),
            "mean_s4": _report(stride=4, operator="mean_pool", acc=weak(delta_s4, 4)),
            "softmax_s8": _report(weights=uniform.tolist()),
            "softmax_s8_wd": _report(weights=sharp.tolist(), weight_decay=0.1),
        }
    }


def _rows(results):
    rows = lm_toy.rows(results, lm_toy.predict(None, results))
    by = lambda word: [r for r in rows if word in r.name or r.config.startswith(word)]  # noqa: E731
    return by


def test_toy_rows_follow_the_measurements():
    by = _rows(_toy_results(delta_s4=0.01, delta_s8=0.10, support_wd=3))
    assert by("mean_s8_T64")[0].passed and not by("mean_s8:")[0].passed  # 0.10 > floor 0.02
    assert by("stride")[0].passed  # s=8's gap beyond s=4's by more than the floor
    support = by("support size")
    assert [r.sgd for r in support] == [8.0, 3.0]  # uniform: all 8 phases; sharp: 3
    assert by("decay")[0].passed
    by = _rows(_toy_results(delta_s4=0.09, delta_s8=0.10, support_wd=8))
    assert not by("stride")[0].passed
    assert not by("decay")[0].passed


def test_toy_table_states_each_rows_outcome():
    results = _toy_results(delta_s4=0.01, delta_s8=0.10, support_wd=3)
    (table,) = lm_toy.tables(results, lm_toy.predict(None, results))
    rows = lm_toy.rows(results, lm_toy.predict(None, results))
    outcomes = [row[-1] for row in table.rows]
    assert len(table.rows) == len(rows) + len(results["designs"])  # + the toy's mechanism rows
    assert outcomes[: len(rows)] == [
        "carried over" if r.passed else "did not carry over" for r in rows
    ]
    assert all(len(row) == len(table.columns) for row in table.rows)
    # mean_s8's weak spot (0.10 against a floor of 0.02) is not the toy's: fixed pooling
    assert outcomes[1] == "did not carry over" and outcomes[2] == "carried over"


def test_toy_critical_chunks_are_the_h2_threshold():
    results = _toy_results(0.0, 0.0, 3)
    nc = lm_toy.predict(None, results)["critical_chunks"]["softmax_s8"]
    assert nc == pytest.approx(1 + math.exp(4.0 / 8))  # THEORY: H >= 2, N_c = 1 + exp(beta/s)


@pytest.mark.slow
def test_mechanism_and_toy_experiments_run_at_tiny_size():
    for experiment in (lm_mechanism.EXPERIMENT, lm_toy.EXPERIMENT):
        size = experiment.size_of("tiny")
        results = experiment.run(size)
        rows = experiment.rows(results, experiment.predict(size, results))
        assert rows and all(math.isfinite(r.predicted) for r in rows)

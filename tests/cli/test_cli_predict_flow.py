"""`weakspots predict` and `weakspots flow`: JSON keys, numbers equal theory and the flow, bad input."""

import dataclasses
import json

import numpy as np
import pytest

from weakspots import theory
from weakspots.cli import main
from weakspots.idealized.metrics import support_size
from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.toy.flow import solve

PREDICT_KEYS = (
    "critical_chunks",
    "critical_gain",
    "growth_rate",
    "uniform_stable",
    "stable_support_sizes",
    "predicted_support_size",
    "predicted_phase_accuracy",
    "predicted_delta_max",
    "specialization_time",
)
FLOW_KEYS = ("times", "pooling_weights", "gain", "loss", "support_size", "specialization_time")
SAMPLES = 8  # support-size starts: enough to exercise the path, quick on 2 cores


def run_json(argv, capsys):
    assert main([*argv, "--json", "--quiet"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_predict_numbers_are_theorys(capsys):
    s, n, gain, dim, scale = 8, 64, 16.0, 64, 1e-3
    out = run_json(
        ["predict", "--stride", "8", "--chunks", "64", "--gain", "16", "--dim", "64"]
        + ["--init-scale", "1e-3", "--samples", str(SAMPLES)],
        capsys,
    )
    assert set(PREDICT_KEYS) <= set(out)
    assert out["critical_chunks"] == pytest.approx(float(theory.critical_chunks(gain, s)))
    assert out["critical_gain"] == pytest.approx(float(theory.critical_gain(n, s)))
    assert out["growth_rate"] == pytest.approx(float(theory.growth_rate(s, n, gain)), rel=1e-12)
    assert out["uniform_stable"] is False
    assert out["stable_support_sizes"] == theory.stable_support_sizes(s, n, gain).tolist()
    sizes, probs, _ = theory.predicted_support_size(s, n, gain, SAMPLES)
    assert out["predicted_support_size"] == int(sizes[np.argmax(probs)])
    k = out["predicted_support_size"]
    accuracy = theory.phase_accuracy(theory.support_weights(s, k), gain, n, dim)
    np.testing.assert_allclose(out["predicted_phase_accuracy"], accuracy, rtol=1e-12)
    assert out["predicted_delta_max"] == pytest.approx(float(theory.delta_max(accuracy)))
    t_star = theory.specialization_time(s, n, gain, scale)
    assert out["specialization_time"] == pytest.approx(t_star, rel=1e-12)
    law = theory.support_size_law(s, n, gain, 1, "mse", scale, samples=SAMPLES)["law"]
    assert out["support_size_law"] == {str(k): pytest.approx(p) for k, p in law.items()}
    # every number names the d it is for: the accuracy at d, the thresholds at d = inf
    assert out["dim_of"]["predicted_delta_max"] == dim and out["dim_of"]["growth_rate"] == "inf"
    assert out["finite_d"]["critical_chunks"] == pytest.approx(
        float(theory.critical_chunks_finite_d(gain, s, dim))
    )
    escape = out["escape_boundary"]
    assert (escape["lr"], escape["batch"], escape["steps"]) == (2.0, 256, 600)
    assert 0.0 <= escape["p_escape"] <= 1.0 and escape["chunks"] is None


def test_predict_below_threshold_and_without_dim(capsys):
    out = run_json(["predict", "--stride", "8", "--chunks", "12", "--samples", "4"], capsys)
    assert out["uniform_stable"] is True and out["specialization_time"] is None
    assert out["predicted_support_size"] == 8 and out["predicted_delta_max"] == 0.0
    assert out["predicted_phase_accuracy"] is None  # needs --dim
    assert out["escape_boundary"] is None and out["finite_d"] is None
    assert out["support_size_law"] == {"8": 1.0}  # uniform is stable: no race


def test_predict_heads_match_predicted_coverage(capsys):
    argv = ["predict", "--stride", "4", "--chunks", "64", "--gain", "8", "--heads", "2"]
    out = run_json([*argv, "--samples", "4"], capsys)
    dist = theory.predicted_coverage(4, 64, 8.0, 2, samples=4)
    top = next(iter(dist))
    assert out["predicted_support_size"] == list(top[0])
    assert out["uncovered_phases"] == top[1]
    assert out["critical_chunks"] == pytest.approx(float(theory.critical_chunks(8.0, 4, 2)))


def test_flow_json_is_solve_of_the_flags_config(capsys):
    argv = ["flow", "--stride", "4", "--chunks", "64", "--gain", "8", "--heads", "2"]
    out = run_json([*argv, "--t1", "300", "--saves", "7", "--init-scale", "0.01"], capsys)
    assert set(FLOW_KEYS) <= set(out)
    weights = np.asarray(out["pooling_weights"])
    assert weights.shape == (7, 2, 4) and np.asarray(out["gain"]).shape == (7, 2)
    assert len(out["times"]) == len(out["loss"]) == 7 and out["times"][-1] == 300.0
    config = FlowConfig(stride=4, chunks=64, gain=8.0, heads=2, t1=300.0, saves=7)
    hist = solve(config).history
    np.testing.assert_allclose(weights, hist.pooling_weights, rtol=1e-12)
    assert out["support_size"] == support_size(weights[-1]).tolist()
    assert out["specialization_time"] == pytest.approx(float(hist.specialization_time))
    assert np.all(np.diff(out["loss"]) <= 1e-12)


def test_flow_table_by_default(capsys):
    argv = ["flow", "--stride", "4", "--chunks", "8", "--heads", "2", "--t1", "10"]
    assert main([*argv, "--saves", "7", "--init-scale", "0.01"]) == 0  # shapes as above
    out = capsys.readouterr().out
    assert "support size per head" in out and "never" in out  # N=8 < N_c: stays uniform


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_flow_dim_integrates_the_finite_d_loss(capsys):
    argv = ["flow", "--stride", "4", "--chunks", "16", "--gain", "8", "--t1", "50"]
    out = run_json([*argv, "--saves", "3", "--init-scale", "0.3", "--dim", "16"], capsys)
    start = np.log(np.asarray(out["pooling_weights"][0]))  # the logits, up to a constant
    # the flow's loss is L_d at d = 16 (theory.finite_d_loss), not L_inf
    expected = theory.finite_d_loss(start, 8.0, 16.0, 16.0)
    assert out["loss"][0] == pytest.approx(float(expected), rel=1e-10)
    assert abs(out["loss"][0] - float(theory.reduced_loss(start, np.array([8.0]), 16.0))) > 1e-3
    assert np.all(np.diff(out["loss"]) <= 1e-12)


def test_a_failed_flow_exits_1_with_one_line(capsys):
    argv = ["flow", "--stride", "4", "--chunks", "8", "--t1", "1e12", "--saves", "5"]
    assert main([*argv, "--max-steps", "64", "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""  # no numbers that look like a result
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--max-steps 64" in lines[0] and "t1" in lines[0]


def test_flow_help_gives_every_flag_a_default():
    from weakspots.cli import build_parser

    parser = build_parser()
    flow_parser = parser._subparsers._group_actions[0].choices["flow"]  # noqa: SLF001
    for action in flow_parser._actions:  # noqa: SLF001
        if action.dest in {f.name for f in dataclasses.fields(FlowConfig)}:
            assert action.help and "default" in action.help, action.dest


@pytest.mark.parametrize(
    ("verb", "flags", "flag"),
    [
        ("predict", ["--gain", "-3"], "--gain"),
        ("predict", ["--heads", "0"], "--heads"),
        ("predict", ["--stride", "0"], "--stride"),
        ("predict", ["--chunks", "1"], "--chunks"),
        ("predict", ["--loss", "hinge"], "--loss"),
        ("predict", ["--dim", "0"], "--dim"),
        ("predict", ["--init-scale", "0"], "--init-scale"),
        ("predict", ["--samples", "0"], "--samples"),
        ("predict", ["--gain", "1e300"], "--gain"),  # raised OverflowError
        ("predict", ["--gain", "6000"], "--gain"),  # exp(gain/stride) overflows
        ("predict", ["--chunks", "10000000000"], "--chunks 10000000000"),  # ran past 90 s
        ("predict", ["--gain", "0.1"], "--gain 0.1"),  # growth rate 6e-7: days of flow
        ("predict", ["--gain", "1e-30", "--dim", "16"], "--gain 1e-30"),  # raised OverflowError
        ("flow", ["--gain", "-3"], "--gain"),
        ("flow", ["--heads", "0"], "--heads"),
        ("flow", ["--t1", "0"], "--t1"),
        ("flow", ["--t1", "inf"], "--t1"),
        ("flow", ["--saves", "1"], "--saves"),
        ("flow", ["--init-scale", "nan"], "--init-scale"),
        ("flow", ["--weight-decay", "-1"], "--weight-decay"),
        ("flow", ["--seed", "x"], "--seed"),
        ("flow", ["--dim", "64", "--heads", "2"], "--dim"),
        ("flow", ["--max-steps", "0"], "--max-steps"),
        ("flow", ["--gain-parametrisation", "exp"], "--gain-parametrisation"),
    ],
)
def test_bad_input_exits_2_with_one_line(verb, flags, flag, capsys):
    try:
        code = main([verb, *flags])
    except SystemExit as exit_:  # argparse's own errors (wrong type) exit from inside parse_args
        code = exit_.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0]

"""`--model induction` on the command line: output fields, the must-show end state, errors."""

import json

import numpy as np
import pytest

from weakspots.cli import main


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_predict_without_positions_gives_the_optimum_and_the_collision_cost(capsys):
    out = _json(capsys, ["predict", "--model", "induction", "--json"])
    assert out["optimal_loss"] == pytest.approx(7.008916426, abs=1e-9)
    assert out["collision_cost"] == pytest.approx(7.012067127 - 7.008916426, abs=2e-9)
    assert sorted(map(tuple, out["optimal_assignments"])) == [(0, 1), (0, 2), (1, 2)]


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["predict", "--model", "induction", "--positions", "0,3"], "--positions"),
        (["predict", "--model", "induction", "--positions", "a"], "--positions"),
        (["predict", "--model", "induction", "--heads", "3", "--positions", "0,1"], "--positions"),
        (["predict", "--model", "induction", "--gate", "relu"], "--gate"),
        (["predict", "--model", "induction", "--eps", "-1"], "--eps"),
        (["flow", "--model", "induction", "--eps", "0.1"], "--eps"),
        (["train", "--gamma", "3"], "--gamma"),
        (["flow", "--model", "induction", "--vocab", "5"], "--vocab"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(capsys, argv, flag):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1


def _one_hot_end(out, stride):
    k, v = np.asarray(out["key_weights"]), np.asarray(out["value_weights"])
    assert k.shape == v.shape == (len(out["positions"]), stride)
    for h, r in enumerate(out["positions"]):
        assert 0 <= r <= stride - 2
        assert k[h].argmax() == r and k[h, r] >= 0.99 and v[h, r + 1] >= 0.99


@pytest.mark.slow
@pytest.mark.parametrize("seed", [11, 12])
def test_flow_ends_one_hot_from_a_small_ball_static_gates(capsys, seed):
    argv = ["flow", "--model", "induction", "--stride", "5", "--heads", "2", "--chunks", "6", "--gamma",
            "5", "--beta", "1.5", "--vocab", "4096", "--init-scale", "0.02", "--t1", "6000",
            "--seed", str(seed), "--json"]
    _one_hot_end(_json(capsys, argv), 5)


@pytest.mark.slow
def test_flow_ends_one_hot_from_a_small_ball_loglinear_gates(capsys):
    argv = ["flow", "--model", "induction", "--gate", "loglinear", "--kappa", "1", "--stride", "4",
            "--heads", "2", "--chunks", "5", "--gamma", "5", "--beta", "2", "--vocab", "300",
            "--init-scale", "0.05", "--t1", "5000", "--contexts", "16", "--seed", "9", "--json"]
    _one_hot_end(_json(capsys, argv), 4)


@pytest.mark.slow
def test_train_reports_positions_and_phase_accuracy(capsys):
    out = _json(capsys, ["train", "--model", "induction", "--steps", "400", "--eval-every", "100",
                         "--lr", "1", "--batch", "64", "--seeds", "2", "--json"])
    assert len(out["runs"]) == 2 and len(out["phase_accuracy"]) == 3
    assert all(len(r["key_weights"]) == 2 for r in out["runs"])


@pytest.mark.slow
def test_a_sweep_of_induction_flows_fills_the_store(tmp_path):
    from weakspots.sims import store

    spec = tmp_path / "spec.toml"
    spec.write_text(
        'kind = "induction_flow"\n[fixed]\nstride = 4\nheads = 2\nt1 = 800.0\nsaves = 5\n'
        "[grid]\nseed = [3, 4]\n"
    )
    assert main(["sweep", str(spec), "--store", str(tmp_path / "store"), "--quiet"]) == 0
    table = store.load(tmp_path / "store")
    assert sorted(table["seed"]) == [3, 4]
    assert all(len(p) == 2 for p in table["positions"])

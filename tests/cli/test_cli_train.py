import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from weakspots.cli import build_parser, main
from weakspots.idealized.toy.config import TrainConfig

TINY = [
    "--stride",
    "4",
    "--chunks",
    "8",
    "--dim",
    "8",
    "--gain",
    "4",
    "--steps",
    "20",
    "--eval-every",
    "10",
    "--eval-samples",
    "32",
    "--batch",
    "16",
]


def test_json_keys(capsys):
    assert main(["train", *TINY, "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "config",
        "phase_accuracy",
        "phase_accuracy_ci",
        "mean_accuracy",
        "delta_max",
        "psc",
        "pooling_weights",
        "support_size",
        "specialization_index",
        "final_loss",
        "wall_seconds",
    ):
        assert key in out
    assert len(out["phase_accuracy"]) == 4
    assert out["config"]["stride"] == 4


def test_seeds_give_lists(capsys):
    assert main(["train", *TINY, "--seeds", "3", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seeds"] == [0, 1, 2]
    assert len(out["phase_accuracy"]) == 3 and len(out["phase_accuracy"][0]) == 4


def test_table_by_default(capsys):
    assert main(["train", *TINY, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "delta_max" in out and "95% CI" in out


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        (["--stride", "0"], "--stride"),
        (["--chunks", "1"], "--chunks"),
        (["--heads", "0"], "--heads"),
        (["--operator", "conv"], "--operator"),
        (["--loss", "hinge"], "--loss"),
        (["--lr", "nan"], "--lr"),
        (["--lr", "-1"], "--lr"),
        (["--gain", "0"], "--gain"),
        (["--gain", "inf"], "--gain"),
        (["--seeds", "0"], "--seeds"),
        (["--stride", "x"], "--stride"),
        (["--operator", "deepseek_v4", "--overlap"], "--overlap: does not apply to deepseek_v4"),
        (["--operator", "deepseek_v4", "--stagger"], "--stagger: does not apply to deepseek_v4"),
        (["--operator", "deepseek_v4", "--rope-anchor", "--rope-dim", "8"], "--rope-anchor: does"),
        (["--rank", "2"], "--rank: applies only to --operator low_rank"),
        (["--rope-dim", "8"], "--rope-dim: rotary channels apply only"),
        (["--overlap", "--stride", "1"], "--overlap: needs --stride >= 2"),
        (["--stagger"], "--stagger: shifts head h"),
        (["--phase-entropy", "0.1", "--operator", "mean_pool"], "--phase-entropy: mean_pool"),
        (["--weight-decay", "0.1"], "--weight-decay: penalises a learned gain"),
        (["--lr", "1e39"], "--lr: must be between"),
        (["--seed", "4294967296"], "--seed: must be an integer < 2**32"),
        (["--chunks", "10000000", "--dim", "10000"], "--eval-samples: training 1 run at once"),
    ],
)
def test_bad_input_exits_2_with_one_line(flags, flag, capsys):
    try:
        code = main(["train", *flags])
    except SystemExit as exit_:  # argparse's own errors (wrong type) exit from inside parse_args
        code = exit_.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0]


def test_a_failed_computation_exits_1_with_one_line(capsys):
    # Diverges at its first step: the error is named, and nothing looks like a result.
    flags = [*TINY, "--operator", "linear", "--lr", "1e38", "--gain", "1e30", "--quiet"]
    assert main(["train", *flags]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("weakspots train: error: TrainingDiverged: training diverged")


def test_bad_input_from_the_shell_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "weakspots", "train", "--heads", "0"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "weakspots train: error: --heads: must be an integer >= 1, got 0"


def test_seeds_summary_across_seeds(capsys):
    assert main(["train", *TINY, "--seeds", "3", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    across = out["across_seeds"]
    per_seed = np.asarray(out["phase_accuracy"])  # (seeds, phases): the existing key, kept
    np.testing.assert_allclose(across["phase_accuracy"]["mean"], per_seed.mean(axis=0))
    phase = across["phase_accuracy"]
    for mean, (lo, hi) in zip(phase["mean"], phase["ci"], strict=True):
        assert 0.0 <= lo <= mean <= hi <= 1.0
    for key in ("mean_accuracy", "delta_max", "psc"):
        assert across[key]["mean"] == pytest.approx(np.mean(out[key]))
        lo, hi = across[key]["ci"]
        assert lo <= across[key]["mean"] <= hi and lo >= 0.0
    assert across["delta_max"]["ci"][1] <= 1.0 and across["mean_accuracy"]["ci"][1] <= 1.0
    assert main(["train", *TINY, "--seeds", "3", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "across 3 seeds" in text and text.count("delta_max") == 2  # seeds table + summary


def test_every_config_field_is_a_train_flag():
    """One name per parameter: sweep specs use TrainConfig's fields, the CLI the same names."""
    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    dests = {a.dest for a in train._actions if a.option_strings} - {"help"}
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert fields <= dests
    # and the model kinds' (idealized.footprint.FootprintTrainConfig, selection.SelectionTrainConfig,
    # idealized.induction.InductionTrainConfig: its own fields, `contexts` for SGD's samples and
    # `head_batches`, a batch per head)
    kinds = {"model", "window", "carry_gain", "decoy_gain", "topk"}
    kinds |= {"vocab", "gamma", "beta", "kappa", "eps", "gate", "contexts", "head_batches"}
    assert dests - fields == {"seeds", "json", "quiet"} | kinds
    for action in train._actions:
        if action.dest in fields:
            assert action.option_strings == ["--" + action.dest.replace("_", "-")]


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("weakspots.cli.train.train_many", interrupted)
    assert main(["train", *TINY, "--quiet"]) == 130
    assert capsys.readouterr().err == "weakspots train: interrupted\n"

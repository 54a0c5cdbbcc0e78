"""`weakspots lm train`: flags, JSON keys, per-seed lists, one-line errors."""

import json

import numpy as np
import pytest

from weakspots.cli import main

TINY = (
    "--seq-len 32 --pairs 2 --key-vocab 8 --value-vocab 8 --filler-vocab 4 --d-model 16 "
    "--layers 1 --heads 2 --rope-dim 4 --window 4 --steps 6 --eval-every 3 --batch 4 --eval-batch 8 "
    "--eval-samples 1"
).split()


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--stride", "0"], "--stride"),
        (["--operator", "avg"], "--operator"),
        (["--seq-len", "130"], "--seq-len"),
        (["--layout", "dense"], "--layout"),
        (["--overlap"], "--overlap"),
        (["--lr", "0"], "--lr"),
        (["--seeds", "0"], "--seeds"),
        (["--heads", "3"], "--heads"),
        (["--stagger", "--heads", "1"], "--stagger"),
        (["--stagger", "--operator", "deepseek_v4"], "--stagger"),
        (["--phase-entropy", "0.1"], "--phase-entropy"),  # mean_pool: fixed weights
        (["--phase-entropy", "-1", "--operator", "softmax_pool"], "--phase-entropy"),
    ],
)
def test_bad_flags_exit_2_with_one_line(flags, flag, capsys):
    assert main(["lm", "train", *flags, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err


@pytest.mark.slow
def test_seeds_give_per_seed_lists_and_a_pooled_summary(capsys):
    assert main(["lm", "train", *TINY, "--seeds", "2", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["seeds"] == [0, 1]
    for key in (
        "phase_accuracy", "phase_accuracy_by_key_phase", "straddle_accuracy", "mean_accuracy",
        "delta_max", "psc", "harmonic_spectrum", "pooling_weights", "final_loss",
        "wall_seconds", "tokens_per_second",
    ):  # fmt: skip
        assert len(out[key]) == 2, key
    assert len(out["phase_accuracy"][0]) == 4
    assert set(out["straddle_accuracy"][0]) == {"same_window", "straddling"}
    assert out["config"]["seq_len"] == 32 and out["config"]["operator"] == "mean_pool"
    pooled = out["pooled"]
    assert pooled["phase_samples"] == [2 * n for n in out["phase_samples"][0]]
    assert len(out["seed_spread"]["mean"]) == 4
    # seeds as clusters: the pooled per-seed accuracies are each seed's own summary's
    assert pooled["interval"] == "seed clusters" and len(pooled["delta_max_ci"]) == 2
    assert pooled["phase_accuracy_per_seed"] == out["phase_accuracy"]
    for acc, (lo, hi) in zip(pooled["phase_accuracy"], pooled["phase_accuracy_ci"], strict=True):
        assert lo <= acc <= hi


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--stride", "0"], "--stride"),
        (["--seeds", "0"], "--seeds"),
        (["--cache", "/proc/no"], "--cache"),
    ],
)
def test_ablate_bad_flags_exit_2_with_one_line(flags, flag, capsys):
    assert main(["lm", "ablate", *TINY, *flags, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_ablate_json_has_effect_and_components_per_phase(capsys):
    args = ["lm", "ablate", *TINY, "--layers", "2", "--json", "--quiet", "--no-patch"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    effect = np.asarray(out["effect"])
    assert effect.shape == (2, 2, 4) and np.asarray(out["effect_ci"]).shape == (2, 2, 4, 2)
    for c in out["components"]:  # a drop is the intact accuracy minus the intervened one
        intact = np.asarray(out["phase_accuracy"])
        np.testing.assert_allclose(np.asarray(c["drop"]), intact - np.asarray(c["accuracy"]))
    assert out["patch"] is None and {"verdict", "shown_by", "margins"} <= set(out)


@pytest.mark.slow
def test_ablate_json_with_patching_and_the_cache(capsys, tmp_path):
    args = ["lm", "ablate", *TINY, "--layers", "2", "--json", "--quiet", "--cache", str(tmp_path)]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["effect"]) == 2 and len(out["effect"][0]) == 2 and len(out["effect"][0][0]) == 4
    assert len(out["effect_ci"][1][1][3]) == 2
    names = [c["name"] for c in out["components"]]
    assert names == [
        "remove sliding window (layer 0)",
        "remove compressed branch (layer 1)",
        "remove RoPE from compressed keys (layer 1)",
    ]
    assert all(len(c["drop"]) == 4 and len(c["drop_ci"]) == 4 for c in out["components"])
    assert out["verdict"] in ("none", "unexplained") or "straddle" in out["verdict"]
    # a second call loads the trained decoder from the cache: the same numbers
    assert main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["effect"] == out["effect"] and again["patch"] == out["patch"]

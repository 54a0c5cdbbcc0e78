"""`weakspots ablate` and `weakspots compare` on a tiny config: JSON keys, shapes, bad flags."""

import json

import numpy as np
import pytest

from weakspots.cli import main
from weakspots.idealized.metrics import wilson_interval
from weakspots.theory.interventions import readout_accuracy

TINY = ["--stride", "4", "--chunks", "16", "--dim", "32", "--steps", "40", "--eval-every", "20"]


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_ablate_json(capsys):
    assert (
        main(["ablate", *TINY, "--heads", "2", "--eval-samples", "128", "--json", "--quiet"]) == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert np.asarray(out["effect"]).shape == (2, 4)
    assert np.asarray(out["pooling_weights"]).shape == (2, 4)
    assert len(out["phase_accuracy"]) == 4
    # The ablation effect is the paired accuracy difference: never more than the accuracy.
    assert np.all(np.asarray(out["effect"]) <= np.asarray(out["phase_accuracy"])[None] + 1e-9)


def test_compare_mean_pool_is_phase_blind(capsys):
    # mean_pool has no phase preference: its accuracy is the uniform-pooling formula's.
    flags = [*TINY, "--eval-samples", "512", "--seeds", "2", "--json", "--quiet"]
    assert main(["compare", "--operators", "mean_pool", *flags]) == 0
    row = json.loads(capsys.readouterr().out)["operators"]["mean_pool"]
    predicted = readout_accuracy(np.full((1, 4), 0.25), 16.0, 16, 32)
    low, high = wilson_interval(predicted, 2 * 512).T
    acc = np.asarray(row["phase_accuracy"])
    assert np.all((acc > low - 0.02) & (acc < high + 0.02))


def test_bad_flags_exit_2(capsys):
    assert main(["ablate", "--offset-ensemble", "0"]) == 2
    assert capsys.readouterr().err.strip().startswith("weakspots ablate: error: --offset-ensemble:")
    assert main(["compare", "--operators", "nope"]) == 2
    assert "--operators" in capsys.readouterr().err

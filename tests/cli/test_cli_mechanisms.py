"""`weakspots predict/train/flow --model footprint|selection`: the must-show outputs against a
brute force of docs/theory.md §9.4 and Monte Carlo of §9.5, and bad input (one line, exit 2)."""

import json
import math

import numpy as np
import pytest

from weakspots.cli import main

Z_TOL = 4.0


def run_json(argv, capsys):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def brute_force_flat(stride, window, chunks, g, g_d):
    """M(phi), m_eff(phi): a context of `chunks` entries walked token by token, flat carry c
    with beta c = g s, key gain beta_D = g_D s, mean pooling (alpha = 1/s), nu = 1."""
    retrieval, logit = [], []
    for phi in range(stride):
        p = 2 * stride + phi  # value at entry 2, key at p - 1
        num = den = 0.0
        for e in range(chunks):
            z, holds = 0.0, False
            for j in range(stride):
                t = e * stride + j
                if 0 <= t - p < window:
                    z += g * stride / stride
                    holds = True
                if t == p - 1:
                    z += g_d * stride / stride
            den += math.exp(z)
            num += math.exp(z) if holds else 0.0
        retrieval.append(num / den)
        logit.append(math.log(num))
    return np.array(retrieval), np.array(logit)


@pytest.mark.parametrize(
    "stride,window,chunks,g,g_d", [(5, 13, 19, 0.37, 0.9), (7, 3, 11, 1.3, 0.0), (4, 8, 23, 0.8, 2.2)]
)
def test_predict_footprint_is_the_brute_force(capsys, stride, window, chunks, g, g_d):
    out = run_json(
        ["predict", "--model", "footprint", "--stride", str(stride), "--window", str(window),
         "--chunks", str(chunks), "--carry-gain", str(g), "--decoy-gain", str(g_d)],
        capsys,
    )
    want_m, want_logit = brute_force_flat(stride, window, chunks, g, g_d)
    assert len(out["phase_logit"]) == stride
    np.testing.assert_allclose(out["phase_logit"], want_logit, rtol=1e-10)
    np.testing.assert_allclose(out["retrieval"], want_m, rtol=1e-10)
    assert out["weakest_phase"] == int(np.argmin(want_m))


def test_predict_selection_is_monte_carlo(capsys):
    # the toy indexer: keys N(0, I/d), pooled with the given weights, query the needle's key
    stride, chunks, topk, dim, samples = 3, 25, 3, 10, 6000
    weights = np.array([3.0, 2.0, 1.0])
    out = run_json(
        ["predict", "--model", "selection", "--stride", str(stride), "--chunks", str(chunks),
         "--topk", str(topk), "--dim", str(dim), "--indexer-weights", "3,2,1"],
        capsys,
    )
    alpha = weights / weights.sum()
    rng = np.random.default_rng(11)
    for phi, p in enumerate(out["miss_probability"]):
        x = rng.standard_normal((samples, chunks, stride, dim)) / math.sqrt(dim)
        score = np.einsum("bcjd,j,bd->bc", x, alpha, x[:, 0, phi])
        miss = ((score[:, 1:] > score[:, :1]).sum(axis=1) >= topk).mean()
        assert abs(miss - p) < Z_TOL * math.sqrt(max(p * (1 - p), 1e-4) / samples)


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_train_and_flow_footprint_run(capsys):
    tiny = ["--model", "footprint", "--stride", "3", "--chunks", "9", "--window", "4"]
    out = run_json(["train", *tiny, "--steps", "4", "--eval-every", "2", "--eval-samples", "64",
                    "--batch", "16", "--quiet"], capsys)
    assert out["config"]["window"] == 4 and len(out["phase_accuracy"]) == 3
    flow = run_json(["flow", *tiny, "--t1", "5", "--saves", "3"], capsys)
    assert len(flow["times"]) == 3
    pick = ["--model", "selection", "--stride", "3", "--chunks", "9", "--topk", "3"]
    out = run_json(["train", *pick, "--steps", "2", "--eval-every", "2", "--eval-samples", "32",
                    "--batch", "8", "--quiet"], capsys)
    assert out["config"]["topk"] == 3
    flow = run_json(["flow", *pick, "--t1", "5", "--saves", "2"], capsys)
    assert np.asarray(flow["pooling_weights"]).shape == (2, 2, 3)  # (times, main+indexer, s)


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["predict", "--model", "footprint", "--window", "0"], "--window"),
        (["predict", "--model", "footprint", "--carry-gain", "-1"], "--carry-gain"),
        (["predict", "--model", "footprint", "--window", "40", "--chunks", "5"], "--chunks"),
        (["predict", "--model", "selection", "--topk", "0"], "--topk"),
        (["predict", "--model", "selection", "--indexer-weights", "1,2"], "--indexer-weights"),
        (["predict", "--model", "tiny"], "--model"),
        (["train", "--window", "3"], "--window"),
        (["flow", "--model", "tiny"], "--model"),
        (["flow", "--model", "selection", "--heads", "2"], "--heads"),
        (["train", "--model", "footprint", "--topk", "3"], "--topk"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, argv, flag):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0]

"""`--task records` (probe/records.py): the paper's position-matched needle over four-token
records, its layout (`--plan`), and a scan of a server with a planted weak residue."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from probe_server import serve, unit_interval

import weakspots
from weakspots.cli import main
from weakspots.probe.design import ProbeConfig, text_trials
from weakspots.probe.records import matched_offsets, moments, plan_rows
from weakspots.probe.tokenizers import ByteTokenizer

QUERY = re.compile(rb"\n([a-z]{2}):$")


class RecordsModel:
    """Answers the queried key's digit, read from its record; when the record's key starts at
    a position = `residue` mod `modulus`, wrong with probability `miss` (a fixed function of
    the prompt)."""

    def __init__(self, modulus=4, residue=1, miss=0.7):
        self.modulus, self.residue, self.miss = modulus, residue, miss

    def __call__(self, ids, max_tokens):
        data = bytes(ids)
        key = QUERY.search(data).group(1)
        at = data.index(key + b":")
        value = data[at + 3 : at + 4].decode()
        if at % self.modulus == self.residue and unit_interval(tuple(ids)) < self.miss:
            value = str((int(value) + 1) % 10)
        return value[:max_tokens], None


@pytest.mark.parametrize("period", [2, 4, 8])
def test_every_residue_group_has_the_same_mean_and_variance_of_the_target_position(period):
    """The search's offsets, checked here by their sums: one mean and one variance for all,
    each group on its own residue, and R^2 offsets per group."""
    groups = matched_offsets(period)
    sums = {(sum(g), sum(x * x for x in g)) for g in groups}
    assert len(sums) == 1 and all(len(g) == period**2 for g in groups)
    assert all({x % period for x in g} == {r} for r, g in enumerate(groups))


def test_the_plan_has_one_query_position_and_equal_moments(tmp_path, capsys):
    plan = tmp_path / "plan.jsonl"
    code = main(["probe", "--backend", "openai", "--url", "http://127.0.0.1:9/v1", "--model", "m",
                 "--tokenizer", "byte", "--task", "records", "--stride", "4,8", "--trials", "64",
                 "--context", "512", "--plan", str(plan), "--quiet"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in plan.read_text().splitlines()]
    assert len(rows) == 8 * 64
    assert len({r["query_position"] for r in rows}) == 1 and len({r["length"] for r in rows}) == 1
    assert {r["residue"] for r in rows} == set(range(8))
    assert all(r["target_position"] % 8 == r["residue"] for r in rows)
    t = {r: np.array([x["target_position"] for x in rows if x["residue"] == r]) for r in range(8)}
    means = {float(v.mean()) for v in t.values()}
    variances = {float(v.var()) for v in t.values()}
    assert len(means) == 1 and len(variances) == 1
    assert moments(rows)[0] == (means.pop(), variances.pop())


def test_the_target_key_is_at_its_position_and_its_digit_is_the_answer():
    config = ProbeConfig(url="http://x/v1", model="m", tokenizer="byte", task="records", stride=4,
                         trials=16, context=300)  # fmt: skip
    trials = text_trials(config, ByteTokenizer())
    assert len(trials) == 64
    for trial in trials[::7]:
        data = bytes(trial.prompt)
        key = QUERY.search(data).group(1)
        assert data.index(key + b":") == trial.needle_index  # the key appears once before the query
        assert data[trial.needle_index + 3 : trial.needle_index + 4].decode() == trial.answer
        assert data.count(key + b":") == 2
    rows = plan_rows(trials)
    assert all(r["query_position"] == len(trials[0].prompt) - 3 for r in rows)


def test_records_find_a_planted_weak_residue():
    server = serve(RecordsModel(modulus=4, residue=1, miss=0.7))
    try:
        report = weakspots.probe(url=server.url, model="weak", tokenizer="byte", task="records",
                                 stride=(4, 8), trials=64, context=256, concurrency=8)  # fmt: skip
    finally:
        server.close()
    assert report["trials"] == 512 and report["failed"] == 0
    four = report["by_stride"]["4"]
    assert four["worst_phase"] == 1 and four["delta_max_p"] < 0.01
    low, high = four["phase_accuracy_ci"][1]
    assert low <= 0.3 <= high  # the planted accuracy 1 - 0.7, inside its Wilson interval
    assert all(four["phase_accuracy"][j] == 1.0 for j in (0, 2, 3))
    eight = report["by_stride"]["8"]
    assert eight["dominant_period"] == 4.0  # residues 1 and 5 weak: period 4 at residue mod 8


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--trials", "10"], "--trials: the records task needs a multiple of 16"),
        (["--stride", "16", "--trials", "256"], "--stride: the records task resolves periods up to 8"),
        (["--context", "40", "--trials", "16"], "--context: "),
        (["--task", "passkey", "--plan", "x"], "--plan: applies to --task records"),
    ],
)  # fmt: skip
def test_bad_records_input_is_refused_in_one_line(tmp_path, capsys, flags, message):
    args = ["probe", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--tokenizer", "byte",
            "--task", "records", "--stride", "4", "--trials", "16", "--context", "256",
            "--plan", str(tmp_path / "p"), "--quiet"]  # fmt: skip
    code = main(args + flags)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err, err


def test_the_deepseek_profiles_are_the_papers_counts_with_their_wilson_bounds():
    """The shipped reference data: accuracy = correct / n, and the bounds recomputed here
    from the counts (`idealized.metrics.wilson_interval`), to the data's 0.01 points."""
    from weakspots.idealized.metrics import wilson_interval
    from weakspots.probe.records import deepseek_profiles

    models = deepseek_profiles()["models"]
    assert [m["S"] for m in models] == [4, 4, 4, 4, 2] and all(len(m["acc"]) == 8 for m in models)
    for m in models:
        for c, acc, lo, hi in zip(m["correct"], m["acc"], m["lo"], m["hi"], strict=True):
            assert abs(100 * c / m["n"] - acc) < 0.006
            low, high = wilson_interval(c / m["n"], m["n"])
            assert abs(100 * low - lo) < 0.011 and abs(100 * high - hi) < 0.011
    flash = next(m for m in models if m["name"] == "DeepSeek-V4-Flash-Base")
    assert flash["correct"][3] == 76 and round(flash["gap"], 1) == 40.2  # PAPER.md section 2


def test_a_scan_is_drawn_beside_the_deepseek_profiles(tmp_path):
    server = serve(RecordsModel(modulus=4, residue=1, miss=0.7))
    try:
        code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                     "--task", "records", "--stride", "4", "--trials", "16", "--context", "160",
                     "--figures", str(tmp_path), "--quiet"])  # fmt: skip
    finally:
        server.close()
    assert code == 0 and (tmp_path / "probe_records_deepseek.png").stat().st_size > 10_000

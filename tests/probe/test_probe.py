"""weakspots probe against a local OpenAI-compatible server with known weak spots.

The server (`tests/probe_server.py`, standard library, in a thread) serves a synthetic
byte-level model that misses the pass key with a known probability at one needle phase
and always at one tail phase, so the true per-phase accuracies are known in closed form.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from interruptible import interruptible
from probe_server import WeakSpotModel, prompt_hash, serve, unit_interval

import weakspots
from weakspots.cli import main
from weakspots.idealized import metrics
from weakspots.probe.design import FILLER, PASSKEY_QUESTION, ProbeConfig, text_trials
from weakspots.probe.report import profile
from weakspots.probe.tokenizers import ByteTokenizer

ROOT = Path(__file__).resolve().parents[2]
S = 4
MODEL = WeakSpotModel(stride=S, needle_phase=1, needle_miss=0.6, tail_phase=3)


@pytest.fixture
def server():
    srv = serve(MODEL, name="weak")
    yield srv
    srv.close()


def _scan(url, **fields):
    base = dict(url=url, model="weak", tokenizer="byte", stride=(S,), context=(384,), trials=48)
    return weakspots.probe(**{**base, **fields}, backoff=0.0)


# ----------------------------------------------------------------------------- design


@pytest.mark.parametrize("task", ["passkey", "kv"])
def test_prompts_put_the_answer_and_the_end_at_the_planned_phases(task):
    config = ProbeConfig(url="u", model="m", task=task, stride=(2, 4, 8), context=(400, 433),
                         depth=(0.0, 0.5, 1.0), trials=9, seed=3)  # fmt: skip
    trials = text_trials(config, ByteTokenizer())
    assert len(trials) == 2 * 3 * 9 * 8
    pattern = re.compile(r"The pass key is (\d+)\." if task == "passkey" else r"is (\d+)\.")
    for t in trials:
        text = bytes(t.prompt).decode()
        c = t.coordinates
        # the answer's first occurrence, found in the text independently of the design
        if task == "passkey":
            first = pattern.search(text).start(1)
        else:
            name = re.search(r"value of key (\w+)\? ", text).group(1)
            first = text.index(f"key {name} is ") + len(f"key {name} is ")
        assert first == t.needle_index
        assert text[first:].startswith(t.answer + ".")
        assert t.needle_index % 8 == c["needle_shift"] and len(t.prompt) % 8 == c["tail_shift"]
        assert len(t.prompt) <= c["context"]
        assert text.endswith("The pass key is" if task == "passkey" else f"key {name} is")
    # needle and tail phases are crossed: each (k, t) pair once in every 8 groups of a cell
    cell = [t for t in trials if t.coordinates["context"] == 400 and t.coordinates["depth"] == 0.5]
    pairs = [(t.coordinates["needle_shift"], t.coordinates["tail_shift"]) for t in cell[:64]]
    assert sorted(pairs) == [(k, j) for k in range(8) for j in range(8)]
    # deterministic from the seed
    again = text_trials(config, ByteTokenizer())
    assert [t.prompt for t in again] == [t.prompt for t in trials]
    other = text_trials(config.replace(seed=4), ByteTokenizer())
    assert [t.prompt for t in other] != [t.prompt for t in trials]


@pytest.mark.parametrize("task", ["passkey", "kv"])
def test_the_phases_move_by_whole_sentences_and_the_ending_is_the_same_for_every_tail(task):
    """No run of a repeated token, no cut sentence: with the task's own pieces taken out,
    a prompt is whole filler sentences; a group's prompts end with the same text (two whole
    sentences and the question) whatever their phases; the needle and question are
    separated from the filler as the tokenizer sees them (the text encodes to the ids)."""
    config = ProbeConfig(url="u", model="m", task=task, stride=(4, 8), context=(512,),
                         depth=(0.0, 0.5, 1.0), trials=8, seed=1)  # fmt: skip
    trials = text_trials(config, ByteTokenizer())
    sentences = "|".join(re.escape(f) for f in FILLER)
    task_pieces = re.compile(r" The pass key is \d+\. Remember it\. \d+ is the pass key\.| What is "
                             r"the pass key\? The pass key is$| The value of key \w+ is \d+\.| What"
                             r" is the value of key \w+\? The value of key \w+ is$")  # fmt: skip
    for t in trials:
        assert t.text == bytes(t.prompt).decode() and t.natural
        assert re.fullmatch(f"(?:{sentences})*", task_pieces.sub("", t.text)), t.text
        assert "  " not in t.text
    for block in {t.block for t in trials}:
        group = [t.text for t in trials if t.block == block]
        assert len({t.coordinates["tail_shift"] for t in trials if t.block == block}) == 8
        common = os.path.commonprefix([g[::-1] for g in group])[::-1]
        question = PASSKEY_QUESTION if task == "passkey" else " What is the value"
        before_question = common[: common.index(question)]
        # the shared ending holds two whole sentences before the question (more may agree)
        assert re.search(f"(?:{sentences}){{2}}$", before_question), (before_question, group)


def test_the_control_design_moves_no_position():
    config = ProbeConfig(url="u", model="m", stride=(4,), context=(400,), trials=8, control=True)
    trials = text_trials(config, ByteTokenizer())
    scan = text_trials(config.replace(control=False), ByteTokenizer())
    assert {(t.needle_index % 4, len(t.prompt) % 4) for t in trials} == {(0, 0)}
    assert {t.needle_index for t in trials if t.block == 3} == {scan[3 * 4].needle_index}
    # the shifts' filler is drawn per label as in the scan: a group's prompts differ in text
    # (two labels may draw the same short filler: most, not all, differ)
    assert sum(len({t.text for t in trials if t.block == b}) for b in range(8)) >= 3 * 8
    assert [t.answer for t in trials] == [t.answer for t in scan]


def test_too_short_a_context_is_refused_naming_the_flag(server, capsys):
    code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                 "--context", "60", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("weakspots probe: error: --context:") and "\n" not in err


# ----------------------------------------------------------------------------- statistics


def test_profile_statistics_against_direct_computation():
    rng = np.random.default_rng(0)
    labels = np.tile(np.arange(4), 30)
    blocks = np.repeat(np.arange(30), 4)
    correct = rng.random(labels.size) < np.array([0.9, 0.5, 0.9, 0.9])[labels]
    out = profile(labels, correct, blocks, 4, seed=1)
    acc = np.array([correct[labels == j].mean() for j in range(4)])
    np.testing.assert_allclose(out["phase_accuracy"], acc)
    for j in range(4):
        np.testing.assert_allclose(out["phase_accuracy_ci"][j], metrics.wilson_interval(acc[j], 30))
    assert out["delta_max"] == pytest.approx(acc.max() - acc.min())
    assert out["psc"] == pytest.approx(metrics.phase_sensitivity(acc))
    assert out["worst_phase"] == int(np.argmin(acc)) and out["delta_max_p"] < 0.01
    lo, hi = out["delta_max_ci"]
    assert lo <= out["delta_max"] <= hi
    # no phase effect: a p-value that is not small (outcomes independent of the labels)
    null = profile(labels, rng.random(labels.size) < 0.7, blocks, 4, seed=1)
    assert null["delta_max_p"] > 0.05
    # constant outcomes: delta_max 0, every permutation ties, p = 1
    flat = profile(labels, np.ones(labels.size, bool), blocks, 4)
    assert flat["delta_max"] == 0.0 and flat["delta_max_p"] == 1.0


# ----------------------------------------------------------------------------- (a) weak spots


def test_probe_finds_the_servers_needle_and_tail_weak_spots(server):
    # Each 95% interval below covers its truth with probability 0.95, so some seeds miss
    # one: at seed 0 of this design the tail's delta_max interval starts 0.004 above 0.85.
    report = _scan(server.url, stride=(S, 2), seed=1)
    n = 48 * S
    assert report["trials"] == n and report["failed"] == 0
    # the truth, from the model's rule and the balanced design
    needle_true = [np.mean([MODEL.accuracy(k, t) for t in range(S)]) for k in range(S)]
    tail_true = [np.mean([MODEL.accuracy(k, t) for k in range(S)]) for t in range(S)]
    for true, acc, ci in zip(needle_true, report["phase_accuracy"], report["phase_accuracy_ci"],
                             strict=True):  # fmt: skip
        assert ci[0] <= true <= ci[1], (true, acc, ci)
    for true, ci in zip(tail_true, report["tail_phase_accuracy_ci"], strict=True):
        assert ci[0] <= true <= ci[1]
    assert report["tail_phase_accuracy"][3] == 0.0  # the tail phase that always misses
    # the server gives -0.1 per token of a max_tokens-long continuation (answer + 2 tokens)
    assert report["phase_mean_logprob"] == pytest.approx([-0.1 * (5 + 2)] * S)
    assert report["worst_phase"] == 1 and report["tail_worst_phase"] == 3
    lo, hi = report["delta_max_ci"]
    assert lo <= max(needle_true) - min(needle_true) <= hi
    lo, hi = report["tail_delta_max_ci"]
    assert lo <= max(tail_true) - min(tail_true) <= hi
    assert report["delta_max_p"] < 0.01 and report["tail_delta_max_p"] < 0.01
    assert report["dominant_period"] in (2.0, 4.0) and report["tail_psc"] > report["psc"] > 0
    # stride 2 from the same scan: each phase pools two of stride 4's (balanced design)
    two = report["by_stride"]["2"]
    four = np.asarray(report["phase_accuracy"])
    np.testing.assert_allclose(two["phase_accuracy"], [four[0::2].mean(), four[1::2].mean()])
    assert sum(two["phase_samples"]) == n


def test_the_kv_task_finds_the_same_weak_spots(server):
    report = _scan(server.url, task="kv", facts=3, trials=32)
    needle_true = [np.mean([MODEL.accuracy(k, t) for t in range(S)]) for k in range(S)]
    for true, ci in zip(needle_true, report["phase_accuracy_ci"], strict=True):
        assert ci[0] <= true <= ci[1]
    assert report["worst_phase"] == 1 and report["tail_worst_phase"] == 3
    assert report["tail_phase_accuracy"][3] == 0.0 and report["trials"] == 32 * S


def test_a_server_without_weak_spots_shows_none(server):
    flat = serve(WeakSpotModel(stride=S, needle_miss=0.0, tail_phase=None), name="weak")
    try:
        report = _scan(flat.url, trials=8)
    finally:
        flat.close()
    assert report["phase_accuracy"] == [1.0] * S and report["tail_phase_accuracy"] == [1.0] * S
    assert report["delta_max"] == 0.0 and report["delta_max_p"] == 1.0


def test_the_server_tokenizer_gives_the_byte_tokenizers_prompts(server):
    byte_server = serve(MODEL, name="weak", tokenize=lambda text: list(text.encode()))
    try:
        via_server = _scan(byte_server.url, tokenizer="server", trials=6)
        via_bytes = _scan(byte_server.url, tokenizer="byte", trials=6)
    finally:
        byte_server.close()
    assert via_server["phase_accuracy"] == via_bytes["phase_accuracy"]
    assert via_server["trials"] == 6 * S


# ----------------------------------------------------------------------------- (b) flaky


def test_a_flaky_server_loses_nothing_and_failures_are_not_scored(tmp_path, server):
    def flaky(ids, attempt):
        u = unit_interval("flaky", tuple(ids))
        if u < 0.05:
            return 500  # always: these trials end failed
        if u < 0.35 and attempt <= 2:
            return 429 if u < 0.2 else 503
        return None

    broken = serve(MODEL, name="weak", flaky=flaky)
    try:
        report = _scan(broken.url, trials=24, store=str(tmp_path / "s"), max_retries=3)
        requests, answered = dict(broken.requests), dict(broken.answered)
    finally:
        broken.close()
    clean = _scan(server.url, trials=24, store=str(tmp_path / "clean"))
    planned = 24 * S
    doomed = {h for h in requests if answered.get(h, 0) == 0}
    assert report["trials"] + report["failed"] == planned
    assert report["failed"] == len(doomed) > 0
    assert all(requests[h] == 4 for h in doomed)  # the first try and 3 retries
    assert all(answered[h] == 1 for h in answered)  # each answer asked for until it came, once
    table = weakspots.load(tmp_path / "s")
    assert len(table) == planned and int(table["failed"].sum()) == len(doomed)
    assert set(table.loc[table["failed"], "prompt_sha256"]) == doomed
    assert table.loc[table["failed"], "correct"].isna().all()
    # every scored trial is scored as a clean server scores it
    ok = table[~table["failed"].astype(bool)].set_index("prompt_sha256")["correct"]
    reference = weakspots.load(tmp_path / "clean").set_index("prompt_sha256")["correct"]
    assert report["trials"] == len(ok) and clean["trials"] == planned
    assert (ok == reference[ok.index]).all()


# ----------------------------------------------------------------------------- (c) SIGKILL, resume


def _cli(url, store, *extra):
    return [sys.executable, "-m", "weakspots", "probe", "--backend", "openai", "--url", url,
            "--model", "weak", "--tokenizer", "byte", "--stride", "4", "--context", "384",
            "--trials", "30", "--seed", "7", "--store", str(store), "--concurrency", "3",
            "--json", "--quiet", *extra]  # fmt: skip


def _env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "WEAKSPOTS_JAX_CACHE": "off"}


@pytest.mark.slow
def test_sigkill_then_resume_asks_no_stored_trial_again_and_gives_the_same_table(tmp_path):
    slow = serve(MODEL, name="weak", delay=0.03)
    store = tmp_path / "store"
    try:
        child = subprocess.Popen(_cli(slow.url, store), env=_env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.time() + 60
        while time.time() < deadline and len(list((store / "runs").glob("*.json"))) < 25:
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        before = weakspots.load(store)
        stored = set(before["prompt_sha256"])
        assert 25 <= len(stored) < 120
        asked_before = dict(slow.requests)
        resumed = subprocess.run(_cli(slow.url, store, "--resume"), env=_env(),
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        asked_after = dict(slow.requests)
    finally:
        slow.close()
    assert all(asked_after[h] == asked_before[h] for h in stored)  # no stored trial asked again
    assert len(set(asked_before) - stored) <= 3  # a kill loses at most the requests in flight
    report = json.loads(resumed.stdout)
    assert report["trials"] == 120 and report["failed"] == 0 and report["unasked"] == 0
    fresh = serve(MODEL, name="weak")
    try:
        clean = weakspots.probe(url=fresh.url, model="weak", tokenizer="byte", stride=4,
                                context=384, trials=30, seed=7)  # fmt: skip
    finally:
        fresh.close()
    for key in ("phase_accuracy", "phase_accuracy_ci", "tail_phase_accuracy",
                "tail_phase_accuracy_ci", "delta_max", "tail_delta_max", "delta_max_ci",
                "delta_max_p", "psc", "buckets"):  # fmt: skip
        assert report[key] == clean[key], key
    assert len(weakspots.load(store)) == 120


# ----------------------------------------------------------------------------- (d) refusals


def test_an_unreachable_server_is_refused_in_one_line_before_any_trial(tmp_path, capsys):
    code = main(["probe", "--url", "http://127.0.0.1:9/v1", "--model", "weak", "--tokenizer",
                 "byte", "--store", str(tmp_path / "s"), "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith("weakspots probe: error: --url: cannot reach the server")
    assert not list((tmp_path / "s" / "runs").glob("*.json"))


def test_a_tokenizer_that_does_not_match_the_model_is_refused_before_any_trial(capsys):
    shifted = serve(MODEL, name="weak", tokenize=lambda text: [b + 3 for b in text.encode()])
    try:
        code = main(["probe", "--url", shifted.url, "--model", "weak", "--tokenizer", "byte",
                     "--quiet"])  # fmt: skip
        asked = sum(shifted.requests.values())
    finally:
        shifted.close()
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and asked == 0
    assert err.startswith("weakspots probe: error: --tokenizer: byte does not match")


def test_a_store_holding_the_scan_needs_resume(tmp_path, server, capsys):
    store = str(tmp_path / "s")
    _scan(server.url, trials=2, store=store)
    code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                 "--context", "384", "--trials", "2", "--store", store, "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("weakspots probe: error: --store:") and "--resume" in err
    asked = sum(server.requests.values())
    again = _scan(server.url, trials=2, store=store, resume=True)
    assert sum(server.requests.values()) == asked and again["trials"] == 2 * S


@pytest.mark.slow
def test_ctrl_c_ends_the_probe_in_one_line_with_code_130(tmp_path):
    slow = serve(MODEL, name="weak", delay=0.05)
    try:
        child = subprocess.Popen(interruptible(_cli(slow.url, tmp_path / "s")), env=_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.time() + 60
        while time.time() < deadline and sum(slow.requests.values()) < 3:
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    finally:
        slow.close()
    assert child.returncode == 130
    assert err.strip().splitlines() == ["weakspots probe: interrupted"]


def test_prompt_hash_is_the_stores_prompt_key():
    trial = text_trials(ProbeConfig(url="u", model="m", context=(200,), trials=1),
                        ByteTokenizer())[0]  # fmt: skip
    from weakspots.probe.run import trial_key

    key = trial_key({"backend": "openai", "model": "m"}, "byte", ProbeConfig(url="u", model="m"),
                    trial)  # fmt: skip
    assert key["prompt_sha256"] == prompt_hash(trial.prompt)


def test_figures_are_written_for_every_stride(tmp_path, server, capsys):
    code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                 "--stride", "2,4", "--context", "256,320", "--depth", "0.2,0.8", "--trials", "2",
                 "--figures", str(tmp_path / "fig"), "--json", "--quiet"])  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["trials"] == 2 * 2 * 2 * 4
    names = sorted(Path(p).name for p in report["figures"])
    assert names == sorted(f"probe_phase{k}_s{s}.png" for s in (2, 4)
                           for k in ("", "_depth", "_context"))  # fmt: skip
    assert all(Path(p).stat().st_size > 1000 for p in report["figures"])
    assert report["by_depth"]["values"] == [0.2, 0.8]
    assert sum(map(sum, report["by_context"]["phase_samples"])) == report["trials"]


def test_the_table_names_the_weak_phases(server, capsys):
    code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                 "--context", "384", "--trials", "24", "--quiet"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "needle: delta_max" in out and "worst phase 1" in out
    assert re.search(r"tail: delta_max .* worst phase 3", out)


def test_timeouts_are_retried_and_rejections_are_not(tmp_path):
    def flaky(ids, attempt):
        return 400 if unit_interval("reject", tuple(ids)) < 0.5 else None

    hanging = serve(MODEL, name="weak", delay=1.0)
    rejecting = serve(MODEL, name="weak", flaky=flaky)
    try:
        slow = _scan(hanging.url, trials=1, timeout=0.2, max_retries=1, concurrency=4)
        asked_slow = dict(hanging.requests)
        picky = _scan(rejecting.url, trials=4, max_retries=3)
        asked_picky = dict(rejecting.requests)
    finally:
        hanging.close()
        rejecting.close()
    assert slow["failed"] == S and slow["trials"] == 0
    assert all(n == 2 for n in asked_slow.values())  # the first try and one retry, each timed out
    assert "timeout" in slow["failed_trials"][0]["error"].lower()
    assert picky["failed"] + picky["trials"] == 4 * S and picky["failed"] > 0
    assert all(n == 1 for n in asked_picky.values())  # a 400 is not worth a retry
    assert all(f["error"].startswith("HTTP 400") for f in picky["failed_trials"])


def test_weakspots_probe_is_the_package_and_the_function():
    script = (
        "import weakspots, weakspots.probe.design as d\n"
        "assert callable(weakspots.probe) and weakspots.probe.ProbeConfig is d.ProbeConfig\n"
        "assert 'probe' in dir(weakspots)\n"
        "try:\n    weakspots.probe(url='u')\nexcept Exception as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "--model: the openai backend needs --model"


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--depth", "1.5"], "--depth"),
        (["--stride", "0"], "--stride"),
        (["--trials", "0"], "--trials"),
        (["--task", "essay"], "--task"),
        (["--backend", "vllm"], "--backend"),
        (["--prompt", "json"], "--prompt"),
        (["--dtype", "float8"], "--dtype"),
        (["--chat"], "--chat"),
        (["--stride", "4096", "--context", "512"], "--context"),
        (["--tokenizer", "/no/such/dir"], "--tokenizer"),
        (["--context", "60"], "--context"),
        (["--url", "localhost:8000/v1"], "--url"),
        (["--max-retries", "-1"], "--max-retries"),
        (["--timeout", "0"], "--timeout"),
        (["--task", "recall", "--checkpoint", "/no/such.npz"], "--checkpoint"),
        (["--bos", "yes"], "--bos"),
        (["--concurrency", "0"], "--concurrency"),
    ],
)
def test_bad_flags_are_refused_in_one_line_naming_the_flag(server, capsys, flags, flag):
    code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                 "--quiet", *flags])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith(f"weakspots probe: error: {flag}")
    assert sum(server.requests.values()) == 0


def test_resume_asks_the_failed_trials_again_and_only_those(tmp_path):
    down = {"on": True}

    def flaky(ids, attempt):
        return 503 if down["on"] and unit_interval("down", tuple(ids)) < 0.25 else None

    srv = serve(MODEL, name="weak", flaky=flaky)
    store = str(tmp_path / "s")
    try:
        first = _scan(srv.url, trials=8, store=store, max_retries=0)
        asked = dict(srv.requests)
        down["on"] = False
        second = _scan(srv.url, trials=8, store=store, resume=True)
        again = {h: n - asked.get(h, 0) for h, n in srv.requests.items() if n != asked.get(h, 0)}
    finally:
        srv.close()
    failed = {f["hash"] for f in first["failed_trials"]}
    assert first["failed"] > 0 and second["failed"] == 0 and second["trials"] == 8 * S
    assert len(again) == first["failed"] and set(again.values()) == {1}
    table = weakspots.load(store)
    assert len(table) == 8 * S and not table["failed"].astype(bool).any()
    assert failed <= set(table["hash"])


def test_one_scan_at_period_64_resolves_every_stride_and_finds_the_period():
    """A weak spot at phase 5 mod 8: at stride 64 the dominant period is 8, at 4 the weak
    phase is 1 with half the trials missing, at 8 it is phase 5 alone; 8 groups cross the
    needle and tail phases fully at strides 4 and 8 (no tail effect there), not at 64."""
    eight = serve(WeakSpotModel(stride=8, needle_phase=5, needle_miss=1.0, tail_phase=None),
                  name="weak")  # fmt: skip
    try:
        report = _scan(eight.url, stride=(4, 8, 64), context=(512,), trials=8, concurrency=8)
    finally:
        eight.close()
    by = report["by_stride"]
    assert report["period"] == 64 and report["trials"] == 8 * 64
    assert by["8"]["phase_accuracy"] == [1.0] * 5 + [0.0] + [1.0] * 2
    assert by["4"]["phase_accuracy"] == [1.0, 0.5, 1.0, 1.0]
    assert by["64"]["dominant_period"] == 8.0 and by["64"]["phase_samples"] == [8] * 64
    assert by["8"]["tail_delta_max"] == 0.0 and by["4"]["tail_delta_max"] == 0.0
    assert by["8"]["crossed"] and by["4"]["crossed"] and not by["64"]["crossed"]
    assert by["8"]["tail_delta_max_p"] == 1.0


def test_a_flat_profile_has_no_dominant_period():
    """All wrong (or all right) at every phase: no harmonic beyond the mean, so no period;
    one weak phase in four at s = 8 has period 4."""
    from weakspots.probe.report import profile

    labels = np.tile(np.arange(8), 6)
    blocks = np.repeat(np.arange(6), 8)
    for value in (False, True):
        flat = profile(labels, np.full(labels.size, value), blocks, 8)
        assert flat["dominant_period"] is None
    planted = profile(labels, labels % 4 != 1, blocks, 8)
    assert planted["dominant_period"] == 4.0

"""The probe against recorded replies of llama.cpp's `llama-server` and llama-cpp-python's
server (`tests/probe_server.py`, `dialect=`): their tokenize endpoints, text prompts
checked by a round trip, their log-probability formats and their validation errors; and
the control design on the fake server."""

from __future__ import annotations

import numpy as np
import pytest
from probe_server import WeakSpotModel, serve

import weakspots
from weakspots.cli import main
from weakspots.probe.design import ProbeConfig, text_trials
from weakspots.probe.tokenizers import ByteTokenizer

S = 4
MODEL = WeakSpotModel(stride=S, needle_phase=1, needle_miss=0.6, tail_phase=3)


def _bytes(text: str) -> list[int]:
    return list(text.encode())


def _scan(url, **fields):
    base = dict(url=url, model="weak", tokenizer="server", stride=(S,), context=(384,), trials=16)
    return weakspots.probe(**{**base, **fields}, backoff=0.0)


def _truth():
    needle = [np.mean([MODEL.accuracy(k, t) for t in range(S)]) for k in range(S)]
    tail = [np.mean([MODEL.accuracy(k, t) for k in range(S)]) for t in range(S)]
    return needle, tail


def _covers(report):
    needle, tail = _truth()
    for true, ci in zip(needle, report["phase_accuracy_ci"], strict=True):
        assert ci[0] <= true <= ci[1]
    for true, ci in zip(tail, report["tail_phase_accuracy_ci"], strict=True):
        assert ci[0] <= true <= ci[1]
    assert report["tail_phase_accuracy"][3] == 0.0 and report["worst_phase"] == 1


def test_llama_server_content_dialect_and_its_logprobs():
    """llama-server's /tokenize answers {"prompt": ...} with no tokens: that is no endpoint,
    and the probe goes on to {"content": ...}; its logprobs.content[] are read."""
    server = serve(MODEL, name="weak", tokenize=_bytes, dialect="llama-server")
    try:
        report = _scan(server.url)
    finally:
        server.close()
    assert report["trials"] == 16 * S and report["failed"] == 0 and report["tokenizer"] == "server"
    _covers(report)
    assert report["phase_mean_logprob"] == pytest.approx([-0.1 * (5 + 2)] * S)


def test_llama_cpp_python_takes_text_checked_by_a_round_trip_with_its_bos():
    """llama-cpp-python's /extras/tokenize ({"input"}) puts a BOS first, and its completions
    take text only: the probe sends text (auto), counts the BOS in every position, and finds
    the weak spots at their phases (a position off by the BOS would move both by one)."""
    server = serve(MODEL, name="weak", tokenize=_bytes, dialect="llama-cpp-python", bos=(1,))
    try:
        report = _scan(server.url)
        asked = dict(server.requests)
    finally:
        server.close()
    assert report["trials"] == 16 * S and report["failed"] == 0
    assert all(n == 1 for n in asked.values()) and len(asked) == 16 * S
    _covers(report)


def test_a_text_whose_round_trip_differs_is_refused_not_scored():
    """A server tokenizer that joins "n. T" (across two pieces) into one id: prompts with that
    boundary would not reach the model as built, so they fail without being sent."""

    def joining(text: str) -> list[int]:
        out = []
        for i, part in enumerate(text.split("n. T")):
            out += ([] if i == 0 else [300]) + list(part.encode())
        return out

    server = serve(MODEL, name="weak", tokenize=joining, dialect="llama-cpp-python")
    config = ProbeConfig(url=server.url, model="weak", tokenizer="byte", stride=(S,),
                         context=(384,), trials=16)  # fmt: skip
    try:
        report = weakspots.probe(config, backoff=0.0)
        asked = dict(server.requests)
    finally:
        server.close()
    trials = text_trials(config, ByteTokenizer())
    joined = {(t.coordinates["group"], t.coordinates["needle_shift"]) for t in trials if "n. T" in t.text}
    failed = {(f["group"], f["needle_shift"]) for f in report["failed_trials"]}
    assert 0 < len(joined) < len(trials)
    assert report["failed"] == len(joined) and report["trials"] == len(trials) - len(joined)
    assert all(f["error"].startswith("round trip") for f in report["failed_trials"])
    assert failed <= joined
    assert len(asked) == len(trials) - len(joined)  # the refused ones were never sent


def test_token_ids_to_llama_cpp_python_fail_once_each_and_the_command_exits_1(capsys):
    """Its HTTP 500 "Input should be a valid string" is a validation error: not retried; a
    scan that scored nothing ends with one line and a non-zero code."""
    server = serve(MODEL, name="weak", tokenize=_bytes, dialect="llama-cpp-python")
    try:
        code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                     "--prompt", "ids", "--context", "256", "--trials", "2", "--quiet",
                     "--backoff", "0"])  # fmt: skip
        asked = dict(server.requests)
    finally:
        server.close()
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert err.startswith("weakspots probe: error: no trial scored: all 8 failed")
    assert "HTTP 500" in err and "valid string" in err
    assert len(asked) == 2 * S and set(asked.values()) == {1}


def test_text_prompts_need_a_tokenize_endpoint(capsys):
    server = serve(MODEL, name="weak")  # no tokenizer at all
    try:
        code = main(["probe", "--url", server.url, "--model", "weak", "--tokenizer", "byte",
                     "--prompt", "text", "--context", "256", "--quiet"])  # fmt: skip
        asked = sum(server.requests.values())
    finally:
        server.close()
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and err.startswith("weakspots probe: error: --prompt:")
    assert asked == 0


def test_the_control_scan_is_flat_on_the_fake_server():
    """The control design draws the shifts' filler as the scan does but moves no position:
    the server's weak spots (by position) do not show, at any label."""
    server = serve(MODEL, name="weak", tokenize=_bytes, dialect="llama-server")
    try:
        scan = _scan(server.url, tokenizer="byte")
        control = _scan(server.url, tokenizer="byte", control=True)
    finally:
        server.close()
    assert scan["delta_max"] > 0.3 and scan["tail_delta_max"] > 0.6
    assert control["design"] == "control" and control["trials"] == 16 * S
    assert control["phase_accuracy"] == [1.0] * S and control["tail_phase_accuracy"] == [1.0] * S
    assert control["delta_max"] == 0.0 and control["tail_delta_max"] == 0.0


@pytest.mark.parametrize("prompt", ["ids", "text"])
def test_llama_server_with_a_bos_text_prompts_count_it_and_ids_go_as_they_are(prompt):
    """llama-server puts a BOS before a text prompt (as its /tokenize does with
    add_special), not before token ids: either way the weak spots come out at their
    phases, so the positions the model reads are the design's."""
    server = serve(MODEL, name="weak", tokenize=_bytes, dialect="llama-server", bos=(1,))
    try:
        report = _scan(server.url, prompt=prompt)
    finally:
        server.close()
    assert report["trials"] == 16 * S and report["failed"] == 0
    _covers(report)

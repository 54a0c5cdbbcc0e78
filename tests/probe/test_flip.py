"""`--task flip` (probe/flip.py): a completion that flips between candidates as the prompt
grows one token at a time, against a server with a planted period-4 flip and one without."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from probe_server import unit_interval

from weakspots.cli import main
from weakspots.probe.flip import analyse, follows

PREFIX = "T.Cast(FP"
CANDIDATES = ("8", "32")


class FlipModel:
    """Byte-level log-probabilities of a prompt (`echo`): a candidate after the prefix scores
    by the length before it. `period`: '8' first when that length mod period is in `right`
    (the paper's pattern), except on a share `noise` of prompts; None: a fixed function of
    the prompt picks the winner, no period."""

    def __init__(self, period=4, right=(2, 3), noise=0.0):
        self.period, self.right, self.noise = period, right, noise

    def __call__(self, ids):
        data = bytes(ids)
        values = [None] + [-1.0] * (len(ids) - 1)
        for i, c in enumerate(CANDIDATES):
            tail = c.encode()
            if not data.endswith(PREFIX.encode() + tail):
                continue
            before = len(ids) - len(tail)
            if self.period is None:
                eight = unit_interval("flip", tuple(ids[:before])) < 0.5
            else:
                eight = before % self.period in self.right
                if unit_interval("noise", tuple(ids[:before])) < self.noise:
                    eight = not eight
            total = -0.2 if eight == (i == 0) else -1.5
            values[before:] = [total / len(tail)] * len(tail)
        return values


def serve_echo(model):
    """An OpenAI-compatible `/completions` that returns the prompt's log-probabilities (echo)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, {"data": [{"id": "flip"}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path != "/v1/completions" or not body.get("echo"):
                self._send(404, {"error": "not found"})
                return
            values = model(body["prompt"]) + [-0.5]  # the one generated token
            tokens = [chr(t) for t in body["prompt"]] + ["x"]
            choice = {"text": "x", "logprobs": {"tokens": tokens, "token_logprobs": values}}
            self._send(200, {"choices": [choice]})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/v1"


def _flip(url, capsys, *more):
    code = main(["probe", "--url", url, "--model", "flip", "--tokenizer", "byte", "--task", "flip",
                 "--prefix", PREFIX, "--candidate", "8", "--candidate", "32", "--stride", "4",
                 "--context", "200", "--lengths", "16", "--families", "4", "--json", "--quiet",
                 *more])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_a_planted_period_4_flip_is_recovered_with_its_rankings(capsys):
    httpd, url = serve_echo(FlipModel(period=4, noise=0.06))
    try:
        report = _flip(url, capsys)
    finally:
        httpd.shutdown()
        httpd.server_close()
    rows = report["rows"]
    assert report["rankings"] == 64 and len({r["filler_length"] for r in rows}) == 16
    assert {r["length"] - r["filler_length"] for r in rows} == {len(PREFIX)}  # one token at a time
    assert report["period"] == 4 and report["period_p"] < 0.01
    # the rankings that follow it: counted here from the planted rule, not from the report
    planted = sum(r["first"] == (0 if r["length"] % 4 in (2, 3) else 1) for r in rows)
    assert report["follows"] == planted and 56 <= planted < 64  # 6% of rankings flipped back
    assert report["rule"] == [1, 1, 0, 0]  # '8' first at lengths 2, 3 mod 4
    margin = report["by_stride"]["4"]["phase_margin"]  # log p('8') - log p('32'), +-1.3 planted
    assert min(margin[2], margin[3]) > 0.5 and max(margin[0], margin[1]) < -0.5


def test_no_period_is_reported_where_none_was_planted(capsys):
    httpd, url = serve_echo(FlipModel(period=None))
    try:
        report = _flip(url, capsys)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert report["period"] is None and report["period_p"] >= 0.05


def test_follows_counts_the_majority_rule_by_residue():
    first = np.array([0, 0, 1, 1, 0, 0, 1, 0])
    lengths = np.arange(8)
    count, rule = follows(first, lengths, 4, 2)
    assert rule.tolist() == [0, 0, 1, 0] and count == 7  # length 7 breaks the rule "1 at 3 mod 4"
    assert follows(first, lengths, 1, 2)[0] == 5


def test_the_permutation_null_rarely_reports_a_period():
    """On winners drawn at random (no period), a period is reported at about the 5% level."""
    rng = np.random.default_rng(0)
    found = 0
    for trial in range(40):
        rows = [{"family": f, "filler_length": L, "length": L + 9, "first": int(rng.integers(2)),
                 "logprobs": [0.0, 0.0]} for f in range(4) for L in range(16)]  # fmt: skip
        found += analyse(rows, (4,), 2, seed=trial)["period"] is not None
    assert found <= 6  # binomial(40, 0.05): P(>= 7) < 0.01


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--candidate", "8"], "--candidate: the flip task needs two or more"),
        (["--candidate", "8", "--candidate", "8"], "--candidate: the flip task needs two or more"),
        (["--candidate", "8", "--candidate", "32", "--lengths", "8"], "--lengths: at least four periods"),
        (["--candidate", "8", "--candidate", "32", "--families", "0"], "--families: an integer >= 1"),
    ],
)  # fmt: skip
def test_bad_flip_input_is_refused_in_one_line(capsys, flags, message):
    code = main(["probe", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--tokenizer", "byte",
                 "--task", "flip", "--prefix", PREFIX, "--stride", "4", "--context", "200",
                 "--quiet", *flags])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and message in err, err


def test_flip_without_a_prefix_is_refused(capsys):
    code = main(["probe", "--url", "http://127.0.0.1:9/v1", "--model", "m", "--tokenizer", "byte",
                 "--task", "flip", "--candidate", "a", "--candidate", "b", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--prefix: the flip task needs" in err

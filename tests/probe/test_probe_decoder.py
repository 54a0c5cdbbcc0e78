"""The probe on a decoder trained here, directly (`--backend decoder`) and served over HTTP:
its phase profile agrees with the one `weakspots lm train` measured on the same model."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from probe_server import serve

import weakspots
from weakspots.cli import main
from weakspots.idealized.decoder.config import LMConfig
from weakspots.probe.backends import DecoderBackend
from weakspots.sims.decoder import checkpoint
from weakspots.sims.store import config_hash

TASK = dict(seq_len=48, pairs=2, stride=4, d_model=32, key_vocab=16, value_vocab=16,
            filler_vocab=8, window=8, batch=32, eval_every=10, eval_samples=24)  # fmt: skip


def _trained(directory, steps: int):
    config = LMConfig(**TASK, steps=steps)
    result = checkpoint.trained([config], directory=directory)[0]
    return result, str(directory / f"{config_hash(config.asdict())}.npz")


def _agree(report: dict, summary: dict, stride: int) -> None:
    """Per phase, the probe's and lm train's accuracies differ by no more than sampling noise
    allows (two-proportion z, Bonferroni over the phases at 95% family-wise)."""
    z = statistics.NormalDist().inv_cdf(1 - 0.05 / (2 * stride))
    for j in range(stride):
        p1, n1 = report["phase_accuracy"][j], report["phase_samples"][j]
        p2, n2 = summary["phase_accuracy"][j], summary["phase_samples"][j]
        pooled = (p1 * n1 + p2 * n2) / (n1 + n2)
        se = np.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / n1 + 1 / n2))
        assert abs(p1 - p2) <= z * se, (j, p1, p2, se)


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    return _trained(tmp_path_factory.mktemp("lm"), steps=40)


@pytest.mark.slow
def test_probe_of_a_decoder_agrees_with_lm_train_and_with_the_same_decoder_served(decoder):
    result, path = decoder
    summary = result.summary()
    direct = weakspots.probe(backend="decoder", checkpoint=path, task="recall", stride=4,
                             trials=150, seed=1)  # fmt: skip
    assert direct["trials"] == 600 and direct["failed"] == 0
    _agree(direct, summary, 4)
    # the same decoder behind an OpenAI-compatible server: the same prompts, the same answers
    backend = DecoderBackend(path)
    server = serve(lambda ids, n: (lambda c: (c.text, c.token_ids))(backend.complete(tuple(ids), n)),
                   name="tiny")  # fmt: skip
    try:
        served = weakspots.probe(backend="openai", url=server.url, model="tiny", checkpoint=path,
                                 task="recall", stride=4, trials=150, seed=1)  # fmt: skip
    finally:
        server.close()
    assert served["phase_accuracy"] == direct["phase_accuracy"]
    assert served["tail_phase_samples"] == direct["tail_phase_samples"]


@pytest.mark.slow
def test_the_decoder_backend_refuses_a_text_task(decoder, capsys):
    code = main(["probe", "--backend", "decoder", "--checkpoint", decoder[1], "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("weakspots probe: error: --task:") and "\n" not in err


@pytest.mark.slow
def test_probe_finds_lm_trains_weak_phase_on_a_decoder_with_one(tmp_path):
    result, path = _trained(tmp_path, steps=300)
    summary = result.summary()
    report = weakspots.probe(backend="decoder", checkpoint=path, task="recall", stride=4,
                             trials=300, seed=2)  # fmt: skip
    _agree(report, summary, 4)
    assert summary["delta_max"] > summary["delta_max_noise_floor"]  # there is a profile to find
    lo, hi = report["delta_max_ci"]
    assert lo <= summary["delta_max"] <= hi

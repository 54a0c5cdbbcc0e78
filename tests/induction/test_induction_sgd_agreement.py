"""The SGD coverage law against SGD (issue 59): 256 seeds per setting, total variation <= 0.08
on settings the derivation never saw; the recorded runs the quick report reads are those of
the settings as they stand."""

import json
import shlex

import numpy as np
import pytest

from weakspots import theory
from weakspots.sims.experiments.induction.sgd_coverage import induction_sgd_coverage as study
from weakspots.sims.induction.train import train_runs


def _record() -> dict:
    return json.loads(study.recorded_path().read_text())


def test_the_record_holds_every_setting_as_it_stands():
    rec = _record()
    assert set(rec["settings"]) == set(study.BY_NAME)
    for name, entry in rec["settings"].items():
        s = study.BY_NAME[name]
        assert entry["role"] == s.role
        assert entry["train_command"] == shlex.join(study.train_command(s))
        assert entry["predict_command"] == shlex.join(study.predict_command(s))
        assert len(entry["distinct"]) == study.SEEDS
        measured = study.distribution(entry["distinct"], s.config.heads)
        tv = study.total_variation(measured, entry["predicted"])
        assert tv == pytest.approx(entry["total_variation"], abs=1e-12)
    assert {"cpu", "jax", "jaxlib (XLA)"} <= set(rec["machine"])


@pytest.mark.slow
def test_the_recorded_predictions_are_the_law_as_it_stands():
    for name, entry in _record()["settings"].items():
        c = study.BY_NAME[name].config
        law = theory.induction_sgd_coverage_distribution(
            c.heads, c.stride, c.chunks, c.vocab, c.gamma, c.beta, c.lr, c.batch, c.init_scale,
            c.steps, head_batches=c.head_batches,
        )  # fmt: skip
        np.testing.assert_allclose(entry["predicted"], law, atol=1e-12, err_msg=name)


VALIDATION = [s for s in study.SETTINGS if s.role == "validation"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "setting",
    [
        pytest.param(
            s,
            marks=pytest.mark.xfail(
                strict=True,
                reason="heads interact through the normaliser (e^{beta m E} > N): outside the "
                "derivation, and the flow itself leaves the occupancy law (docs/induction.md §9)",
            ),
        )
        if s.interacting
        else s
        for s in VALIDATION
    ],
    ids=lambda s: s.name,
)
def test_sgd_follows_the_shared_noise_law_on_unseen_settings(setting):
    c = setting.config
    history = train_runs(c, range(study.SEEDS))
    distinct = [history.summary(i)["distinct"] for i in range(study.SEEDS)]
    measured = study.distribution(distinct, c.heads)
    law = theory.induction_sgd_coverage_distribution(
        c.heads, c.stride, c.chunks, c.vocab, c.gamma, c.beta, c.lr, c.batch, c.init_scale, c.steps
    )
    assert study.total_variation(measured, law) <= study.TOLERANCE


@pytest.mark.slow
def test_a_batch_per_head_brings_noisy_sgd_back_to_the_occupancy_law():
    c = study.BY_NAME["own batches"].config
    history = train_runs(c, range(study.SEEDS))
    distinct = [history.summary(i)["distinct"] for i in range(study.SEEDS)]
    measured = study.distribution(distinct, c.heads)
    assert study.total_variation(measured, theory.induction_coverage_distribution(3, 4)) <= 0.08
    assert measured[1] < 0.25  # against 0.59 with one batch for every head (the record's noisy)

"""The decoder experiments' rows (`lm_position`, `lm_family`) on outcomes of known phase
structure: each row passes where its prediction holds and fails where it does not."""

import dataclasses

import numpy as np

from weakspots.idealized.lm_config import LMConfig
from weakspots.sims.experiments import BUDGETS, lm_family, lm_position
from weakspots.sims.lm import evaluate

CONFIG = LMConfig(seq_len=40, pairs=2, stride=4, eval_samples=3)


def summary(config, wrong_when):
    """Pooled phase metrics of two runs that answer wrongly exactly where `wrong_when(value_start)`."""
    data = evaluate.config_evaluation_set(config)
    outcomes = ~wrong_when(data.value_start)
    return evaluate.phase_summary(config, np.stack([outcomes, outcomes]))


def position_results(compressed_wrong, dense_wrong):
    designs = {}
    for name, config, wrong in (
        ("compressed", CONFIG, compressed_wrong),
        ("dense", CONFIG.replace(operator="none"), dense_wrong),
    ):
        designs[name] = {
            "config": dataclasses.asdict(config),
            "seeds": [0, 1],
            "pooled": summary(config, wrong),
        }
    return {"size": "full", "designs": designs}


def position_rows(results):
    predictions = lm_position.predict(BUDGETS["tiny"], results)
    return {r.name.split(":")[0]: r for r in lm_position.rows(results, predictions)}


def never(v):
    return np.zeros(v.shape, bool)


def test_position_rows_pass_for_a_period_s_weak_spot_beside_a_flat_control():
    rows = position_rows(position_results(lambda v: v % 4 == 0, never))
    assert set(rows) == {"dense control", "compressed"}
    assert all(r.kind == "prediction" for r in rows.values())
    assert rows["dense control"].passed and rows["dense control"].sgd == 0.0
    assert rows["compressed"].passed and rows["compressed"].sgd == 4.0


def test_position_rows_fail_for_a_phase_effect_in_the_control_or_another_period():
    # the control wrong at every phase-1 value: a phase effect far beyond any sampling noise;
    # the compressed design wrong at every other phase-0 value: period 2 s
    rows = position_rows(position_results(lambda v: v % 8 == 0, lambda v: v % 4 == 1))
    assert not rows["dense control"].passed
    assert not rows["compressed"].passed and rows["compressed"].sgd == 8.0


def test_the_period_row_is_made_at_full_size_only():
    results = position_results(lambda v: v % 4 == 0, never)
    assert set(position_rows({**results, "size": "quick"})) == {"dense control"}


def test_family_rows_cover_the_dense_cells_only():
    config = CONFIG.replace(seq_len=44)  # a context of 40 tokens: whole windows at s = 4 and 8

    def row(operator, stride, wrong):
        counted = config.replace(stride=stride)
        pooled = summary(counted, wrong)
        return {
            "operator": operator,
            "stride": stride,
            "seq_len": config.seq_len,
            "seeds": 2,
            **{k: pooled[k] for k in ("delta_max", "delta_max_noise_floor", "interval_gap")},
        }

    results = {
        "rows": [
            row("mean_pool", 4, lambda v: v % 4 == 0),
            row("none", 4, never),
            row("none", 8, lambda v: v % 8 == 3),
        ]
    }
    rows = lm_family.rows(results, lm_family.predict(BUDGETS["tiny"], results))
    assert [r.config.split(",")[0] for r in rows] == ["phases at s=4 T=44", "phases at s=8 T=44"]
    assert [r.passed for r in rows] == [True, False]

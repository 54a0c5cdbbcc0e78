"""The decoder experiments' rows (`lm_position`, `lm_family`) on outcomes of known phase
structure: each row passes where its prediction holds and fails where it does not."""

import dataclasses

import numpy as np

from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.decoder import evaluate
from weakspots.sims.experiments.decoder.family import lm_family
from weakspots.sims.experiments.decoder.position import lm_position

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
    predictions = lm_position.predict(lm_position.SIZES["tiny"], results)
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
    rows = lm_family.rows(results, lm_family.predict("tiny", results))
    assert [r.config.split(",")[0] for r in rows] == ["phases at s=4 T=44", "phases at s=8 T=44"]
    assert [r.passed for r in rows] == [True, False]


def test_family_design_rows_are_findings_held_beyond_the_noise_floor():
    """A design cell with a weak spot (every phase-0 value wrong) holds its finding; one
    answering alike at every phase does not; neither counts as failing."""
    from weakspots.sims.experiments.experiment import failing

    config = CONFIG.replace(seq_len=44)

    def design(wrong):
        pooled = summary(config, wrong)
        keys = ("delta_max", "delta_max_noise_floor", "mean_accuracy")
        return {"design": "v4", "stride": 4, "seq_len": 44, "seeds": 2, "source": "trained",
                **{k: pooled[k] for k in keys}}  # fmt: skip

    results = {"rows": [], "designs": [design(lambda v: v % 4 == 0), design(never)]}
    rows = lm_family.rows(results, lm_family.predict("tiny", results))
    expected = [(True, True, True), (True, False, False)]
    assert [(r.finding, r.holds, r.passed) for r in rows] == expected
    assert not any(failing(r.as_dict()) for r in rows)


def test_family_reads_the_recorded_v4_design_below_full(monkeypatch):
    """Below `full` the v4 cell is its recording: the recorded command, parsed by the CLI,
    gives the recorded config (`family.design_config` at quick), and its pooled delta_max is
    its best minus worst phase; a recording checked against another size's config is refused."""
    import json

    import pytest

    from weakspots.cli import build_parser
    from weakspots.cli.lm import lm_config
    from weakspots.idealized.decoder.config import V4_KINDS
    from weakspots.sims.experiments.decoder.family import study as family

    name, stride, seq_len = family.RECORDINGS["v4"]
    report = json.loads((family.RECORDED / name).read_text())
    argv = report["command"].split()[1:]
    assert lm_config(build_parser().parse_args(argv)) == family.design_config(
        "quick", "v4", stride, seq_len
    )
    cell = family.recorded_design("v4")
    acc = cell["phase_accuracy"]
    assert cell["delta_max"] == pytest.approx(max(acc) - min(acc), abs=1e-12)
    assert cell["seeds"] == 2 == len(cell["seed_delta_max"]) and report["command"] in cell["source"]
    # the quick and tiny grids train no v4 decoder; full trains each v4 cell with 4 seeds
    for size in ("tiny", "quick"):
        assert not any(k in V4_KINDS for c in family.configs(size) for k in c.layer_kinds)
    v4 = [c for c in family.configs("full") if "csa" in c.layer_kinds]
    assert len(v4) == 4 * len(family.design_cells("full")) == 16
    monkeypatch.setattr(family, "RECORDED_SIZE", "tiny")
    with pytest.raises(ValueError, match="another config"):
        family.recorded_design("v4")

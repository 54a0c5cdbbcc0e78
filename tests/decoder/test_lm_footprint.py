"""Decoders held against the footprint and selection models (`sims.experiments.decoder.footprint.study`,
experiments `lm_footprint`, `lm_selection`; `sims.decoder.carry.selection`)."""

import argparse
import shlex

import jax
import numpy as np
import pytest
from flax import nnx

from weakspots.cli import lm as lm_cli
from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import init_decoder
from weakspots.sims.decoder import carry
from weakspots.sims.decoder.interventions import evaluation_rows
from weakspots.sims.experiments.decoder.footprint import lm_footprint, lm_selection
from weakspots.sims.experiments.decoder.footprint import study as footprint


@pytest.mark.parametrize("family", sorted(footprint.FAMILIES))
def test_each_design_is_the_projects_decoder_and_its_command_rebuilds_its_config(family):
    parser = argparse.ArgumentParser()
    lm_cli.add_lm_flags(parser)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quiet", action="store_true")
    for design in footprint.FAMILIES[family]:
        config = footprint.design_config(family, design)
        line = footprint.command(config, footprint.SEEDS)
        args = parser.parse_args(shlex.split(line)[3:])
        assert lm_cli.lm_config(args) == config, line
        assert config.layer_kinds == ("sliding", "compressed")
        assert config.pairs * 128 == 4 * config.seq_len  # one fact density
        assert (config.indexer_topk > 0) == (family == "selection")
        tiny = footprint.design_config(family, design, "tiny")
        assert (tiny.stride, tiny.operator) == (config.stride, config.operator)


def test_a_recorded_report_of_another_config_is_refused(monkeypatch):
    real = footprint.design_config
    monkeypatch.setattr(footprint, "design_config", lambda *a: real(*a).replace(steps=7))
    with pytest.raises(ValueError, match="another config"):
        footprint.recorded("footprint", "s8_w16")


def _indexed(topk):
    return LMConfig(
        layout="sliding,compressed", seq_len=56, pairs=2, key_vocab=16, value_vocab=8,
        filler_vocab=4, d_model=16, rope_dim=4, window=8, indexer_topk=topk, index_dim=4,
        index_heads=2,
        eval_samples=1, eval_batch=8,
    )  # fmt: skip


def _one_run(config):
    model = init_decoder(config.decoder, jax.random.key(0))
    return jax.tree.map(lambda a: a[None], nnx.split(model)[1])


def test_an_indexer_keeping_every_entry_hits_every_fact_and_top_1_misses_some():
    every = _indexed(64)  # more than the 12 entries of a 48-token context
    rows = evaluation_rows(every)
    kept = carry.selection(every, _one_run(every), rows)
    assert kept["layer"] == 1
    np.testing.assert_array_equal(kept["hit"], np.ones(every.stride))
    one = _indexed(1)
    hits = carry.selection(one, _one_run(one), evaluation_rows(one))["hit"]
    assert 0.0 <= min(hits) and max(hits) <= 1.0 and min(hits) < 1.0
    assert carry.selection(LMConfig(**{**_indexed(1).asdict(), "indexer_topk": 0}),
                           _one_run(every), rows) is None  # fmt: skip


def test_the_quick_studies_read_their_recorded_reports_and_every_row_is_a_finding():
    for module, family in ((lm_footprint, "footprint"), (lm_selection, "selection")):
        results = module.run("quick")
        assert set(results["designs"]) == set(footprint.FAMILIES[family])
        for c in results["designs"].values():
            assert c["seeds"] == footprint.SEEDS
            lo, hi = c["delta_max_ci"]
            assert lo <= c["delta_max"] <= hi
        rows = module.rows(results, module.predict("quick", results))
        assert rows and all(r.finding for r in rows)
        assert {r.kind for r in rows} <= {"fit", "prediction"}


@pytest.mark.slow
def test_the_tiny_studies_train_measure_and_give_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("WEAKSPOTS_LM_CACHE", str(tmp_path))
    footprint.run.cache_clear()
    for module in (lm_footprint, lm_selection):
        results = module.run("tiny")
        rows = module.rows(results, module.predict("tiny", results))
        assert rows and all(r.finding for r in rows)
    assert all(c["selection"] is not None for c in lm_selection.run("tiny")["designs"].values())


def test_selection_by_half_of_an_overlapping_window_is_within_the_whole_hit():
    """Where windows overlap, `by_half` counts the entries of each half's set only: each is a
    subset of the whole set, so its hit rate never exceeds `hit`; an indexer keeping every
    entry hits every fact, and its current-half entry (complete, the fact being beyond the
    local reach; the previous-half entry's window may end after the query); a layer without
    overlap reports no halves."""
    from weakspots.sims.experiments.decoder.amplifier import study as amplifier

    v4 = amplifier.design_config("tiny", "csa", "v4")
    rows = evaluation_rows(v4)
    top1 = carry.selection(v4.replace(indexer_topk=1), _one_run(v4), rows)
    for half in ("current", "previous"):
        assert np.all(np.asarray(top1["by_half"][half]["hit"]) <= np.asarray(top1["hit"]))
    every = carry.selection(v4.replace(indexer_topk=64), _one_run(v4), rows)
    np.testing.assert_array_equal(every["hit"], np.ones(v4.stride))
    np.testing.assert_array_equal(every["by_half"]["current"]["hit"], np.ones(v4.stride))
    assert "by_half" not in carry.selection(
        _indexed(1), _one_run(_indexed(1)), evaluation_rows(_indexed(1))
    )

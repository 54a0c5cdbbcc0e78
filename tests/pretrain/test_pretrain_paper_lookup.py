"""The paper_lookup experiment: reading recordings of the agreed format (a synthetic one until
the sweep's land), its rows and tables, the paper's reference numbers, and its figure."""

import json

import matplotlib
import numpy as np
import pytest

from weakspots.sims.experiments.pretrain import paper_lookup as pl
from weakspots.sims.pretrain import lookup

MODULUS, SAMPLES = 24, 480
W8S8 = {"attention": "compressed", "window": 8, "stride": 8, "kv_heads": 1, "gate": "scalar",
        "rope_dim": -1, "seq_len": 512}  # fmt: skip
FULL = {"attention": "full", "kv_heads": 1, "seq_len": 512}


def _report(profile, config, padding, seeds=2, wobble=0.005):
    """A `weakspots lm lookup --json` report of the agreed shape for a known profile."""
    rng = np.random.default_rng(len(padding) + seeds)
    accuracy = np.clip(np.asarray(profile) + wobble * rng.standard_normal((seeds, MODULUS)), 0, 1)
    return {
        "padding": padding,
        "modulus": MODULUS,
        "prompts_per_residue": SAMPLES,
        "residue_accuracy": accuracy.tolist(),
        "configs": [config] * seeds,
        "gap": 123.0,
    }  # fmt: skip  (a derived number the reader must not trust)


WEAK = [0.3 if r % 8 in (5, 6, 7) else 0.8 for r in range(MODULUS)]
FLAT = [0.6] * MODULUS


@pytest.fixture
def runs(tmp_path):
    """A synthetic recording: one file per design (both paddings) and the headline pair."""
    for name, profile, config in (("w8s8", WEAK, W8S8), ("full", FLAT, FULL)):
        record = {"design": name, "val_loss": 3.21, "runs": [
            {"command": f"weakspots lm lookup --checkpoint runs/{name} --padding {p} --json",
             "result": _report(profile, config, p)} for p in lookup.PADDINGS]}  # fmt: skip
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    headline = {
        "command": "weakspots lm lookup --checkpoint runs/w8s8 --json",
        "control_command": "weakspots lm lookup --checkpoint runs/full --json",
        "result": _report(WEAK, W8S8, "prefix"),
        "control_result": _report(FLAT, FULL, "prefix"),
    }
    (tmp_path / pl.HEADLINE).write_text(json.dumps(headline))
    return tmp_path


def test_the_sweeps_layout_is_read_with_its_commands_and_validation_loss(tmp_path):
    """As `sims.experiments.pretrain.sweep.record` writes a design: reports under their padding, the
    commands beside them as `<padding>_command` after a `pretrain_command`."""
    entry = {"design": "w8s8_1kv", "config": W8S8, "pretrain_command": "weakspots lm pretrain X",
             "history": {"val_loss": [[3.0, 3.2], [2.5, 2.7]]}}  # fmt: skip
    for padding in lookup.PADDINGS:
        entry[f"{padding}_command"] = f"weakspots lm lookup --padding {padding}"
        entry[padding] = _report(WEAK, W8S8, padding)
    (tmp_path / "w8s8_1kv.json").write_text(json.dumps(entry))
    designs = pl.read_recordings(tmp_path)["designs"]
    assert [d["padding"] for d in designs] == list(lookup.PADDINGS)
    assert designs[1]["command"] == (
        "weakspots lm pretrain X && weakspots lm lookup --padding in-sequence"
    )
    assert designs[0]["val_loss"] == pytest.approx(2.6)


def test_recordings_are_read_and_their_statistics_recomputed(runs):
    results = pl.read_recordings(runs)
    assert results["source"] == "recorded"
    found = {(d["label"], d["padding"]) for d in results["designs"]}
    assert found == {(label, p) for label in ("W8/S8, 1 KV", "full attention, 1 KV")
                     for p in lookup.PADDINGS}  # fmt: skip
    weak = next(d for d in results["designs"] if d["label"] == "W8/S8, 1 KV")
    assert weak["val_loss"] == 3.21 and weak["stride"] == 8
    assert weak["command"].endswith("--padding prefix --json")
    mean = np.mean(_report(WEAK, W8S8, "prefix")["residue_accuracy"], axis=0)
    assert weak["gap"] == pytest.approx(mean.max() - mean.min()) != 123.0
    assert weak["gap"] == pytest.approx(0.5, abs=0.03)
    assert weak["dominant_period"] == 8 and weak["gap_beyond_intervals"]
    assert results["headline"]["control"]["label"] == "full attention, 1 KV"


def test_rows_hold_for_a_recorded_phase_effect_beside_a_flat_control(runs):
    results = pl.read_recordings(runs)
    rows = pl.rows(results, pl.predict(pl.SIZES["quick"], results))
    by_name = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    (gap,) = [r for n, rs in by_name.items() if "20 points" in n for r in rs]
    assert gap.finding and gap.passed and gap.sgd == pytest.approx(0.5, abs=0.03)
    (control,) = [r for n, rs in by_name.items() if "within 6 points" in n for r in rs]
    assert control.passed and control.sgd < 0.06
    periods = [r for n, rs in by_name.items() if "repeat with its stride" in n for r in rs]
    assert len(periods) == 2 and all(r.passed and r.sgd == 8 for r in periods)


def test_a_flat_headline_is_not_called_a_gap(runs):
    headline = json.loads((runs / pl.HEADLINE).read_text())
    headline["result"] = _report(FLAT, W8S8, "prefix")
    (runs / pl.HEADLINE).write_text(json.dumps(headline))
    results = pl.read_recordings(runs)
    rows = pl.rows(results, pl.predict(pl.SIZES["quick"], results))
    (gap,) = [r for r in rows if "20 points" in r.name]
    assert not gap.passed and gap.finding


def test_table_sets_the_papers_numbers_beside_ours(runs):
    results = pl.read_recordings(runs)
    prefix, spread = pl.tables(results, {})
    row = next(r for r in prefix.rows if r[0] == "W8/S8, 1 KV")
    assert row[1:5] == (2.478, 50.56, 5.7, "75.3 [72.6, 77.9]")
    assert row[5] == 2 and row[8] == pytest.approx(50, abs=3) and row[10] == 8
    assert next(r for r in spread.rows if r[0] == "W8/S8, 1 KV")[4] == "44.0 [41.2, 47.6]"
    assert all(len(r) == len(prefix.columns) for r in prefix.rows + spread.rows)


def test_reference_numbers_match_the_papers_table():
    """PAPER.md §3's table (rounded to 0.1), an independent transcription of the same data."""
    ref = pl.reference()
    table = {  # label: (val. loss, mean, worst, gap), prefix padding
        "full attention, 1 KV": (2.466, 18.8, 17.2, 3.1),
        "full attention, 8 KV": (2.437, 61.1, 58.4, 4.3),
        "W8/S8, 1 KV": (2.478, 50.6, 5.7, 75.3),
        "W8/S8, 8 KV": (2.431, 59.4, 9.9, 71.1),
        "W8/S4, 1 KV": (2.467, 66.9, 46.2, 39.8),
        "W12/S12, 1 KV": (2.487, 33.0, 5.0, 63.2),
        "W8/S8, 1 KV, no RoPE": (2.504, 29.4, 5.0, 40.9),
        "W8/S8, 1 KV, uniform averaging": (2.497, 12.5, 4.7, 19.2),
    }
    models = {m["label"]: m for m in ref["full_attention"] + ref["compressed"]
              if m.get("seed") in (None, 42)}  # fmt: skip
    for label, (loss, mean, worst, gap) in table.items():
        p = models[label]["prefix"]
        first = lambda x: x[0] if isinstance(x, list) else x  # noqa: E731
        assert models[label]["val_loss"] == loss
        assert round(first(p["mean"]), 1) == mean and p["worst"] == worst
        assert first(p["gap"]) == gap
        assert p["worst_interval"][0] <= p["worst"] <= p["worst_interval"][1]


@pytest.mark.parametrize("config, label", [
    ({"attention": "compressed", "window": 8, "stride": 4, "kv_heads": 2}, "W8/S4, 2 KV"),
    ({**W8S8, "gate": "uniform"}, "W8/S8, 1 KV, uniform averaging"),
    ({**W8S8, "rope_dim": 0}, "W8/S8, 1 KV, no RoPE"),
    ({**W8S8, "local": "tail", "tied_kv": True}, "W8/S8, 1 KV, tied K/V, uncompressed tail"),
    ({"attention": "full", "kv_heads": 4}, "full attention, 4 KV"),
])  # fmt: skip
def test_design_labels_follow_the_papers_names(config, label):
    assert pl.design_label(config) == label


def test_figure_draws_from_a_recording(runs, tmp_path):
    from weakspots.figures import paper_lookup as drawing

    results = pl.read_recordings(runs)
    fig = drawing.make(results, pl.predict(pl.SIZES["quick"], results))
    try:
        assert "worst residue" in fig._suptitle.get_text()
        fig.savefig(tmp_path / "paper_lookup.png")
        assert (tmp_path / "paper_lookup.png").stat().st_size > 1000
    finally:
        matplotlib.pyplot.close(fig)


def test_a_lookup_at_zero_is_titled_not_learned_and_a_flat_one_within_the_intervals(runs):
    from weakspots.figures import paper_lookup as drawing

    headline = json.loads((runs / pl.HEADLINE).read_text())
    for profile, expected in (([0.0] * MODULUS, "not learned"), (FLAT, "within the intervals")):
        headline["result"] = _report(profile, W8S8, "prefix", wobble=0.0)
        headline["control_result"] = _report(profile, FULL, "prefix", wobble=0.0)
        (runs / pl.HEADLINE).write_text(json.dumps(headline))
        fig = drawing.make(pl.read_recordings(runs))
        try:
            assert expected in fig._suptitle.get_text()
        finally:
            matplotlib.pyplot.close(fig)


def test_tiny_scores_planted_models_with_the_periods_planted():
    """Consistency check of the pipeline: planted blind phases of period 8 and 4 are found
    with those periods, under both paddings."""
    results = pl.run(pl.SIZES["tiny"])
    rows = pl.rows(results, pl.predict(pl.SIZES["tiny"], results))
    periods = [r for r in rows if "repeat with its stride" in r.name]
    assert len(periods) == 4 and all(r.passed for r in periods)


def test_nothing_recorded_yet_gives_no_rows_the_papers_table_and_a_labelled_figure(tmp_path):
    from weakspots.figures import paper_lookup as drawing

    results = pl.read_recordings(tmp_path / "absent")
    assert results["designs"] == [] and results["headline"] is None
    assert pl.rows(results, pl.predict(pl.SIZES["quick"], results)) == []
    prefix, _ = pl.tables(results, {})
    assert all(row[5] is None for row in prefix.rows) and len(prefix.rows) == 16
    fig = drawing.make(results, None)
    try:
        assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel()
    finally:
        matplotlib.pyplot.close(fig)


def test_full_reruns_the_recorded_commands_and_compares_their_numbers(tmp_path):
    """Commands that print a report (here `cat` of a file) stand in for pretraining; a rerun
    printing other numbers than recorded fails the reproduction row."""
    runs, printed = tmp_path / "runs", tmp_path / "printed"
    runs.mkdir(), printed.mkdir()
    for name, profile, config in (("w8s8", WEAK, W8S8), ("full", FLAT, FULL)):
        entry = {"pretrain_command": "true"}
        for padding in lookup.PADDINGS:
            report = _report(profile, config, padding)
            if name == "full" and padding == "in-sequence":  # the rerun prints other numbers
                changed = np.asarray(report["residue_accuracy"])
                changed[0, 3] = 0.0
                (printed / f"{name}_{padding}.json").write_text(
                    json.dumps({**report, "residue_accuracy": changed.tolist()})
                )
            else:
                (printed / f"{name}_{padding}.json").write_text(json.dumps(report))
            entry[f"{padding}_command"] = f"cat {printed / f'{name}_{padding}.json'}"
            entry[padding] = report
        (runs / f"{name}.json").write_text(json.dumps(entry))
    results = pl.retrained(runs)
    assert results["source"] == "trained" and len(results["designs"]) == 4
    rows = [r for r in pl.rows(results, pl.predict(pl.SIZES["full"], results))
            if "reproduces" in r.name]  # fmt: skip
    failing = [r.config.split(";")[0] for r in rows if not r.passed]
    assert len(rows) == 4 and failing == ["full attention, 1 KV, in-sequence padding"]
    assert all(r.kind == "consistency" for r in rows)

"""The agreement row (`Row`), the experiments of `weakspots check`, and the command itself."""

import json
import math

import numpy as np
import pytest

from weakspots.cli import check as check_cli
from weakspots.cli import main
from weakspots.sims.experiments import (
    EXPERIMENTS,
    KINDS,
    Experiment,
    Row,
    evaluate,
    failing,
    kind_counts,
)
from weakspots.sims.experiments import experiment as experiment_module
from weakspots.sims.experiments.experiment import sizes_by_name, stored, tree_digest
from weakspots.sims.experiments.measure import FALSE_ALARM, mean_half_width, normal_half_width
from weakspots.sims.experiments.toy import linear_growth, phase_diagram, threshold

KEYS = {
    "name", "config", "kind", "predicted", "ode", "sgd", "rel_error", "tolerance", "pass",
    "finding",
}  # fmt: skip


def test_row_error_is_relative_with_a_floor():
    good = Row("x", "c", kind="prediction", predicted=2.0, ode=2.001, tolerance=1e-3)
    assert set(good.as_dict()) == KEYS and good.passed
    assert good.rel_error == pytest.approx(5e-4)
    # the worse of the two measurements decides
    assert not Row("x", "c", kind="prediction", predicted=2.0, ode=2.001, sgd=2.1,
                   tolerance=1e-3).passed  # fmt: skip
    # floor: |predicted| below it no longer shrinks the error (absolute for floor 1)
    near_zero = Row("x", "c", kind="consistency", predicted=0.0, sgd=0.02, tolerance=0.03, floor=1)
    assert near_zero.passed and near_zero.rel_error == pytest.approx(0.02)
    exact_zero = Row("x", "c", kind="consistency", predicted=0.0, sgd=0.0, tolerance=0.0)
    assert exact_zero.passed and exact_zero.rel_error == 0.0
    assert not Row("x", "c", kind="consistency", predicted=0.0, sgd=1e-9, tolerance=1.0).passed


def test_row_fails_without_a_finite_measurement_or_its_condition():
    for measured in ({}, {"ode": math.nan}, {"sgd": math.inf}, {"ode": 1.0, "sgd": math.nan}):
        row = Row("x", "c", kind="fit", predicted=1.0, tolerance=10.0, **measured)
        assert not row.passed and math.isinf(row.rel_error)
    assert not Row("x", "c", kind="fit", predicted=math.nan, ode=1.0, tolerance=10.0).passed
    assert not Row("x", "c", kind="fit", predicted=1.0, ode=1.0, tolerance=1.0, holds=False).passed
    with pytest.raises(ValueError, match="kind"):
        Row("x", "c", kind="guess", predicted=1.0, ode=1.0, tolerance=1.0)


def test_kind_counts_counts_each_kind_apart():
    rows = [
        Row("a", "", kind="prediction", predicted=1.0, ode=1.0, tolerance=0.0).as_dict(),
        Row("b", "", kind="prediction", predicted=1.0, ode=2.0, tolerance=0.0).as_dict(),
        Row("c", "", kind="fit", predicted=1.0, ode=2.0, tolerance=0.0).as_dict(),
    ]
    assert kind_counts(rows) == {
        "prediction": {"rows": 2, "failing": 1},
        "consistency": {"rows": 0, "failing": 0},
        "fit": {"rows": 1, "failing": 1},
    }


def test_registry_names_are_unique_and_rows_typed():
    names = [e.name for e in EXPERIMENTS]
    assert len(names) == len(set(names))
    assert all(isinstance(e, Experiment) for e in EXPERIMENTS)
    assert set(KINDS) == {"prediction", "consistency", "fit"}


def test_each_experiment_runs_at_its_own_size_and_the_store_keeps_sizes_and_versions_apart(
    tmp_path,
):
    sized = Experiment(
        "sized",
        lambda needles: {"needles": needles},
        lambda needles, results: {"needles": needles},
        lambda results, predictions: [],
        sizes={"tiny": 10, "quick": 20, "full": 30},
    )
    assert evaluate(sized, "quick", tmp_path).results == {"needles": 20}
    assert stored(tmp_path, "run", sized, "quick")
    assert not stored(tmp_path, "run", sized, "tiny")
    assert not stored(tmp_path, "run", sized.replace(version=2), "quick")
    # the record is part of the key: changing a size's settings recomputes it
    assert not stored(tmp_path, "run", sized.replace(sizes={**sized.sizes, "quick": 21}), "quick")
    assert evaluate(sized, "tiny", tmp_path).predictions == {"needles": 10}
    with pytest.raises(ValueError, match="sizes"):
        sized.replace(sizes={"quick": 20})
    assert all(set(e.sizes) == {"tiny", "quick", "full"} for e in EXPERIMENTS)


def test_a_decoder_experiment_is_recomputed_when_what_it_reads_changes(tmp_path, monkeypatch):
    """A decoder experiment's size is a name; its store key holds the digest of its study's
    package (designs, recorded reports), so a new recording is not read stale."""
    calls = []
    named = Experiment(
        "named",
        lambda size: calls.append(size) or {"size": size},
        lambda size, results: {},
        lambda results, predictions: [],
        sizes=sizes_by_name(),
        study="a.study",
    )
    monkeypatch.setattr(experiment_module, "study_inputs", lambda package: f"{package}: v1")
    evaluate(named, "quick", tmp_path)
    evaluate(named, "quick", tmp_path)
    assert calls == ["quick"]  # the second read the store
    monkeypatch.setattr(experiment_module, "study_inputs", lambda package: f"{package}: v2")
    assert not stored(tmp_path, "run", named, "quick")
    evaluate(named, "quick", tmp_path)
    assert calls == ["quick", "quick"]


def test_a_size_given_by_name_alone_is_refused_without_its_study():
    with pytest.raises(ValueError, match="needs `study`"):
        Experiment("named", dict, dict, list, sizes=sizes_by_name())


def test_each_decoder_study_keys_its_experiments_by_its_own_package_and_the_engine():
    """Two experiments of one study share its digest; another study's differs; the engine
    (`sims.decoder`, `idealized.decoder`) is in no study's digest but in its own key field,
    the same for every decoder study; a recording of the study is in the study's digest."""
    from importlib import resources

    from weakspots.sims.experiments.decoder import ENGINE

    by_name = {e.name: e for e in EXPERIMENTS}
    key = lambda name: experiment_module._store_key("run", by_name[name], "quick")  # noqa: E731
    assert key("lm_amplifier")["inputs"] == key("lm_amplifier_profile")["inputs"]
    assert key("lm_footprint")["inputs"] == key("lm_selection")["inputs"]
    decoder_studies = ("lm_amplifier", "lm_footprint", "lm_mechanism", "lm_family", "lm_position")
    assert len({key(n)["inputs"] for n in decoder_studies}) == 5
    study = resources.files(by_name["lm_amplifier"].study)
    assert key("lm_amplifier")["inputs"] == tree_digest(study)
    assert (study / "runs" / "amplifier_csa_v4.json").is_file()
    assert not (study / "train.py").is_file()  # the engine lies outside every study
    assert {key(n)["engine"] for n in decoder_studies} == {experiment_module.engine_inputs(ENGINE)}
    assert any((resources.files(p) / "train.py").is_file() for p in ENGINE)
    assert any((resources.files(p) / "model.py").is_file() for p in ENGINE)
    assert "engine" not in key("threshold")  # a toy experiment: its version alone
    # every decoder study trains with the engine, so every one declares it
    for e in EXPERIMENTS:
        if e.study is not None and ".decoder." in e.study:
            assert e.engine == ENGINE, e.name


def test_an_edit_to_the_engine_recomputes_a_study(tmp_path, monkeypatch):
    calls = []
    named = Experiment(
        "named",
        lambda size: calls.append(size) or {"size": size},
        lambda size, results: {},
        lambda results, predictions: [],
        sizes=sizes_by_name(),
        study="a.study",
        engine=("an.engine",),
    )
    digests = {"a.study": "s1", "an.engine": "e1"}
    monkeypatch.setattr(experiment_module, "study_inputs", lambda package: digests[package])
    monkeypatch.setattr(
        experiment_module, "engine_inputs", lambda packages: "+".join(digests[p] for p in packages)
    )
    evaluate(named, "quick", tmp_path)
    evaluate(named, "quick", tmp_path)
    assert calls == ["quick"]  # the second read the store
    digests["an.engine"] = "e2"
    assert not stored(tmp_path, "run", named, "quick")
    evaluate(named, "quick", tmp_path)
    assert calls == ["quick", "quick"]


def test_the_engine_digest_follows_each_package():
    digest = experiment_module.engine_inputs
    one = digest(("weakspots.sims.decoder",))
    assert one == digest(("weakspots.sims.decoder",))
    assert one != digest(("weakspots.idealized.decoder",))
    assert digest(("weakspots.idealized.decoder", "weakspots.sims.decoder")) != one


def test_the_tree_digest_sees_a_changed_a_new_and_a_renamed_file(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "a.json").write_text("{}")
    (tmp_path / "b.py").write_text("x = 1")
    (tmp_path / "notes.txt").write_text("left out")
    digest = lambda: tree_digest(tmp_path)  # noqa: E731
    first = digest()
    assert digest() == first
    (tmp_path / "notes.txt").write_text("changed, still left out")
    assert digest() == first
    (tmp_path / "runs" / "a.json").write_text('{"k": 1}')
    changed = digest()
    assert changed != first
    (tmp_path / "runs" / "c.json").write_text("{}")
    added = digest()
    assert added != changed
    (tmp_path / "runs" / "c.json").rename(tmp_path / "runs" / "d.json")
    assert digest() != added


@pytest.mark.slow
def test_linear_growth_rows_pass_and_a_wrong_prediction_fails():
    results, predictions, rows = evaluate(linear_growth.EXPERIMENT, "quick")
    assert len(rows) == sum(case[-1] for case in linear_growth.CASES.values())
    assert all(r.kind == "prediction" and r.passed for r in rows)
    assert all(r.predicted < 0 for r in rows if r.name.startswith("ce"))
    wrong = {loss: [1.01 * x for x in rates] for loss, rates in predictions.items()}
    assert not any(r.passed for r in linear_growth.rows(results, wrong))


def test_threshold_row_fails_when_the_bisection_has_no_bracket():
    # The measured bracket comes from the flow alone; where its ends do not straddle a change
    # the row must fail, not vanish, whatever the prediction.
    results = {"gains": [16.0], "low": [2.0], "high": [1024.0], "bracketed": [False]}
    (row,) = threshold.rows(results, {"critical_chunks": [15.78]})
    assert not row.passed and "no change between the ends" in row.config
    results["bracketed"] = [True]
    results["low"], results["high"] = [15], [16]
    assert threshold.rows(results, {"critical_chunks": [15.78]})[0].passed
    assert not threshold.rows(results, {"critical_chunks": [16.1]})[0].passed


def test_phase_diagram_rows_fail_without_an_sgd_bracket():
    results = {"sgd": [{"chunks": n, "ratio": 2.0, "support": 8} for n in (12, 24, 64)]}
    boundary = {"gain": [16.0], "chunks": [15.6]}
    predictions = {"escape_steps": 600, "escape_chunks": 14.6, "escape_boundary": boundary}
    rows = phase_diagram.rows(results, predictions)
    assert len(rows) == 3 and not any(r.passed for r in rows)
    assert [r.kind for r in rows] == ["prediction", "prediction", "consistency"]
    results["sgd"][2]["support"] = 3  # specialised at N = 64: bracket [24, 64]
    rows = phase_diagram.rows(results, predictions)
    assert [r.passed for r in rows] == [False] * 3  # 15.8, 15.6 and 14.6 all lie below 24
    results["sgd"][1]["support"] = 4  # bracket [12, 24]
    assert all(r.passed for r in phase_diagram.rows(results, predictions))


def _table(rows_of):
    return Experiment("table", lambda b: {}, lambda b, r: {}, lambda r, p: rows_of)


def test_cli_exit_code_json_and_counts(monkeypatch, capsys):
    rows = [Row(f"r{i}", "c", kind="prediction", predicted=1.0, ode=1.0, tolerance=0.0)
            for i in range(3)]  # fmt: skip
    monkeypatch.setattr(check_cli, "EXPERIMENTS", (_table(rows),))
    assert main(["check", "--quick", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 3 and all(set(r) == KEYS | {"experiment"} for r in out["rows"])
    assert out["counts"]["prediction"] == {"rows": 3, "failing": 0}
    bad = Row("bad", "c", kind="consistency", predicted=1.0, ode=2.0, tolerance=0.0)
    monkeypatch.setattr(check_cli, "EXPERIMENTS", (_table([*rows, bad]),))
    assert main(["check", "--quick", "--quiet"]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and "3 predictions, 0 failing" in text


@pytest.mark.slow
def test_quick_table_end_to_end(capsys):
    code = main(["check", "--quick", "--json", "--quiet"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) >= 12 and all(set(r) == KEYS | {"experiment"} for r in rows)
    failed = [r["name"] + " " + r["config"] for r in rows if not r["pass"]]
    assert code == (1 if failed else 0)
    assert not failed, failed
    assert {r["experiment"] for r in rows} == {e.name for e in EXPERIMENTS if not e.drawn}
    assert np.isfinite([r["rel_error"] for r in rows]).all()


@pytest.mark.slow
def test_threshold_bisection_finds_the_integer_pair_around_n_c():
    results, predictions, rows = evaluate(threshold.EXPERIMENT, "quick")
    assert all(results["bracketed"]) and all(r.passed for r in rows)
    for low, high, n_c in zip(
        results["low"], results["high"], predictions["critical_chunks"], strict=True
    ):
        assert high == low + 1 and low < n_c < high


def test_noise_tolerances_miss_at_the_stated_rate():
    # Intervals of the mean of 8 normal draws miss the true mean at FALSE_ALARM; over
    # 10,000 intervals the miss count is binomial, so 5 of its standard deviations bound it.
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(10000, 8))
    misses = sum(abs(d.mean()) > mean_half_width(d) for d in draws)
    expected = FALSE_ALARM * len(draws)
    assert abs(misses - expected) < 5 * np.sqrt(expected)
    # a known variance: 3 standard errors, the normal quantile at FALSE_ALARM
    assert normal_half_width(0.25 / 100) == pytest.approx(3 * 0.05, rel=1e-3)
    assert normal_half_width(0.25 / 100, comparisons=8) > normal_half_width(0.25 / 100)


def test_a_finding_that_does_not_hold_is_reported_not_failed():
    """A finding row 50% off reads not passed yet fails nothing; the same as a check fails."""
    common = dict(kind="prediction", predicted=1.0, sgd=1.5, tolerance=0.1)
    finding = Row("toy carries over", "c", finding=True, **common).as_dict()
    check = Row("closed form", "c", **common).as_dict()
    assert not finding["pass"] and not failing(finding)
    assert not check["pass"] and failing(check)
    assert kind_counts([finding, check])["prediction"] == {"rows": 2, "failing": 1}

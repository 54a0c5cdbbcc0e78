"""paper_repro.py end to end on cheap experiments at the tiny size: files, report, exit code,
reuse, the two-process split, and the threads that train structures at once."""

import csv
import dataclasses
import importlib.util
import io
import json
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims import experiments
from weakspots.sims.experiments import (
    EXPERIMENTS,
    Experiment,
    Row,
    Table,
    canonical,
)
from weakspots.sims.experiments.toy import finite_d_accuracy
from weakspots.sims.progress import Progress
from weakspots.sims.toy.train import train_many

ROOT = Path(__file__).resolve().parents[2]


def _paper_repro():
    spec = importlib.util.spec_from_file_location("paper_repro", ROOT / "paper_repro.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_repro"] = module
    spec.loader.exec_module(module)
    return module


def _rows(out: Path) -> list[dict]:
    with open(out / "report.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_one_figure_report_exit_code_and_rerun(tmp_path, monkeypatch):
    repro = _paper_repro()
    # One Monte Carlo dimension: each (N, d) compiles its own sampler, and the test needs none more.
    tiny = dataclasses.replace(finite_d_accuracy.SIZES["tiny"], dims=(64,))
    monkeypatch.setitem(finite_d_accuracy.SIZES, "tiny", tiny)
    argv = ["--tiny", "--only", "finite_d_accuracy", "--out", str(tmp_path)]
    code = repro.main(argv)
    for ext in ("png", "pdf"):
        assert (tmp_path / f"finite_d_accuracy.{ext}").stat().st_size > 1000
    report = (tmp_path / "REPORT.md").read_text()
    assert "![finite_d_accuracy](finite_d_accuracy.png)" in report
    assert "## Provenance" in report and "wall time" in report
    rows = _rows(tmp_path)
    checked = [r for r in rows if r["kind"] == "prediction" and r["finding"] != "True"]
    held = sum(r["pass"] == "True" for r in checked)
    assert f"**Predictions: {held} held, {len(checked) - held} failed.**" in report
    assert rows and set(rows[0]) >= {"experiment", "kind", "name", "predicted", "pass"}
    assert {r["kind"] for r in rows} == {"prediction"}
    failing = [r for r in rows if r["pass"] != "True"]
    assert code == (1 if failing else 0)
    assert ("**FAIL**" in report) == bool(failing)

    # A rerun reads the result store instead of simulating again.
    stored = sorted((tmp_path / "store" / "runs").glob("*.json"))
    assert stored
    mtimes = [p.stat().st_mtime_ns for p in stored]
    assert repro.main(argv) == code
    assert [p.stat().st_mtime_ns for p in stored] == mtimes

    # Any failing row (here of an experiment without a figure) makes the exit code 1.
    bad = Experiment(
        "always_fails",
        lambda size: {},
        lambda size, results: {},
        lambda results, predictions: [
            Row("x", "", kind="prediction", predicted=1.0, ode=2.0, tolerance=0.1)
        ],
        tables=lambda results, predictions: [Table("Sizes", ("design", "delta"), [("a", 0.25)])],
    )
    monkeypatch.setattr(repro, "registry", lambda: (*EXPERIMENTS, bad))
    assert repro.main(["--tiny", "--only", "always_fails", "--out", str(tmp_path)]) == 1
    report = (tmp_path / "REPORT.md").read_text()
    assert "**FAIL**" in report
    # an experiment's own table: in REPORT.md, and reloadable from tables.json
    assert "### always_fails" in report and "#### Sizes" in report and "| a | 0.25 |" in report
    table = json.loads((tmp_path / "tables.json").read_text())["always_fails"][0]
    assert table["columns"] == ["design", "delta"] and table["rows"] == [["a", 0.25]]


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_two_jobs_give_the_serial_run_numbers(tmp_path):
    # --jobs 2 makes the experiments in two processes (groups along their shared runs) and
    # merges them: the same rows, in registry order, as one process making both.
    repro = _paper_repro()
    names = ["growth_rate", "weak_spots"]  # one cheap experiment with SGD runs, one without
    chosen = [e for e in EXPERIMENTS if e.name in names]
    assert len(experiments.job_groups(chosen, "tiny", 2)) == 2
    both = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        code = repro.main(["--tiny", "--only", *names, "--out", str(out), "--jobs", str(jobs)])
        rows = _rows(out)
        failing = [r for r in rows if r["pass"] != "True"]
        assert code == (1 if failing else 0)
        report = (out / "REPORT.md").read_text()
        assert report.index("### weak_spots") < report.index("### growth_rate")
        assert f"with {jobs} process(es)" in report
        assert not list(out.glob(".worker-*"))
        both[jobs] = rows
    order = [e.name for e in EXPERIMENTS]
    assert [r["experiment"] for r in both[2]] == sorted(
        (r["experiment"] for r in both[2]), key=order.index
    )
    assert both[2] == both[1]


def test_step_relay_counts_steps_and_marks_compiling_ones_as_warmups():
    repro = _paper_repro()
    stream = io.StringIO()
    progress = Progress("paper_repro", "steps", total=4, stream=stream, in_place=False)
    warmups = []
    progress.update = lambda n, warmup: warmups.append(warmup)  # what the relay reports
    relay = repro.StepRelay(progress)
    relay({"message": "weak_spots: 40 s"})
    relay({"done": 1, "seconds": 100.0, "compile_seconds": 60.0}, job=0)  # mostly compiling
    relay({"done": 1, "seconds": 100.0, "compile_seconds": 70.0}, job=0)  # 10 s of 100
    relay({"done": 1, "seconds": 10.0, "compile_seconds": 8.0}, job=1)  # its own clock
    assert warmups == [True, False, True]
    assert "[paper_repro] weak_spots: 40 s" in stream.getvalue()


def test_job_groups_keep_each_experiment_with_its_closest_sharer():
    groups = experiments.job_groups(EXPERIMENTS, "quick", 2)
    assert len(groups) == 2
    assert sorted(e.name for g in groups for e in g) == sorted(e.name for e in EXPERIMENTS)
    group_of = {e.name: i for i, g in enumerate(groups) for e in g}
    cost = experiments.training_cost
    for a in EXPERIMENTS:  # in the group of the experiment it shares the most training with
        shared = {
            b.name: cost(set(a.configs(a.size_of("quick"))) & set(b.configs(b.size_of("quick"))))
            for b in EXPERIMENTS
            if b is not a
        }
        closest = max(shared, key=shared.get)
        if shared[closest] > 0:
            assert group_of[a.name] == group_of[closest], (a.name, closest)
    # weak_spots' runs are all among support_size's; head_ablation's 2-head run is mitigations'
    assert group_of["weak_spots"] == group_of["support_size"]
    assert group_of["head_ablation"] == group_of["mitigations"]
    for group in groups:  # registry order within a group
        assert [EXPERIMENTS.index(e) for e in group] == sorted(EXPERIMENTS.index(e) for e in group)
    assert experiments.job_groups(EXPERIMENTS, "quick", 1) == [list(EXPERIMENTS)]


@pytest.mark.slow
def test_structures_trained_in_threads_give_the_one_by_one_numbers(monkeypatch):
    # train_planned(workers > 1) trains several structures at once in threads, costliest
    # first; each structure is batched as it is alone, so the numbers are the same bit for bit.
    small = TrainConfig(stride=4, chunks=16, dim=16, gain=8.0, batch=64, steps=20,
                        eval_every=10, eval_samples=64)  # fmt: skip
    configs = [small.replace(seed=0), small.replace(seed=1, lr=0.5),
               small.replace(operator="max_pool"), small.replace(heads=2, seed=2)]  # fmt: skip
    planned = Experiment(
        "planned", lambda s: {}, lambda s, r: {}, lambda r, p: [], configs=lambda s: configs
    )
    monkeypatch.setattr(canonical, "_TRAINED", {})
    logged = []
    assert experiments.train_planned([planned], "tiny", workers=3, log=logged.append) == 4
    assert sorted(m.split(" (")[0] for m in logged) == [f"SGD structure {i}/3" for i in (1, 2, 3)]
    for config, alone in zip(configs, train_many(configs), strict=True):
        threaded = canonical._TRAINED[config]
        for a, b in zip(
            jax.tree.leaves(threaded.history), jax.tree.leaves(alone.history), strict=True
        ):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(threaded.step_loss, alone.step_loss)


def _row(experiment, kind, passed, finding=False, config="x" * 500):
    inf = float("inf")
    return {
        "experiment": experiment, "kind": kind, "name": f"{kind} row", "config": config,
        "predicted": 1.0, "ode": 1.0, "sgd": None, "rel_error": inf if finding else 0.01,
        "tolerance": inf if finding else 0.1, "pass": passed, "finding": finding,
    }  # fmt: skip


def test_report_leads_with_its_summary_then_figures_then_tables_by_experiment(tmp_path):
    # REPORT.md as a results section, from rows of two experiments (no simulation): the
    # counts first, each figure under its name with the title it drew, the tables after
    # every figure, grouped by experiment, configs and a finding's inf criteria left out.
    repro = _paper_repro()
    rows = [
        _row("weak_spots", "prediction", True),
        _row("weak_spots", "prediction", False),
        _row("weak_spots", "consistency", True),
        _row("lm_position", "fit", True, finding=True),
        _row("lm_position", "fit", False, finding=True),
        _row("lm_position", "fit", False, finding=True),
    ]
    made = {"weak_spots": ["first line.", "second line."], "lm_position": ["a.", "b."]}
    titles = {"weak_spots": "Title from the data", "lm_position": "No weak spot at this size"}
    tables = {"lm_position": [{"title": "Designs", "columns": ["design", "note"],
                               "rows": [["a", "y" * 400]], "note": ""}]}  # fmt: skip
    prov = {
        "command": "paper_repro.py --quick", "size": "quick", "wall_seconds": 1.0,
        "commit": "abc", "python": "3", "versions": {}, "device": "cpu", "cpus": 2,
        "load_average": (0.0, 0.0, 0.0), "jobs": 1, "step_seconds": {}, "cpu_seconds": 0.0,
        "step_cpu_seconds": {},
    }  # fmt: skip
    repro.write_report(tmp_path, rows, made, {}, prov, tables, titles)
    report = (tmp_path / "REPORT.md").read_text()
    first_screen = report[: report.index("## Figures")]
    assert "**Predictions: 1 held, 1 failed.**" in first_screen
    assert (
        "Consistency checks (the same system by another solver, sample or start): 1 held, 0 failed"
        in first_screen
    )
    assert (
        "Fits (they use the run's own learned weights or start): 0 held, 0 failed" in first_screen
    )
    assert "1 held, 2 not held" in first_screen and "\n|" not in first_screen  # no table
    figures_at, tables_at = report.index("## Figures"), report.index("## Tables by experiment")
    assert figures_at < report.index("### weak_spots") < report.index("### lm_position") < tables_at
    assert report.index("**Title from the data** (size `quick`)") < tables_at
    assert report.index("| kind |") > tables_at  # the first table comes after every figure
    assert report.index("#### Designs") > report.index("### lm_position", tables_at)
    assert "x" * 200 not in report and "y" * 200 not in report  # long cells: CSV and JSON
    assert "inf | inf" not in report and "finding not held" in report
    with open(tmp_path / "report.csv") as f:
        assert [r["config"] for r in csv.DictReader(f)] == ["x" * 500] * 6
    assert json.loads((tmp_path / "tables.json").read_text())["lm_position"][0]["rows"] == [
        ["a", "y" * 400]
    ]

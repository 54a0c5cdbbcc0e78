"""paper_repro.py end to end on one cheap figure at the tiny size: files, report, exit code, reuse."""

import csv
import dataclasses
import importlib.util
import sys
from pathlib import Path

import jax
import numpy as np

from weakspots.idealized.config import TrainConfig
from weakspots.sims import experiments
from weakspots.sims.experiments import _common
from weakspots.sims.train import train_many

ROOT = Path(__file__).resolve().parents[1]


def _paper_repro():
    spec = importlib.util.spec_from_file_location("paper_repro", ROOT / "paper_repro.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_repro"] = module
    spec.loader.exec_module(module)
    return module


def test_one_figure_report_exit_code_and_rerun(tmp_path, monkeypatch):
    repro = _paper_repro()
    monkeypatch.setattr(repro, "check_rows", lambda size_name: [])  # sims.check is tested alone
    # One Monte Carlo dimension: each (N, d) compiles its own sampler, and the test needs none more.
    tiny = dataclasses.replace(experiments.SIZES["tiny"], dims=(64,))
    monkeypatch.setitem(experiments.SIZES, "tiny", tiny)
    argv = ["--tiny", "--only", "finite_d_accuracy", "--out", str(tmp_path)]
    code = repro.main(argv)
    for ext in ("png", "pdf"):
        assert (tmp_path / f"finite_d_accuracy.{ext}").stat().st_size > 1000
    report = (tmp_path / "REPORT.md").read_text()
    assert "![finite_d_accuracy](finite_d_accuracy.png)" in report
    assert "## Provenance" in report and "wall time" in report
    with open(tmp_path / "report.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and set(rows[0]) >= {"name", "predicted", "sgd", "rel_error", "tolerance", "pass"}
    failing = [r for r in rows if r["pass"] != "True"]
    assert code == (1 if failing else 0)
    assert ("**FAIL**" in report) == bool(failing)

    # A rerun reads the result store instead of simulating again.
    stored = sorted((tmp_path / "store" / "runs").glob("*.json"))
    assert stored
    mtimes = [p.stat().st_mtime_ns for p in stored]
    assert repro.main(argv) == code
    assert [p.stat().st_mtime_ns for p in stored] == mtimes

    # Any failing row (here one injected as if from sims.check) makes the exit code 1.
    bad = {"name": "x", "config": "", "predicted": 1.0, "ode": 2.0, "sgd": None,
           "rel_error": 1.0, "tolerance": 0.1, "pass": False}  # fmt: skip
    monkeypatch.setattr(repro, "check_rows", lambda size_name: [{"figure": "check", **bad}])
    assert repro.main([*argv, "--check"]) == 1
    assert "**FAIL**" in (tmp_path / "REPORT.md").read_text()


def test_two_jobs_give_the_serial_run_numbers(tmp_path):
    # --jobs 2 makes the figures in two processes (the two groups of paper_repro.AFFINITY)
    # and merges them: the same rows, in FIGURES order, as one process making both.
    repro = _paper_repro()
    names = ["growth_rate", "weak_spots"]  # one cheap figure from each group
    assert len(repro.job_groups(names, 2)) == 2
    both = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        code = repro.main(["--tiny", "--only", *names, "--out", str(out), "--jobs", str(jobs)])
        with open(out / "report.csv") as f:
            rows = list(csv.DictReader(f))
        failing = [r for r in rows if r["pass"] != "True"]
        assert code == (1 if failing else 0)
        report = (out / "REPORT.md").read_text()
        assert report.index("### 1. weak_spots") < report.index("### 2. growth_rate")
        assert f"with {jobs} process(es)" in report
        assert not list(out.glob(".worker-*.json"))
        both[jobs] = rows
    assert [r["figure"] for r in both[2]] == sorted(
        (r["figure"] for r in both[2]), key=experiments.FIGURES.index
    )
    assert both[2] == both[1]


def test_structures_trained_in_threads_give_the_one_by_one_numbers(monkeypatch):
    # train_planned(workers > 1) trains several structures at once in threads, costliest
    # first; each structure is batched as it is alone, so the numbers are the same bit for bit.
    small = TrainConfig(stride=4, chunks=16, dim=16, gain=8.0, batch=64, steps=20,
                        eval_every=10, eval_samples=64)  # fmt: skip
    configs = [small.replace(seed=0), small.replace(seed=1, lr=0.5),
               small.replace(operator="max_pool"), small.replace(heads=2, seed=2)]  # fmt: skip
    monkeypatch.setattr(experiments, "planned_configs", lambda name, size: configs)
    monkeypatch.setattr(_common, "_TRAINED", {})
    logged = []
    size = experiments.SIZES["tiny"]
    assert experiments.train_planned(["x"], size, workers=3, log=logged.append) == 4
    assert sorted(m.split(" (")[0] for m in logged) == [f"SGD structure {i}/3" for i in (1, 2, 3)]
    for config, alone in zip(configs, train_many(configs), strict=True):
        threaded = _common._TRAINED[config]
        for a, b in zip(
            jax.tree.leaves(threaded.history), jax.tree.leaves(alone.history), strict=True
        ):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(threaded.step_loss, alone.step_loss)

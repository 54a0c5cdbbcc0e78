"""A new decoder study is its package (driver, experiment, recordings), its figure module and
one line in the registry: `paper_repro.py` evaluates, draws and reports it with nothing else
touched, and its store key follows its own recordings."""

import csv
import importlib
import importlib.util
import json
import sys
from pathlib import Path

from weakspots import figures
from weakspots.sims import experiments
from weakspots.sims.experiments import decoder as studies
from weakspots.sims.experiments import experiment as experiment_module

ROOT = Path(__file__).resolve().parents[2]
NAME = "lm_new_study"

# The study's one module: it reads its recording through its own package, as the project's do.
EXPERIMENT_MODULE = '''
import json
from importlib import resources

from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name

RECORDED = resources.files(__package__) / "runs"
CALLS = []


def run(size):
    CALLS.append(size)
    return json.loads((RECORDED / "gap.json").read_text())


def predict(size, results):
    return {"gap": 0.0}


def rows(results, predictions):
    return [Row("recorded gap", "the test's study", kind="prediction", predicted=0.0,
                sgd=results["gap"], tolerance=1.0, floor=1.0)]


EXPERIMENT = Experiment("lm_new_study", run, predict, rows, sizes=sizes_by_name(), drawn=True,
                        study=__package__)
'''

FIGURE_MODULE = '''
from weakspots.figures.style import figure

CAPTION = ("The recorded gap of the test's study.", "One bar.")


def make(results, predictions):
    fig, axes = figure(1, 1)
    ax = axes[0, 0]
    ax.bar([0], [results["gap"]])
    ax.set_xlabel("design")
    ax.set_ylabel("gap")
    ax.set_title("recorded gap")
    return fig
'''


def _paper_repro():
    spec = importlib.util.spec_from_file_location("paper_repro_new_study", ROOT / "paper_repro.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_new_study_is_its_package_its_figure_and_one_registry_line(tmp_path, monkeypatch):
    package = tmp_path / "src" / "new_study"
    (package / "runs").mkdir(parents=True)
    (package / "__init__.py").write_text('"""A study written by the test."""\n')
    (package / f"{NAME}.py").write_text(EXPERIMENT_MODULE)
    recording = package / "runs" / "gap.json"
    recording.write_text(json.dumps({"gap": 0.25}))
    drawings = tmp_path / "figures"
    drawings.mkdir()
    (drawings / f"{NAME}.py").write_text(FIGURE_MODULE)

    # the two folders join the packages' search paths, as files written into them would
    monkeypatch.setattr(studies, "__path__", [*studies.__path__, str(tmp_path / "src")])
    monkeypatch.setattr(figures, "__path__", [*figures.__path__, str(drawings)])
    new = [f"{studies.__name__}.new_study", f"{studies.__name__}.new_study.{NAME}"]
    new.append(f"{figures.__name__}.{NAME}")
    for name in new:
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module(f"{studies.__name__}.new_study.{NAME}")
    try:
        # the one registry line
        monkeypatch.setattr(experiments, "EXPERIMENTS", (*experiments.EXPERIMENTS, module.EXPERIMENT))
        vars(figures).pop("DRAWINGS", None)  # built anew from the registry on first use
        repro = _paper_repro()
        monkeypatch.setattr(repro, "enable_compilation_cache", lambda out: None)
        out = tmp_path / "out"
        argv = ["--tiny", "--only", NAME, "--out", str(out)]

        assert repro.main(argv) == 0
        assert (out / f"{NAME}.png").stat().st_size > 1000
        assert f"![{NAME}]({NAME}.png)" in (out / "REPORT.md").read_text()
        with open(out / "report.csv") as f:
            (row,) = [r for r in csv.DictReader(f) if r["experiment"] == NAME]
        assert float(row["sgd"]) == 0.25 and row["pass"] == "True"
        assert module.CALLS == ["tiny"]

        assert repro.main(argv) == 0  # unchanged: read from the store
        assert module.CALLS == ["tiny"]

        # a new recording of the study is evaluated, not read stale (the digest is computed
        # once per process: a new process would see it without the cache_clear)
        recording.write_text(json.dumps({"gap": 0.5}))
        experiment_module.study_inputs.cache_clear()
        assert repro.main(argv) == 0
        assert module.CALLS == ["tiny", "tiny"]
        with open(out / "report.csv") as f:
            (row,) = [r for r in csv.DictReader(f) if r["experiment"] == NAME]
        assert float(row["sgd"]) == 0.5
    finally:
        experiment_module.study_inputs.cache_clear()
        # built above with the test's study in it: the next use builds it from the registry
        # that monkeypatch restores (monkeypatch.delattr would first build it, from the
        # patched registry, and restore that)
        vars(figures).pop("DRAWINGS", None)
        for name in new:
            sys.modules.pop(name, None)

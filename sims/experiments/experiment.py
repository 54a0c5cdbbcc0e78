"""The experiment value, its agreement row and its sizes, and how an experiment is evaluated.

An `Experiment` bundles plain functions in one immutable value, as optax's
`GradientTransformation(init, update)` does; `size` is the experiment's own settings
record at one of `SIZE_NAMES` (`experiment.size_of("quick")`):

    results = experiment.run(size)                    # simulate: SGD, flows, Monte Carlo
    predictions = experiment.predict(size, results)   # what theory/ says about them
    rows = experiment.rows(results, predictions)      # list[Row]: one comparison each

`results` and `predictions` are plain JSON-able data, so the result store keeps them and
`figures/` only reads them. `evaluate(experiment, "quick", store_dir)` runs the three in
order and memoises the first two in the store, keyed by (experiment name, version, size
name and its settings): bump `version` when an experiment's output changes meaning. An
experiment that belongs to a study (`study`: the package holding its driver, its designs and
its recorded runs in `runs/`, as every decoder study does) also has that package's digest in
its key (`study_inputs`), so a changed design or a new recording is evaluated, not read
stale, while an edit to another study leaves its results stored; the packages it trains
with (`engine`: the decoder's model and trainer) join the key too, so an edit to the engine
recomputes every study that trains with it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from importlib import resources
from importlib.abc import Traversable
from typing import Any, Literal, NamedTuple

import jax
import numpy as np

from weakspots.idealized.precision import float64
from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims import store

Kind = Literal["prediction", "consistency", "fit"]
KINDS: tuple[Kind, ...] = ("prediction", "consistency", "fit")
# prediction:  derived; it does not integrate or simulate the system it is compared with.
# consistency: the same system by another solver, another sample or another start.
# fit:         uses the run's own learned weights or its own start.


@dataclass(frozen=True)
class Row:
    """One comparison of a prediction with what was measured.

    rel_error = max over the measured values (ode, sgd) of |measured - predicted| divided
    by max(|predicted|, floor); the row passes when rel_error <= tolerance and `holds` (a
    further condition, stated in `config`). A `finding` row asks an open research question
    (does one of the toy's predictions carry over to the decoders?) rather than checking
    the code: it is reported as held or not held and never counts as failing. `floor` keeps the error finite for predictions
    near 0: floor = 1 makes it absolute for quantities of order one (accuracies, delta_max).
    No measurement, a non-finite one or a non-finite prediction fails the row. `ode` is a flow (the
    reduced flow unless the row says otherwise), `sgd` the trainer or a Monte Carlo of
    the task.
    """

    name: str
    config: str
    _: KW_ONLY
    kind: Kind
    predicted: float
    ode: float | None = None
    sgd: float | None = None
    tolerance: float
    floor: float = 0.0
    holds: bool = True
    finding: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"row kind must be one of {KINDS}, got {self.kind!r}")
        for field in ("predicted", "ode", "sgd"):
            value = getattr(self, field)
            object.__setattr__(self, field, None if value is None else float(value))

    @property
    def rel_error(self) -> float:
        measured = [m for m in (self.ode, self.sgd) if m is not None]
        if not measured or not all(math.isfinite(m) for m in (self.predicted, *measured)):
            return math.inf
        error = max(abs(m - self.predicted) for m in measured)
        scale = max(abs(self.predicted), self.floor)
        if scale > 0.0:
            return error / scale
        return 0.0 if error == 0.0 else math.inf

    @property
    def passed(self) -> bool:
        return bool(self.rel_error <= self.tolerance and self.holds)

    def as_dict(self) -> dict:
        """name, config, kind, predicted, ode, sgd, rel_error, tolerance, pass, finding."""
        return {
            "name": self.name,
            "config": self.config,
            "kind": self.kind,
            "predicted": self.predicted,
            "ode": self.ode,
            "sgd": self.sgd,
            "rel_error": self.rel_error,
            "tolerance": float(self.tolerance),
            "pass": self.passed,
            "finding": self.finding,
        }


class Table(NamedTuple):
    """A table of an experiment for REPORT.md: `title`, `columns`, `rows` of cells (str, int,
    float or None; one per column) and a `note` printed under the title."""

    title: str
    columns: tuple[str, ...]
    rows: list[tuple]
    note: str = ""

    def as_dict(self) -> dict:
        """title, columns, rows, note as plain JSON-able values."""
        return jsonable(self._asdict())


SIZE_NAMES = ("tiny", "quick", "full")
"""How much of an experiment to run, the same physics at each: `tiny` for smoke tests (too
small to mean anything), `quick` for a report in minutes, `full` for what a paper prints."""


def same_at_every_size():
    """`SIZES` of an experiment whose work does not depend on its size: None at each."""
    return dict.fromkeys(SIZE_NAMES)


def sizes_by_name():
    """`SIZES` of an experiment whose study driver takes a size by its name (the decoder
    studies, each with its own settings at `SIZE_NAMES`): each record is its name."""
    return {name: name for name in SIZE_NAMES}


def no_sgd_runs(size) -> tuple[TrainConfig, ...]:
    """The `configs` of an experiment that trains nothing."""
    del size
    return ()


def no_difference(size, results: dict) -> dict:
    """`Experiment.predict` of a consistency check whose two computations should agree:
    their largest difference (results["max_difference"]) is predicted to be 0."""
    del size, results
    return {"max_difference": 0.0}


@dataclass(frozen=True)
class Experiment:
    """One experiment: its simulations, theory's predictions for them, and their comparison.

    name: unique; names the experiment's results in the store and, for one with a figure,
    the figure module that draws it (`figures.DRAWINGS[name]`) and the figure's files.
    sizes: the experiment's own settings at each of `SIZE_NAMES` (its module's `SIZES`: a
    small frozen record holding only what it uses, or None where nothing changes with
    size). run(size) -> results; predict(size, results) -> predictions; rows(results,
    predictions) -> list[Row], where `size` is the record `sizes[name]` (`size_of`).
    configs(size): the SGD runs `run` trains (`canonical.train`), declared so that a
    caller can train every experiment's runs at once (`sims.experiments.scheduler.train_planned`).
    version: bump it when the output changes meaning (stored results are then
    recomputed). drawn: whether `figures/` draws it (sims never imports matplotlib, so
    the drawing is found by name there). tables(results, predictions) -> list[Table]:
    tables for the report beside the rows (None: none). study: the dotted package of the
    experiment's study (its driver, designs and recorded `runs/`; `__package__` in the
    experiment's module), whose digest joins the store key; required where a size is only a
    name (`sizes_by_name`), since then the settings live in the study, not in the key.
    engine: the dotted packages whose code the study trains and measures with (the
    decoder's model and trainer: `sims.experiments.decoder.ENGINE`); their digest joins the
    store key beside the study's own.
    """

    name: str
    run: Callable[[Any], dict]
    predict: Callable[[Any, dict], dict]
    rows: Callable[[dict, dict], list[Row]]
    _: KW_ONLY
    sizes: Mapping[str, Any] = dataclasses.field(default_factory=same_at_every_size, hash=False)
    version: int = 1
    configs: Callable[[Any], Sequence[TrainConfig]] = no_sgd_runs
    drawn: bool = False
    tables: Callable[[dict, dict], list[Table]] | None = None
    study: str | None = None
    engine: tuple[str, ...] = ()

    def __post_init__(self):
        for part in ("run", "predict", "rows", "tables"):  # float64 as the theory needs
            if getattr(self, part) is not None:
                object.__setattr__(self, part, float64(getattr(self, part)))
        if set(self.sizes) != set(SIZE_NAMES):
            raise ValueError(f"{self.name}: sizes must be {SIZE_NAMES}, got {tuple(self.sizes)}")
        if self.study is None and any(isinstance(r, str) for r in self.sizes.values()):
            raise ValueError(
                f"{self.name}: a size given only by its name needs `study` (the package whose "
                "designs and recordings it reads), or its store key would miss them"
            )

    def size_of(self, name: str):
        """This experiment's own settings at size `name` (one of `SIZE_NAMES`)."""
        return self.sizes[name]

    def replace(self, **changes) -> Experiment:
        return dataclasses.replace(self, **changes)


def jsonable(x):
    """Numpy/jax values inside dicts and lists as JSON-able Python (lists, floats, ints)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, np.ndarray | jax.Array):
        return jsonable(np.asarray(x).tolist())
    if isinstance(x, np.generic):
        return x.item()
    return x


Part = Literal["run", "predict"]


def tree_digest(root: Traversable, suffixes=(".py", ".json")) -> str:
    """SHA-256 over the relative paths and bytes of the files under `root` (recursively,
    in sorted order) whose names end in one of `suffixes`."""
    digest = hashlib.sha256()

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            name = f"{prefix}{child.name}"
            if child.is_dir():
                walk(child, name + "/")
            elif child.name.endswith(suffixes):
                digest.update(name.encode() + b"\0" + child.read_bytes() + b"\0")

    walk(root, "")
    return digest.hexdigest()


@functools.cache
def study_inputs(package: str) -> str:
    """`tree_digest` of a study's package (its code, designs and recorded reports in `runs/`),
    computed once per process."""
    return tree_digest(resources.files(package))


def engine_inputs(packages: tuple[str, ...]) -> str:
    """SHA-256 over each package's name and `study_inputs` digest (each computed once per
    process), in the order given."""
    digest = hashlib.sha256()
    for package in packages:
        digest.update(package.encode() + b"\0" + study_inputs(package).encode() + b"\0")
    return digest.hexdigest()


def _store_key(part: Part, experiment: Experiment, size: str) -> dict:
    record = experiment.size_of(size)
    settings = dataclasses.asdict(record) if dataclasses.is_dataclass(record) else record
    key = {
        "part": part,
        "experiment": experiment.name,
        "version": experiment.version,
        "size": size,
        "settings": json.dumps(jsonable(settings), sort_keys=True),
    }
    if experiment.study is not None:
        key["inputs"] = study_inputs(experiment.study)
    if experiment.engine:
        key["engine"] = engine_inputs(experiment.engine)
    return key


def stored(store_dir, part: Part, experiment: Experiment, size: str) -> bool:
    """Whether `cached(store_dir, part, experiment, size, ...)` would read the store."""
    return store_dir is not None and store.has_run(
        store_dir, store.config_hash(_store_key(part, experiment, size))
    )


def cached(store_dir, part: Part, experiment: Experiment, size: str, compute) -> dict:
    """`compute()` as JSON-able data, once per (part, experiment, version, size and its
    settings) in the store."""
    if store_dir is None:
        return jsonable(compute())
    key = _store_key(part, experiment, size)
    run_hash = store.config_hash(key)
    if store.has_run(store_dir, run_hash):
        table = store.load(store_dir, on_damaged="skip")
        hit = table[table["hash"] == run_hash]
        if len(hit):
            return json.loads(hit["results_json"].iloc[0])
    out = jsonable(compute())
    store.write_run(store_dir, key, {"results_json": json.dumps(out)})
    return out


def failing(row: dict) -> bool:
    """Whether a row (`Row.as_dict()`) fails a check: it did not pass and is no finding."""
    return not row["pass"] and not row.get("finding", False)


def kind_counts(rows: Sequence[dict]) -> dict[Kind, dict[str, int]]:
    """Per kind: how many of `rows` (`Row.as_dict()`s) there are and how many fail."""
    return {
        kind: {
            "rows": sum(r["kind"] == kind for r in rows),
            "failing": sum(r["kind"] == kind and failing(r) for r in rows),
        }
        for kind in KINDS
    }


class Evaluation(NamedTuple):
    results: dict
    predictions: dict
    rows: list[Row]


def evaluate(experiment: Experiment, size: str, store_dir=None) -> Evaluation:
    """Run, predict and compare one experiment at size `size` (a name of `SIZE_NAMES`);
    results and predictions are kept in the store."""
    record = experiment.size_of(size)
    results = cached(store_dir, "run", experiment, size, lambda: experiment.run(record))
    predictions = cached(
        store_dir, "predict", experiment, size, lambda: experiment.predict(record, results)
    )
    return Evaluation(results, predictions, list(experiment.rows(results, predictions)))

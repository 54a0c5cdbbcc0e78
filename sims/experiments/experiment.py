"""The experiment value, its agreement row and its budget, and how an experiment is evaluated.

An `Experiment` bundles plain functions in one immutable value, as optax's
`GradientTransformation(init, update)` does:

    results = experiment.run(budget)                    # simulate: SGD, flows, Monte Carlo
    predictions = experiment.predict(budget, results)   # what theory/ says about them
    rows = experiment.rows(results, predictions)        # list[Row]: one comparison each

`results` and `predictions` are plain JSON-able data, so the result store keeps them and
`figures/` only reads them. `evaluate(experiment, budget, store_dir)` runs the three in
order and memoises the first two in the store, keyed by (experiment name, version,
budget): bump `version` when an experiment's output changes meaning.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal, NamedTuple

import jax
import numpy as np

from weakspots.idealized.config import TrainConfig
from weakspots.idealized.precision import float64
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


@dataclass(frozen=True)
class Budget:
    """How much of every experiment to run; the physics (canonical config) is the same at each."""

    name: str
    seeds: int  # SGD seeds per config
    eval_samples: int  # held-out needles per phase
    position_samples: int  # needles per phase for accuracy against position (weak_spots)
    flow_starts: int  # reduced-flow starts per config
    support_samples: int  # isotropic directions in theory.predicted_support_size
    mc_samples: int  # Monte Carlo needles per phase (finite_d_accuracy)
    ablate_samples: int  # needles per phase for the interventions (head_ablation)
    grid: int  # phase-diagram cells per axis
    chunks_sweep: tuple[int, ...]
    stride_sweep: tuple[int, ...]
    init_scales: tuple[float, ...]  # SGD init scales (specialization_time)
    heads: tuple[int, ...]
    dims: tuple[int, ...]  # Monte Carlo dimensions (finite_d_accuracy)
    weight_decays: tuple[float, ...]
    real_keys: bool  # train operators that need the real keys (max_pool, low_rank, deepseek_v4)
    steps: int = 600
    eval_every: int = 10

    @property
    def quick(self) -> bool:
        """Whether the checks without a figure use their smaller configs and samples."""
        return self.name != "full"


BUDGETS = {
    "tiny": Budget(
        "tiny", 1, 64, 256, 2, 8, 256, 16, 3, (12, 64), (8,), (0.01,), (1, 2), (16, 64),
        (0.0, 1e-3), False, steps=40, eval_every=20,
    ),
    "quick": Budget(
        "quick", 2, 512, 8192, 8, 32, 4096, 128, 10, (12, 24, 64, 256), (4, 8, 16),
        (1e-3, 1e-2, 1e-1), (1, 2, 4, 8), (16, 64, 256), (0.0, 1e-4, 3e-4, 1e-3), False,
    ),
    "full": Budget(
        "full", 8, 2048, 32768, 32, 256, 16384, 512, 24, (12, 16, 20, 24, 32, 64, 128, 256),
        (4, 6, 8, 12, 16), (1e-4, 1e-3, 1e-2, 1e-1, 3e-1), (1, 2, 4, 8),
        (16, 32, 64, 128, 256, 1024), (0.0, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3), True,
    ),
}  # fmt: skip


def no_sgd_runs(budget: Budget) -> tuple[TrainConfig, ...]:
    """The `configs` of an experiment that trains nothing."""
    del budget
    return ()


def no_difference(budget: Budget, results: dict) -> dict:
    """`Experiment.predict` of a consistency check whose two computations should agree:
    their largest difference (results["max_difference"]) is predicted to be 0."""
    del budget, results
    return {"max_difference": 0.0}


def drawn_in_figures(results: dict, predictions: dict):
    """`Experiment.figure` of an experiment that `figures/<name>.py` draws.

    It marks the experiment as having a figure; `figures.EXPERIMENTS` replaces it with the
    figure module's `make` (sims never imports matplotlib).
    """
    raise RuntimeError("this figure is drawn in figures/: use weakspots.figures.EXPERIMENTS")


@dataclass(frozen=True)
class Experiment:
    """One experiment: its simulations, theory's predictions for them, and their comparison.

    name: unique; names the figure's files and the experiment's results in the store.
    run(budget) -> results; predict(budget, results) -> predictions; rows(results,
    predictions) -> list[Row]. configs(budget): the SGD runs `run` trains
    (`canonical.train`), declared so that a caller can train every experiment's runs at
    once (`sims.experiments.train_planned`). version: bump it when the output changes
    meaning (stored results are then recomputed). figure(results, predictions) -> a
    matplotlib Figure, and its two-line caption: None for an experiment that is only a
    table; `drawn_in_figures` in sims for one that `figures/` draws, which
    `figures.EXPERIMENTS` replaces with the drawing (sims never imports matplotlib).
    tables(results, predictions) -> list[Table]: tables for the report beside the rows
    (None: none).
    """

    name: str
    run: Callable[[Budget], dict]
    predict: Callable[[Budget, dict], dict]
    rows: Callable[[dict, dict], list[Row]]
    _: KW_ONLY
    version: int = 1
    configs: Callable[[Budget], Sequence[TrainConfig]] = no_sgd_runs
    figure: Callable[[dict, dict], Any] | None = None
    caption: tuple[str, ...] = ()
    tables: Callable[[dict, dict], list[Table]] | None = None

    def __post_init__(self):
        for part in ("run", "predict", "rows", "tables"):  # float64 as the theory needs
            if getattr(self, part) is not None:
                object.__setattr__(self, part, float64(getattr(self, part)))

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


def _store_key(part: Part, experiment: Experiment, budget: Budget) -> dict:
    return {
        "part": part,
        "experiment": experiment.name,
        "version": experiment.version,
        "budget": json.dumps(dataclasses.asdict(budget), sort_keys=True),
    }


def stored(store_dir, part: Part, experiment: Experiment, budget: Budget) -> bool:
    """Whether `cached(store_dir, part, experiment, budget, ...)` would read the store."""
    return store_dir is not None and store.has_run(
        store_dir, store.config_hash(_store_key(part, experiment, budget))
    )


def cached(store_dir, part: Part, experiment: Experiment, budget: Budget, compute) -> dict:
    """`compute()` as JSON-able data, once per (part, experiment, version, budget) in the store."""
    if store_dir is None:
        return jsonable(compute())
    key = _store_key(part, experiment, budget)
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


def evaluate(experiment: Experiment, budget: Budget, store_dir=None) -> Evaluation:
    """Run, predict and compare one experiment; results and predictions are kept in the store."""
    results = cached(store_dir, "run", experiment, budget, lambda: experiment.run(budget))
    predictions = cached(
        store_dir, "predict", experiment, budget, lambda: experiment.predict(budget, results)
    )
    return Evaluation(results, predictions, list(experiment.rows(results, predictions)))

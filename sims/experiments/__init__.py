"""Experiment drivers for the paper's theory figures: one `run_<name>` and `predict_<name>` each.

`run_<name>(size, store_dir)` returns what the simulations measured (SGD on the finite-d
model, the reduced flow of THEORY 5, Monte Carlo), `predict_<name>(size, results)` what
`theory/` says about the same quantities, and `rows_<name>(results, predictions)` the
agreement rows (the `weakspots check` format: name, config, predicted, ode, sgd,
rel_error, tolerance, pass). Everything returned is plain JSON-able data (lists, floats,
strings), so `figures/` only reads it and the result store (`sims.store`) keeps it:
`cached(...)` reuses a stored result whose figure, size and driver version match.

Conventions shared by every figure: canonical physics (stride 8, 64 chunks, d = 64, gain
16, SGD lr 2, batch 256, 600 steps, so gradient-flow time t = lr x steps = 1200); the
order parameter delta = |log alpha - mean log alpha| (theory.specialization_order); a phase
is covered when its pooling weight exceeds 1/(2s) (idealized.metrics.support_size).

One module per figure (`sims.experiments.<name>`); the plumbing they share is in
`_common`. Every prediction comes from `theory/`; the drivers only run and compare.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import time

from weakspots.sims.experiments._common import (
    FIGURES,
    SIZES,
    VERSIONS,
    Size,
    cached,
    plain,
    row,
    stored,
    train,
)

__all__ = [
    "FIGURES",
    "SIZES",
    "VERSIONS",
    "Size",
    "agreement_rows",
    "cached",
    "experiment",
    "plain",
    "row",
    "planned_configs",
    "train_planned",
]


def _module(name: str):
    """The module `sims.experiments.<name>` of figure `name`."""
    if name not in FIGURES:
        raise KeyError(f"unknown figure {name!r}; one of {', '.join(FIGURES)}")
    return importlib.import_module(f"weakspots.sims.experiments.{name}")


def experiment(name: str):
    """(run, predict, rows) of figure `name`, from its module `sims.experiments.<name>`."""
    module = _module(name)
    return (
        getattr(module, f"run_{name}"),
        getattr(module, f"predict_{name}"),
        getattr(module, f"rows_{name}"),
    )


def agreement_rows(name: str, results: dict, predictions: dict) -> list[dict]:
    """The agreement rows of one figure's runs (the `weakspots check` row format)."""
    return experiment(name)[2](results, predictions)


def planned_configs(name: str, size: Size) -> list:
    """The SGD runs figure `name` trains at `size` (its module's `configs_<name>`; [] if none)."""
    configs = getattr(_module(name), f"configs_{name}", None)
    return [] if configs is None else list(configs(size))


def train_planned(names, size: Size, store_dir=None, log=None, workers: int = 1) -> int:
    """Train, together, every run the figures `names` will ask for and have not stored.

    Runs that share `TrainConfig.static` then share one compiled program across figures
    (weak_spots, phase_diagram, specialization_time and support_size all train the
    canonical structure); the figures find them in the in-process memo. `log(message)`
    hears of each finished structure. Returns the number of distinct runs trained.

    With `workers > 1`, that many structures train at once in threads, the costliest
    first (`_work`): XLA:CPU runs a training program on about one core, and jax releases
    the GIL while it runs. Each structure's runs are batched as with one worker, so every
    number is the same, bit for bit.
    """
    configs = [
        c
        for name in names
        if not stored(store_dir, "run", name, size)
        for c in planned_configs(name, size)
    ]
    groups: dict = {}
    for config in dict.fromkeys(configs):
        groups.setdefault(config.static, []).append(config)
    start = time.perf_counter()
    finished = iter(range(1, len(groups) + 1))  # next() is atomic under the GIL

    def train_structure(static, members) -> None:
        train(members)
        if log is not None:
            log(
                f"SGD structure {next(finished)}/{len(groups)} ({_describe(static)}): "
                f"{len(members)} run(s), {time.perf_counter() - start:.0f} s so far"
            )

    if workers <= 1:
        for static, members in groups.items():
            train_structure(static, members)
    else:
        costliest = sorted(groups.items(), key=lambda item: -_work(item[0], len(item[1])))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for done in [pool.submit(train_structure, *item) for item in costliest]:
                done.result()  # re-raises a structure's error
    return sum(len(m) for m in groups.values())


def _work(config, runs: int) -> float:
    """A rough cost of training `runs` runs of `config`, for ordering structures only.

    Numbers sampled per run: every training step and held-out needle draws `chunks *
    stride` inner products per head, or with real keys (`not uses_gram`) `dim` numbers
    each, which `dim x dim` projections then map: two for `deepseek_v4` (values and gate),
    one otherwise. At --full deepseek_v4 is the costliest structure (1800 s alone against
    max_pool's 945 and low_rank's 355); at equal estimates it started last, on one core.
    """
    evaluations = config.eval_times + 1  # the initial state's included
    needles = config.steps * config.batch + evaluations * config.stride * config.eval_samples
    per_needle = config.chunks * config.stride * config.heads
    if not config.uses_gram:
        projections = 2 if config.operator == "deepseek_v4" else 1
        per_needle *= projections * config.dim * config.dim
    return float(runs * needles * per_needle)


def _describe(config) -> str:
    """The fields of a static config that differ from the canonical one (or 'canonical')."""
    canonical = type(config)()
    changed = [
        f"{f.name}={getattr(config, f.name)}"
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(canonical, f.name)
        and f.name not in ("steps", "eval_every", "eval_samples")
    ]
    return ", ".join(changed) or "canonical"

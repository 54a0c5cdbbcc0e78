"""Scheduling experiments: train every SGD run a set of experiments will ask for at once
(`train_planned`), and split experiments into processes along their shared runs
(`job_groups`); `training_cost` weighs runs for both."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import time
from collections.abc import Callable, Sequence

from weakspots.idealized.operators.registry import lookup
from weakspots.sims.experiments.canonical import train
from weakspots.sims.experiments.experiment import Experiment, stored


def train_planned(
    experiments: Sequence[Experiment],
    size: str,
    store_dir=None,
    log: Callable[[str], None] | None = None,
    workers: int = 1,
) -> int:
    """Train, together, every SGD run the `experiments` will ask for at size `size` (a name
    of `SIZE_NAMES`) and have not stored.

    Runs that share `TrainConfig.static` then share one compiled program across
    experiments; the experiments find them in the in-process memo (`canonical.train`).
    `log(message)` hears of each finished structure. Returns the number of distinct runs
    trained.

    With `workers > 1`, that many structures train at once in threads, the costliest
    first (`training_cost`): XLA:CPU runs a training program on about one core, and jax
    releases the GIL while it runs. Each structure's runs are batched as with one worker,
    so every number is the same, bit for bit.
    """
    configs = [
        c
        for experiment in experiments
        if not stored(store_dir, "run", experiment, size)
        for c in experiment.configs(experiment.size_of(size))
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
                f"SGD structure {next(finished)}/{len(groups)} ({changed_fields(static)}): "
                f"{len(members)} run(s), {time.perf_counter() - start:.0f} s so far"
            )

    if workers <= 1:
        for static, members in groups.items():
            train_structure(static, members)
    else:
        costliest = sorted(groups.items(), key=lambda item: -training_cost(item[1]))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for done in [pool.submit(train_structure, *item) for item in costliest]:
                done.result()  # re-raises a structure's error
    return sum(len(m) for m in groups.values())


def training_cost(configs) -> float:
    """A rough cost of training `configs`, for ordering and balancing work only.

    Numbers sampled per run: every training step and held-out needle draws `chunks *
    stride` inner products per head, or with real keys (`not uses_gram`) `dim` numbers
    each, which `dim x dim` projections then map: two for `deepseek_v4` (values and gate),
    one otherwise.
    """
    total = 0.0
    for config in configs:
        evaluations = config.eval_times + 1  # the initial state's included
        needles = config.steps * config.batch + evaluations * config.stride * config.eval_samples
        per_needle = config.chunks * config.stride * config.heads
        if not config.uses_gram:
            projections = lookup(config.operator).projections
            per_needle *= projections * config.dim * config.dim
        total += float(needles * per_needle)
    return total


def changed_fields(config) -> str:
    """The fields of a static config that differ from the canonical one (or 'canonical')."""
    canonical = type(config)()
    changed = [
        f"{f.name}={getattr(config, f.name)}"
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(canonical, f.name)
        and f.name not in ("steps", "eval_every", "eval_samples")
    ]
    return ", ".join(changed) or "canonical"


def job_groups(
    experiments: Sequence[Experiment], size: str, jobs: int
) -> list[list[Experiment]]:
    """`experiments` at size `size` (a name of `SIZE_NAMES`) split into at most `jobs`
    groups, to be made in as many processes.

    Each experiment stays in one group with the experiment it shares the most SGD training
    with (`Experiment.configs`, weighed by `training_cost`), so a run is trained twice
    only where an experiment shares it with more than one group. The groups so linked
    are then dealt out costliest first to the least loaded job; a group costs the training
    of its runs plus, for each experiment, the mean training per experiment (a stand-in
    for its own flows, Monte Carlo and predictions, not known in advance). Within a job
    the registry's order is kept.
    """
    if jobs <= 1:
        return [list(experiments)]
    runs = [set(e.configs(e.size_of(size))) for e in experiments]
    parent = list(range(len(experiments)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(experiments)):
        shared = [(training_cost(runs[i] & runs[j]), -j) for j in range(len(runs)) if j != i]
        most, j = max(shared, default=(0.0, 0))
        if most > 0.0:
            parent[root(i)] = root(-j)
    linked: dict[int, list[int]] = {}
    for i in range(len(experiments)):
        linked.setdefault(root(i), []).append(i)

    own = training_cost(set().union(*runs)) / len(experiments) or 1.0

    def cost(members):
        return training_cost(set().union(*(runs[i] for i in members))) + own * len(members)

    loads = [0.0] * jobs
    assigned: list[list[int]] = [[] for _ in range(jobs)]
    for members in sorted(linked.values(), key=lambda m: (-cost(m), m[0])):
        j = loads.index(min(loads))
        assigned[j] += members
        loads[j] += cost(members)
    return [[experiments[i] for i in sorted(members)] for members in assigned if members]

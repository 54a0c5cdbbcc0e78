"""`sims.experiments.decoder.prefetch` and `weakspots lm prefetch`: a size's decoders trained in shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from weakspots.cli import main
from weakspots.sims.decoder import carry, checkpoint
from weakspots.sims.experiments.decoder import prefetch
from weakspots.sims.experiments.decoder.ablation import study
from weakspots.sims.experiments.decoder.amplifier import study as amplifier
from weakspots.sims.experiments.decoder.family import study as family
from weakspots.sims.experiments.decoder.footprint import study as footprint


def test_groups_are_what_each_study_trains():
    """The groups at full are the configs the studies' own enumerations give, seeds included."""
    every = prefetch.groups("full")
    groups = {g.name: g.configs for g in every}
    assert len(groups) == len(every)  # names are unique
    for arm, design, seq_len in amplifier.cells("full"):
        config = amplifier.design_config("full", arm, design, seq_len)
        assert groups[f"amplifier:{arm}:{design}:T{seq_len}"] == tuple(
            config.replace(seed=s) for s in range(amplifier.seeds_of("full", design, arm))
        )
    for name in ("footprint", "selection"):
        for design in footprint.FAMILIES[name]:
            config = footprint.design_config(name, design, "full")
            assert groups[f"{name}:{design}"][0] == config
            assert len(groups[f"{name}:{design}"]) == footprint.SEEDS
    assert {c for k, g in groups.items() if k.startswith("family:") for c in g} == set(
        family.configs("full")
    )
    assert groups["mechanism:mean_s8"] == tuple(
        study.config("mean_s8", "full").replace(seed=s) for s in range(study.SEEDS)
    )
    # quick reads recordings: nothing to train
    assert prefetch.groups("quick") == []
    # the CLI's choices (listed without importing jax) are the studies
    from weakspots.cli.lm import PREFETCH_STUDIES

    assert PREFETCH_STUDIES == tuple(prefetch.STUDIES)


@pytest.mark.parametrize("count", [1, 3, 16])
def test_shares_cover_every_group_once_and_balance_the_estimated_cost(count):
    every = prefetch.groups("full")
    shares = prefetch.shares(every, count)
    assert sorted(g.name for s in shares for g in s) == sorted(g.name for g in every)
    assert shares == prefetch.shares(list(every), count)  # depends only on the groups
    loads = [sum(g.cost for g in s) for s in shares]
    # greedy largest-first: no share exceeds another by more than the largest group
    assert max(loads) - min(loads) <= max(g.cost for g in every)


def test_bad_input_is_refused(capsys):
    with pytest.raises(ValueError, match="unknown study 'nope'"):
        prefetch.groups("full", ["nope"])
    with pytest.raises(ValueError, match="count must be >= 1"):
        prefetch.shares([], 0)
    assert main(["lm", "prefetch", "--slice", "2/2", "--dry-run"]) == 2
    assert "--slice: need 0 <= i < n" in capsys.readouterr().err


def test_dry_run_lists_one_share(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WEAKSPOTS_LM_CACHE", str(tmp_path))
    assert main(["lm", "prefetch", "--slice", "1/4", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    expected = prefetch.shares(prefetch.groups("full"), 4)[1]
    assert [g["group"] for g in out["groups"]] == [g.name for g in expected]
    assert out["groups_in_size"] == len(prefetch.groups("full"))
    assert not any(g["cached"] for g in out["groups"])


@pytest.mark.slow
def test_two_processes_fill_one_cache_that_the_study_then_only_reads(tmp_path, monkeypatch):
    """Two `lm prefetch` processes, shares 0/2 and 1/2, train the tiny amplifier study into one
    cache; the study then trains nothing, and its numbers are those of training anew."""
    env = {**os.environ, "WEAKSPOTS_LM_CACHE": str(tmp_path)}
    command = [sys.executable, "-m", "weakspots", "lm", "prefetch", "--size", "tiny",
               "--studies", "amplifier", "--json", "--quiet"]  # fmt: skip
    procs = [
        subprocess.Popen([*command, "--slice", f"{i}/2"], env=env, stdout=subprocess.PIPE)
        for i in range(2)
    ]
    outs = [json.loads(p.communicate(timeout=600)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    done = sorted(g["group"] for o in outs for g in o["groups"])
    assert done == sorted(g.name for g in prefetch.groups("tiny", ["amplifier"]))
    assert all(o["groups"] for o in outs)  # both shares had work
    assert not any(g["cached"] for o in outs for g in o["groups"])

    monkeypatch.setenv("WEAKSPOTS_LM_CACHE", str(tmp_path))

    def refuse(*args, **kwargs):
        raise AssertionError("the study trained a decoder the cache should hold")

    with monkeypatch.context() as patched:
        patched.setattr(checkpoint, "train_many", refuse)
        from_cache = amplifier.run.__wrapped__("tiny")
    arm, design, seq_len = amplifier.cells("tiny")[0]
    config = amplifier.design_config("tiny", arm, design, seq_len)
    seeds = amplifier.seeds_of("tiny", design, arm)
    fresh = carry.report(
        config, checkpoint.trained([config.replace(seed=s) for s in range(seeds)], directory=None)
    )
    assert json.dumps(from_cache["cells"][0]["report"], sort_keys=True) == json.dumps(
        fresh, sort_keys=True
    )


def test_full_budget_charges_every_cell_of_the_full_grid(monkeypatch):
    """`benchmarks.full_budget`: every cell of the amplifier's full grid is charged its
    (arm, context)'s measured reference (V4, or csa_add's base) or dense step cost x its
    steps x its seeds."""
    from weakspots.benchmarks import full_budget

    cost = {}

    def fake(config, steps):
        key = (
            config.layout,
            config.seq_len,
            config.operator == "none",
            config.separate_values,
            config.pairs,
        )
        cost[key] = 1e-3 * len(cost) + 1e-3  # a distinct cost per measured config
        return {"cpu": cost[key], "wall": cost[key], "compile": 0.0}

    monkeypatch.setattr(full_budget, "step_cost", fake)
    budget = full_budget.amplifier_budget()
    cells = amplifier.cells("full")
    assert len(budget["charged"]) == len(cells) == budget["cells"]
    expected = 0.0
    for arm, design, seq_len in cells:
        config = amplifier.design_config("full", arm, design, seq_len)
        per_step = cost[
            (config.layout, seq_len, design == "dense", config.separate_values, config.pairs)
        ]
        steps = 1000 if "_add" in arm else 4000  # the *_add arms: 1000 at every size
        steps = amplifier.BUDGETS.get(design, {}).get("steps", steps)  # a budget design's own
        expected += per_step * steps * amplifier.seeds_of("full", design, arm)
    assert budget["cpu_hours"] == pytest.approx(expected / 3600, rel=1e-12)

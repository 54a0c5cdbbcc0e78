"""What the amplifier study's `--full` grid costs to train, from measured step costs.

`sims.experiments.decoder.amplifier.study.SIZES["full"]` trains every design of the CSA and HCA arms at three
contexts, 4 seeds of 4000 steps each, and the `csa_add`, `csa_add16`, `csa_add20` and
`hca_add` arms at one context each, 4 seeds of 1000 steps. This measures, per (arm,
context), the CPU seconds of one training step of one seed (a block of `--steps` steps and
its held-out evaluation, after compiling) for the arm's reference design (V4's, or the
base) and for the dense control, whose attention grows as T^2, and multiplies out the
grid: the other designs are charged their reference's cost
(an ablation removes a part of V4's layer, so costs V4's or less; an addition puts one part
into the base, so costs about the base's, a little more). The carry tests and the phase
evaluation after training are not counted. Prints a JSON with the per-step costs and the
total CPU-hours.

    python -m weakspots.benchmarks.full_budget [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from weakspots.benchmarks import lm_throughput
from weakspots.idealized.precision import float64_module
from weakspots.sims.experiments.decoder.amplifier import study as amplifier


def step_cost(config, steps: int) -> dict:
    """CPU and wall seconds per training step of one seed of `config` (a block of `steps`
    steps ending in its held-out evaluation, timed after a first, compiling call)."""
    config = config.replace(steps=steps, eval_every=steps).static
    start = time.perf_counter()
    block = lm_throughput.batched_block(config, 1)  # compiled and run once
    compile_seconds = time.perf_counter() - start
    wall, cpu = lm_throughput._timed(block)
    return {"cpu": cpu / steps, "wall": wall / steps, "compile": compile_seconds}


def amplifier_budget(steps: int = 4, log=lambda _: None) -> dict:
    """Per (arm, context): the measured step costs of its reference design and `dense`; per
    cell of the full grid its charged cost; the total CPU-hours."""
    size = "full"
    measured = {}
    cells = amplifier.cells(size)
    for arm, seq_len in dict.fromkeys((a, t) for a, _, t in cells):
        for design in (amplifier.REFERENCE[arm], "dense"):
            log(f"{arm} T={seq_len} {design}")
            config = amplifier.design_config(size, arm, design, seq_len)
            measured[f"{arm}/{seq_len}/{design}"] = step_cost(config, steps)
    charged = []
    for arm, design, seq_len in cells:
        key = f"{arm}/{seq_len}/{'dense' if design == 'dense' else amplifier.REFERENCE[arm]}"
        seeds = amplifier.seeds_of(size, design, arm)
        train_steps = amplifier.design_config(size, arm, design, seq_len).steps
        cpu = measured[key]["cpu"] * train_steps * seeds
        charged.append(dict(arm=arm, design=design, seq_len=seq_len, seeds=seeds,
                            steps=train_steps, charged_as=key, cpu_seconds=cpu))  # fmt: skip
    total = sum(c["cpu_seconds"] for c in charged)
    return {
        "steps_per_seed": amplifier.SIZES[size]["config"]["steps"],
        "cells": len(charged),
        "step_cost": measured,
        "charged": charged,
        "cpu_hours": total / 3600,
        "by_context_cpu_hours": {
            str(t): sum(c["cpu_seconds"] for c in charged if c["seq_len"] == t) / 3600
            for t in dict.fromkeys(c["seq_len"] for c in charged)
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="steps per timed block")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps: must be an integer >= 1, got {args.steps}")
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"full_budget [{time.perf_counter() - start:6.1f}s]: {message}", file=sys.stderr)

    print(json.dumps(amplifier_budget(args.steps, log), indent=1))


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    main()

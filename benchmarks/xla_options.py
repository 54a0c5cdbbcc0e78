"""The trainer compiled with `idealized.xla.COMPILER_OPTIONS` against XLA's defaults, in one run.

Times a jitted, run-vmapped block of canonical training steps (`sims.toy.train.advance`, no
evaluation) compiled both ways, rounds interleaved, and prints the paired ratio
default/ours of the step time (wall and CPU), each form's compile time, and the largest
difference between the two forms' step losses (float32 rounding, nothing more).
With the options empty (jax older than `idealized.xla.FUSION_EMITTER_OPTION_SINCE`) the
two forms are the same program and the ratio is 1.

    python -m weakspots.benchmarks.xla_options --runs 2 --steps 100 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial

import jax
import numpy as np

from weakspots.benchmarks import timing
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.xla import COMPILER_OPTIONS
from weakspots.sims.toy import train as trainer

SETTINGS = {  # the configs whose steps paper_repro trains most
    "canonical": {},
    "two_heads": {"heads": 2},
    "stride_16": {"stride": 16},
}


def step_block(config: TrainConfig, runs: int, options: dict):
    """A compiled call that trains `runs` runs of `config` for `config.eval_every` steps."""
    hyper = trainer.Hyper.stack([config.replace(seed=seed) for seed in range(runs)])
    states = jax.jit(jax.vmap(partial(trainer.init, config)))(hyper)
    advance = jax.jit(jax.vmap(partial(trainer.advance, config)), compiler_options=options)
    start = time.perf_counter()
    compiled = advance.lower(states, hyper).compile()
    compile_seconds = time.perf_counter() - start
    return (lambda: compiled(states, hyper)), compile_seconds


def compare(runs: int = 2, steps: int = 100, repeats: int = 3, log=lambda _: None) -> dict:
    """Per setting: default/ours step-time ratios, compile seconds, largest loss difference."""
    out = {}
    for name, changes in SETTINGS.items():
        config = TrainConfig(eval_every=steps, **changes).static
        log(f"xla options {name}: compiling both forms")
        ours, compile_ours = step_block(config, runs, COMPILER_OPTIONS)
        default, compile_default = step_block(config, runs, {})
        calls = {"ours": ours, "default": default}
        losses = {k: np.asarray(call()[1]) for k, call in calls.items()}
        times = timing.interleaved(calls, repeats)
        work = {k: runs * steps for k in calls}
        out[name] = {
            "speedup": timing.ratios(times, work, "ours", "default"),
            "compile_seconds": {"ours": compile_ours, "default": compile_default},
            "max_loss_difference": float(np.max(np.abs(losses["ours"] - losses["default"]))),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"options: {COMPILER_OPTIONS or 'none (XLA defaults)'}")
    result = compare(args.runs, args.steps, args.repeats, log=print)
    print(json.dumps(result, indent=1))


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    main()

"""Where the trainer's time goes, against the RNG limit: programs that stop at each stage.

Each program trains (or only draws for) the same canonical batch of runs for the same
steps, `vmap` over runs and `lax.scan` over steps as the trainer does, compiled as the
trainer is (`idealized.xla.jit`); they differ only in how much of a training step they
do. Timed in interleaved rounds, each is reported as its time over the RNG limit's in
the same round (median over rounds), so the increments between rows are the shares of
the stages:

    rng_limit     the random numbers one exact step needs (`benchmarks/rng_limit.py`)
    sampler       + the batch as the trainer draws it (`sample_batch`: chunks and phases,
                    norms, the needle's entry), summed
    forward       + the logits and the loss
    gradient      + the backward pass and a plain SGD update of the pooling logits
    step          `sims.toy.train.step`: + optax (`inject_hyperparams`) and the step mask
    block         `eval_every` steps and one evaluation, as one program (`_advance_many`)
    run_batch     the whole `sims.toy.train.run_batch` over `--blocks` blocks (every evaluation,
                    the initial one included, and the host's work), per block

With `--trace DIR`, also the time of each XLA:CPU kernel of one `run_batch`
(`jax.profiler`), summed per kernel name over every thread.

    python -m weakspots.benchmarks.trainer_profile [--runs 16] [--blocks 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import time
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from weakspots.benchmarks import rng_limit
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.loss import objective
from weakspots.idealized.toy.task import sample_batch, split_key
from weakspots.idealized.xla import jit
from weakspots.sims.toy import train as trainer


def _scanned(config: TrainConfig, one_step):
    """`one_step(state, hyper) -> (state, value)` for `eval_every` steps, vmapped over runs."""

    @jit
    def run(states, hyper):
        def one(state, h):
            return jax.lax.scan(lambda s, _: one_step(s, h), state, None, length=config.eval_every)[
                1
            ]

        return jax.vmap(one)(states, hyper)

    return run


def _draw(config: TrainConfig, state):
    key, k_batch = split_key(state.key)
    batch = sample_batch(k_batch, config.model, config.batch, keys=False, dtype=trainer.DTYPE)
    return eqx.tree_at(lambda s: s.key, state, key), batch


def stage_programs(config: TrainConfig, runs: int, blocks: int) -> dict:
    """The programs of the module docstring, each a no-argument callable.

    Each runs `eval_every` steps per run, but `run_batch`, which runs `blocks` times as many.
    """
    config = config.static
    hyper = trainer.Hyper.stack([config.replace(seed=seed) for seed in range(runs)])
    states = trainer._init_many(config, hyper)
    held_out = trainer.held_out_gram(config)
    keys = rng_limit.trainer_keys(config, hyper)

    def sampler(state, h):
        state, batch = _draw(config, state)
        return state, jnp.sum(batch.gram) + jnp.sum(batch.target) + jnp.sum(batch.phase)

    def forward(state, h):
        state, batch = _draw(config, state)
        return state, objective(state.model, batch, config.loss, h.weight_decay)

    def gradient(state, h):
        state, batch = _draw(config, state)
        params, static = eqx.partition(state.model, eqx.is_inexact_array)
        loss, grads = jax.value_and_grad(
            lambda p: objective(eqx.combine(p, static), batch, config.loss, h.weight_decay)
        )(params)
        params = jax.tree.map(lambda p, g: p - h.lr * g, params, grads)
        return eqx.tree_at(lambda s: s.model, state, eqx.combine(params, static)), loss

    def fresh():  # `_advance_many` donates its states
        return jax.tree.map(jnp.copy, states)

    whole = config.replace(steps=blocks * config.eval_every)
    return {
        "rng_limit": partial(rng_limit.draw_many, config, keys, config.eval_every),
        "sampler": partial(_scanned(config, sampler), states, hyper),
        "forward": partial(_scanned(config, forward), states, hyper),
        "gradient": partial(_scanned(config, gradient), states, hyper),
        "step": partial(_scanned(config, partial(trainer.step, config)), states, hyper),
        "block": lambda: trainer._advance_many(config, fresh(), hyper, held_out, jnp.asarray(True)),
        "run_batch": partial(trainer.run_batch, whole, hyper),
    }


def profile(
    config: TrainConfig, runs: int, rounds: int, blocks: int = 4, log=print
) -> dict[str, float]:
    """Each stage's time over the RNG limit's, per `eval_every` steps (median over rounds)."""
    programs = stage_programs(config, runs, blocks)
    for name, program in programs.items():
        start = time.perf_counter()
        jax.block_until_ready(program())
        log(f"compiled {name} ({time.perf_counter() - start:.1f}s)")
    times = {name: [] for name in programs}
    for _ in range(rounds):
        for name, program in programs.items():
            start = time.perf_counter()
            jax.block_until_ready(program())
            times[name].append(time.perf_counter() - start)
    limit = np.asarray(times["rng_limit"])
    times["run_batch"] = [t / blocks for t in times["run_batch"]]
    return {name: float(np.median(np.asarray(t) / limit)) for name, t in times.items()}


def kernel_times(config: TrainConfig, runs: int, trace_dir: str) -> list[tuple[str, float, int]]:
    """`(kernel, seconds, calls)` of one `run_batch`, summed over threads, largest first."""
    from jax._src.profiler import ProfileData

    hyper = trainer.Hyper.stack([config.replace(seed=seed) for seed in range(runs)])
    jax.block_until_ready(trainer.run_batch(config, hyper))
    with jax.profiler.trace(trace_dir):
        jax.block_until_ready(trainer.run_batch(config, hyper))
    path = max(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))
    seconds, calls = collections.Counter(), collections.Counter()
    for plane in ProfileData.from_file(path).planes:
        for line in plane.lines:
            if line.name == "python":
                continue
            for event in line.events:
                if "ThunkExecutor" in event.name or event.name.startswith("end:"):
                    continue
                seconds[event.name] += event.duration_ns / 1e9
                calls[event.name] += 1
    return [(name, s, calls[name]) for name, s in seconds.most_common()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=4, help="run_batch's evaluation blocks")
    parser.add_argument("--trace", metavar="DIR", help="also trace one run_batch's kernels")
    args = parser.parse_args()
    config = TrainConfig()  # canonical: s=8, N=64, d=64, H=1, batch 256, eval every 50
    print(f"load average {os.getloadavg()[0]:.1f}; {args.runs} canonical runs")
    ratios = profile(config, args.runs, args.rounds, args.blocks)
    previous = 0.0
    print(f"{'stage':<10} {'time / rng_limit':>17} {'increment':>10}")
    for name, ratio in ratios.items():
        print(f"{name:<10} {ratio:17.3f} {ratio - previous:+10.3f}")
        previous = ratio
    print(f"fraction_of_rng_limit (run_batch): {1 / ratios['run_batch']:.3f}")
    if args.trace:
        steps = config.replace(steps=4 * config.eval_every)
        kernels = kernel_times(steps, args.runs, args.trace)
        print(f"\nkernels of run_batch ({steps.steps} steps), summed over threads:")
        for name, seconds, calls in kernels[:25]:
            print(f"{name:<40} {1e3 * seconds:9.1f} ms {calls:6d} calls")


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    main()

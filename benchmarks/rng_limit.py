"""The machine's limit for the trainer's workload: drawing the random numbers and nothing else.

One exact training step of the inner-product trainer needs, per model, the `B N s`
query-key inner products and the `B` query norms `|q|^2 ~ chi^2_d / d` (the logits and
their gradients depend on nothing else that is random). This program draws exactly
those, with the trainer's generator (the key the trainer's `init` makes, split once a
step as `step` does, normals from `idealized.toy.task.standard_normal`, norms from
`idealized.toy.task.chi_square`), for the same batch of models (`vmap` over runs, steps in
`lax.scan`), compiled as the trainer is (`idealized.xla.jit`), and only sums them so
that nothing is optimised away. Its model-steps per second bound the trainer's:
`fraction_of_rng_limit = trainer / this`.

    python benchmarks/rng_limit.py --runs 16 --steps 100
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import jax
import jax.numpy as jnp

from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.task import chi_square, split_key, standard_normal
from weakspots.idealized.xla import jit
from weakspots.sims.toy.train import DTYPE, Hyper, init


def draw(config: TrainConfig, key, steps: int):
    """`steps` steps of one model's random numbers from `key`; returns a sum per step."""
    B, N, s, d = config.batch, config.chunks, config.stride, config.dim

    def one_step(key, _):
        key, k_batch = split_key(key)
        k_keys, k_norm = split_key(k_batch)
        gram = standard_normal(k_keys, (B, N, s), DTYPE)
        norm2 = chi_square(k_norm, d, (B,), DTYPE)
        return key, jnp.sum(gram) + jnp.sum(norm2)

    return jax.lax.scan(one_step, key, None, length=steps)[1]


@partial(jit, static_argnums=(0, 2))
def draw_many(config: TrainConfig, keys, steps: int):
    """`draw` vmapped over the runs' keys `(R,)`: `(R, steps)` sums."""
    return jax.vmap(lambda key: draw(config, key, steps))(keys)


def trainer_keys(config: TrainConfig, hyper: Hyper):
    """The data keys the trainer's `init` makes for these runs (same generator, same seeds)."""
    return jax.vmap(lambda h: init(config.static, h).key)(hyper)


def model_steps_per_second(config: TrainConfig, runs: int, steps: int) -> float:
    hyper = Hyper.stack([config.replace(seed=i) for i in range(runs)])
    keys = trainer_keys(config, hyper)
    jax.block_until_ready(draw_many(config.static, keys, steps))
    start = time.perf_counter()
    jax.block_until_ready(draw_many(config.static, keys, steps))
    return runs * steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    rate = model_steps_per_second(TrainConfig(), args.runs, args.steps)
    print(f"rng limit: {rate:.1f} model-steps/s ({args.runs} canonical runs)")


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    main()

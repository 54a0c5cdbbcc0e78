"""The real-key operators' training step, current forms against the plain ones, in one run.

`max_pool`, `low_rank` and `deepseek_v4` need the keys themselves (`B N s d` numbers a
step). Three rewrites keep their numbers and make the step cheaper:

* the sampler's words come from an unrolled Threefry hash (`idealized.toy.task.threefry_words`)
  instead of `jax.random.bits`, whose CPU lowering is a loop that writes the key array out
  once per 4 rounds; the bits are identical (all three operators);
* `low_rank` contracts each flattened chunk with the stacked phase maps instead of the
  factored `einsum("cjd,jdr,jer->ce")`, which batches over the middle phase axis and
  copies the keys into phase-major layouts;
* `deepseek_v4` pools its window as `sum e kv / sum e` instead of softmax then sum.

`plain_forms()` puts the plain versions back (for tracing only); `compare` times a jitted,
run-vmapped block of canonical training steps (`sims.toy.train.advance`, no evaluation) with
each, rounds interleaved, and reports the paired ratio plain/current of the step time,
with the two forms' losses, which must agree to float32 rounding.

    python benchmarks/operator_step.py --runs 2 --steps 4 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.benchmarks import timing
from weakspots.idealized import deepseek_v4 as deepseek
from weakspots.idealized.operators.base import TOY
from weakspots.idealized.operators.registry import operator_names
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy import compression, task
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.xla import jit
from weakspots.sims.toy import train as trainer

OPERATORS = operator_names(TOY, phase_weighted=False)  # the operators that need real keys
LOSS_RTOL = 1e-4  # float32 steps: the two forms round differently, nothing more


def bits_random_words(key, shape):
    """`idealized.toy.task.random_words` as it was: `jax.random.bits` (a rolled loop on CPU)."""
    size = math.prod(shape)
    wide = jax.random.bits(key, (-(-size // 2),), jnp.uint64)
    return jax.lax.bitcast_convert_type(wide, jnp.uint32).reshape(-1)[:size].reshape(shape)


def factored_low_rank(keys, left, right):
    """`low_rank` as it was: `sum_j x_j / s + (x_j @ right_j) @ left_j^T` as one einsum."""
    stride = keys.shape[1]
    return jnp.sum(keys, axis=1) / stride + jnp.einsum("cjd,jdr,jer->ce", keys, right, left)


def softmax_window_pool(score, kv):
    """`deepseek_v4`'s pooling as it was: softmax over the window, then the weighted sum."""
    return jnp.sum(jax.nn.softmax(score, axis=1) * kv, axis=1)


@contextlib.contextmanager
def plain_forms():
    """Trace with the plain sampler and operator forms (module attributes swapped, then restored)."""
    swaps = [
        (task, "random_words", bits_random_words),
        (compression, "low_rank", factored_low_rank),
        (deepseek, "_window_pool", softmax_window_pool),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in swaps]
    try:
        for module, name, value in swaps:
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def step_block(operator: str, runs: int, steps: int, plain: bool):
    """A compiled call that trains `runs` canonical runs of `operator` for `steps` steps."""
    config = TrainConfig(operator=operator, eval_every=steps).static
    hyper = trainer.Hyper.stack([config.replace(seed=seed) for seed in range(runs)])
    states = jit(jax.vmap(partial(trainer.init, config)))(hyper)
    advance = jit(jax.vmap(partial(trainer.advance, config)))
    with plain_forms() if plain else contextlib.nullcontext():
        compiled = advance.lower(states, hyper).compile()
    return lambda: compiled(states, hyper)


def compare(
    operators=OPERATORS, runs: int = 2, steps: int = 4, repeats: int = 3, log=lambda _: None
) -> dict:
    """Per operator: plain/current step-time ratios (wall and CPU) and both forms' last losses."""
    out = {}
    for operator in operators:
        log(f"operator step {operator}: compiling both forms")
        calls = {
            "plain": step_block(operator, runs, steps, plain=True),
            "current": step_block(operator, runs, steps, plain=False),
        }
        losses = {name: np.asarray(call()[1])[:, -1] for name, call in calls.items()}
        times = timing.interleaved(calls, repeats)
        work = {name: runs * steps for name in calls}
        out[operator] = {
            "speedup": timing.ratios(times, work, "current", "plain"),
            "current_seconds_per_step": float(
                np.median([t.wall for t in times["current"]]) / steps
            ),
            "losses_agree": bool(np.allclose(losses["plain"], losses["current"], rtol=LOSS_RTOL)),
            "last_loss": {name: value.tolist() for name, value in losses.items()},
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operators", default=",".join(OPERATORS))
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    result = compare(args.operators.split(","), args.runs, args.steps, args.repeats, log=print)
    print(json.dumps(result, indent=1))


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    main()

"""The canonical physics every experiment starts from, and the simulations they share.

The canonical config is `TrainConfig()`'s defaults (stride 8, 64 chunks, d = 64, gain 16,
SGD lr 2, batch 256, 600 steps, so gradient-flow time t = lr x steps = 1200); `STRIDE`,
`CHUNKS`, `DIM`, `GAIN` are read from it. `Training` is how long SGD runs train and are
evaluated at a size (`TRAINING`), shared by every experiment so that their runs coincide.
`train` is the SGD run memo shared by experiments; `base_flow` and `solve_from` set up and
solve reduced flows from given starts (`sims.toy.flow.solve_many`: one compiled program per flow structure).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import FlowConfig, TrainConfig
from weakspots.idealized.toy.loss import batch_correct
from weakspots.idealized.toy.task import sample_batch
from weakspots.idealized.xla import filter_jit
from weakspots.sims.toy.flow import FlowHistory, solve_many, stack
from weakspots.sims.toy.train import DTYPE, TrainResult, train_many

CANONICAL = TrainConfig()
STRIDE, CHUNKS, DIM, GAIN = CANONICAL.stride, CANONICAL.chunks, CANONICAL.dim, CANONICAL.gain
EVENT_LEVEL = 0.25  # theory.specialization_time's event: delta = 0.25


@dataclass(frozen=True)
class Training:
    """SGD steps, steps between evaluations, and held-out needles per phase of a size's runs."""

    steps: int
    eval_every: int
    eval_samples: int


TRAINING = {
    "tiny": Training(steps=40, eval_every=20, eval_samples=64),
    "quick": Training(steps=CANONICAL.steps, eval_every=10, eval_samples=512),
    "full": Training(steps=CANONICAL.steps, eval_every=10, eval_samples=2048),
}


def base_config(training: Training, **changes) -> TrainConfig:
    """The canonical config with `training`'s steps and held-out needles, then `changes`."""
    return CANONICAL.replace(**{**dataclasses.asdict(training), **changes})


_TRAINED: dict[TrainConfig, TrainResult] = {}


def train(configs: Sequence[TrainConfig]) -> list[TrainResult]:
    """train_many with an in-process memo: experiments that share a run train it once.

    An experiment declares the runs it trains in `Experiment.configs`, so a caller running
    several can train all of them in one call first (`sims.experiments.scheduler.train_planned`):
    runs of one `TrainConfig.static` then share one compiled program. A run's numbers do
    not depend on the runs it is batched with (tests/toy/test_train.py, bit for bit).
    """
    missing = [c for c in dict.fromkeys(configs) if c not in _TRAINED]
    if missing:
        _TRAINED.update(zip(missing, train_many(missing), strict=True))
    return [_TRAINED[c] for c in configs]


def base_flow(ts, **changes) -> FlowConfig:
    """The reduced flow the figure experiments solve: the canonical physics, saved at `ts`
    (T,) from t = ts[0] = 0, at rtol 1e-7 and atol 1e-9, then `changes`."""
    return FlowConfig(rtol=1e-7, atol=1e-9, t1=float(ts[-1]), saves=len(ts)).replace(**changes)


def solve_from(configs, starts, ts=None) -> FlowHistory:
    """`sims.toy.flow.solve_many` of `configs` from given starting logits `(B, H, s)`, saved at
    `ts` (T,) if given, as one history with a leading run axis (numpy)."""
    times = None if ts is None else np.asarray(ts, float)
    return stack(solve_many(configs, starts=list(np.asarray(starts, float)), times=times))


def random_starts(count, heads, stride, scale, seed) -> np.ndarray:
    """Initial pooling logits scale * N(0, 1), `(count, H, s)`, from a fixed numpy seed."""
    return scale * np.random.default_rng(seed).standard_normal((count, heads, stride))


def keyed_starts(seed, count, heads, stride, scale) -> np.ndarray:
    """Initial pooling logits scale * N(0, 1), `(count, H, s)` in float64, one jax key each
    (split from `PRNGKey(seed)`); `scale` a number or `(count,)`."""
    keys = jax.random.split(jax.random.PRNGKey(seed), count)
    scales = np.broadcast_to(np.asarray(scale, float), (count,))
    draw = jax.vmap(lambda k: jax.random.normal(k, (heads, stride), dtype=jnp.float64))
    return scales[:, None, None] * np.asarray(draw(keys))


@filter_jit
def correct_at_phase(model, key, config, samples, phase):
    """Whether each of `samples` needles at `phase` is retrieved, and their target chunks."""
    batch = sample_batch(key, config, samples, keys=False, phase=phase, dtype=DTYPE)
    return batch_correct(model, batch), batch.target


float64_module(__name__)  # 64-bit types inside these functions (also in train_planned's threads)

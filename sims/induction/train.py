"""SGD on the induction model, many seeds at once: one jitted step, the loop in `lax.scan`,
runs vmapped (learning rate and init scale travel as arrays).

A step draws `batch` problems (a query (l*, r*) each, and for log-linear gates its
context) and takes one SGD step on their mean loss (`idealized.induction.batch_loss`),
whose expectation is the loss the flow descends. Every `eval_every` steps it records the
gates, the paper's effective numbers of offsets and the held-out loss (`flow.measures`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized import induction
from weakspots.idealized.induction import InductionTrainConfig
from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit
from weakspots.sims.induction.flow import eval_contexts, measures, starts, static_measures
from weakspots.sims.induction.summary import run_summary


def _problems(key, config, batch):
    k1, k2 = jax.random.split(key)
    chunk, position = induction.sample_queries(k1, config, batch)
    if config.gate == "static":  # static gates read no tokens: any context serves
        contexts = jnp.zeros((batch, config.chunks, config.stride), jnp.int32)
    else:
        contexts = induction.sample_contexts(k2, config, batch)
    return contexts, chunk, position


@functools.lru_cache(maxsize=16)
def _trainer(config: InductionTrainConfig):
    records = config.steps // config.eval_every

    def _step_loss(g, k, sc):
        if config.gate == "loglinear":
            contexts, chunk, position = _problems(k, config, config.batch)
            return induction.batch_loss(g, contexts, chunk, position, sc)
        if config.head_batches:
            return _head_batches_loss(g, k, sc)
        # Static gates read no tokens and chunks are exchangeable, so a problem's loss is
        # its query position's: the batch mean is the loss per position weighted by how
        # often the batch drew it (the same number, S - 1 evaluations instead of B).
        _, position = induction.sample_queries(k, config, config.batch)
        drawn = jnp.bincount(position, length=config.stride - 1) / config.batch
        return jnp.sum(drawn * induction.position_losses(g, config.chunks, sc))

    def _head_batches_loss(g, k, sc):
        # Head h's gradient is its own batch's: the sum over h of head h's batch loss with
        # every other head held fixed (its value is not a loss; its gradient is the step).
        heads, per = config.heads, config.stride - 1
        _, position = induction.sample_queries(k, config, config.batch * heads)
        drawn = jax.vmap(lambda p: jnp.bincount(p, length=per))(position.reshape(heads, -1))
        own = jnp.arange(heads)[:, None, None]

        def head(h, counts):
            mine = jnp.where(own == h, g.logits, jax.lax.stop_gradient(g.logits))
            losses = induction.position_losses(induction.StaticGates(mine), config.chunks, sc)
            return jnp.sum(counts / config.batch * losses)

        return jnp.sum(jax.vmap(head)(jnp.arange(heads), drawn))

    def one(gates, seed, lr, sc, held_out):
        key = jax.random.fold_in(jax.random.key(seed), 1)

        def step(g, k):
            grad = jax.grad(_step_loss)(g, k, sc)
            return jax.tree_util.tree_map(lambda p, d: p - lr * d, g, grad), None

        def record(g):  # static gates: the logits (measured after); log-linear: the measures
            return g.logits if config.gate == "static" else measures(g, sc, held_out)

        def block(g, k):
            g, _ = jax.lax.scan(step, g, jax.random.split(k, config.eval_every))
            return g, record(g)

        first = record(gates)
        gates, recorded = jax.lax.scan(block, gates, jax.random.split(key, records))
        recorded = jax.tree_util.tree_map(
            lambda a, b: jnp.concatenate([a[None], b]), first, recorded
        )
        if config.gate == "static":
            return recorded
        accuracy = jnp.mean(
            jax.vmap(lambda t: induction.context_correct(gates, t, sc))(held_out), axis=(0, 1)
        )
        return (*recorded, accuracy)

    return jit(jax.vmap(one, in_axes=(0, 0, None, None, None)))


@dataclass(frozen=True)
class TrainHistory:
    """SGD runs of one config from several seeds: steps (T,), weights (R, T, H, 2, S),
    offsets (R, T, H, 2, 2), loss (R, T) (held out), phase_accuracy (R, S-1) at the end."""

    config: InductionTrainConfig
    seeds: tuple[int, ...]
    steps: np.ndarray
    weights: np.ndarray
    offsets: np.ndarray
    loss: np.ndarray
    phase_accuracy: np.ndarray
    wall_seconds: float

    @property
    def times(self) -> np.ndarray:
        """Flow time lr x steps."""
        return self.config.lr * self.steps

    def summary(self, run: int = 0) -> dict:
        """One run as plain data, as `FlowHistory.summary` (times are lr x steps)."""
        return run_summary(self, run)


def train_runs(config: InductionTrainConfig, seeds: Sequence[int] | None = None) -> TrainHistory:
    """Train `config` from each seed's start (default: config.seed), vmapped in one compiled
    program per config shape; float64 throughout (the gates are tiny)."""
    seeds = (config.seed,) if seeds is None else tuple(int(s) for s in seeds)
    started = time.perf_counter()
    shape = config.replace(seed=0, init_scale=0.0, lr=1.0, gamma=1.0, beta=1.0, kappa=0.0)
    if config.gate == "static":
        shape = shape.replace(vocab=config.stride * config.chunks)
    held_out = eval_contexts(config, config.eval_contexts)
    sc = induction.scales(config)
    out = _trainer(shape)(
        starts(config, seeds), jnp.asarray(seeds, jnp.uint32), jnp.asarray(config.lr), sc, held_out
    )
    if config.gate == "static":
        weights, offsets, loss, accuracy = static_measures(np.asarray(out), config.chunks, sc)
    else:
        weights, offsets, loss, accuracy = out
    records = config.steps // config.eval_every
    return TrainHistory(
        config,
        seeds,
        np.arange(records + 1) * config.eval_every,
        np.asarray(weights),
        np.asarray(offsets),
        np.asarray(loss),
        np.asarray(accuracy),
        time.perf_counter() - started,
    )


float64_module(__name__)

"""The induction model at eps > 0 (`idealized.induction_eps`): its gradient flow on a fixed
sample of contexts and SGD on fresh ones, many (eps, seed) runs of one shape in one
compiled, vmapped program (each run's Gram matrix travels as an array).

Recorded at the end of each run: the gates, the loss gradient's norm (a flow that has
stopped moving with a gate below one-hot has reached a minimiser that is not one-hot), and
the per-phase accuracy on held-out contexts.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized import induction
from weakspots.idealized import induction_eps as eps_model
from weakspots.idealized.induction_eps import GramConfig
from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit
from weakspots.sims.toy.flow import FlowFailed, first_failure, gradient_flow

SAMPLE_SEED = 54321  # the fixed sample the flow follows (as sims.induction.flow)
EVAL_SEED = 12345  # held-out contexts for the per-phase accuracy


def _shape(config: GramConfig) -> GramConfig:
    return GramConfig(stride=config.stride, heads=config.heads, chunks=config.chunks,
                      vocab=config.vocab, contexts=config.contexts)  # fmt: skip


@dataclass(frozen=True)
class EpsRuns:
    """Runs of several (config, seed): weights (R, H, 2, S) at the end (key, value), loss
    (R,) on the sample the run followed (SGD: the flow's sample), grad_norm (R,) there,
    phase_accuracy (R, S-1) on held-out contexts; times (flow) or steps (SGD) of the end."""

    configs: tuple[GramConfig, ...]
    seeds: tuple[int, ...]
    weights: np.ndarray
    loss: np.ndarray
    grad_norm: np.ndarray
    phase_accuracy: np.ndarray
    wall_seconds: float


def _grams(configs) -> jnp.ndarray:
    return jnp.stack([jnp.asarray(eps_model.gram(c)) for c in configs])


def _starts(configs, seeds) -> jnp.ndarray:
    return jnp.stack([eps_model.start(c, s).logits for c, s in zip(configs, seeds, strict=True)])


def _finish(configs, seeds, logits, g, sample, held_out, started) -> EpsRuns:
    gamma = jnp.asarray([c.gamma for c in configs])
    beta = jnp.asarray([c.beta for c in configs])
    loss, grad, accuracy = _measures(logits, g, sample, held_out, gamma, beta)
    w = np.asarray(jax.nn.softmax(logits, axis=-1))
    return EpsRuns(
        tuple(configs), tuple(seeds), w, np.asarray(loss), np.asarray(grad), np.asarray(accuracy),
        time.perf_counter() - started,
    )  # fmt: skip


@jit
def _measures(logits, g, sample, held_out, gamma, beta):
    def one(y, gm, ga, be):
        loss, grad = jax.value_and_grad(eps_model.sample_loss)(y, gm, sample, ga, be)
        accuracy = eps_model.sample_phase_accuracy(y, gm, held_out, ga, be)
        return loss, jnp.sqrt(jnp.sum(grad**2)), accuracy

    return jax.vmap(one)(logits, g, gamma, beta)


def _samples(config: GramConfig):
    return eps_model.contexts(config, SAMPLE_SEED), eps_model.contexts(config, EVAL_SEED)


@functools.lru_cache(maxsize=8)
def _flow_solver(shape: GramConfig, rtol: float, atol: float, max_steps: int):
    def one(y0, g, gamma, beta, sample, ts):
        loss = lambda y, a: eps_model.sample_loss(y, a[0], a[1], a[2], a[3])  # noqa: E731
        sol = gradient_flow(loss, y0, (g, sample, gamma, beta), ts, rtol=rtol, atol=atol,
                            max_steps=max_steps, saveat=diffrax.SaveAt(t1=True), throw=False)  # fmt: skip
        return sol.ys[0], sol.result._value

    return jit(jax.vmap(one, in_axes=(0, 0, 0, 0, None, None)))


def _prepare(configs: tuple[GramConfig, ...], verb: str):
    """What a flow and SGD share: the configs' one shape, the sample and held-out contexts,
    every config's Gram, gamma and beta, `(shape, sample, held_out, g, gamma, beta)`."""
    shape = _shape(configs[0])
    if any(_shape(c) != shape for c in configs):
        raise ValueError(
            f"{verb} needs configs of one shape (stride, heads, chunks, vocab, contexts)"
        )
    sample, held_out = _samples(configs[0])
    gamma = jnp.asarray([c.gamma for c in configs])
    beta = jnp.asarray([c.beta for c in configs])
    return shape, sample, held_out, _grams(configs), gamma, beta


def solve(configs: Sequence[GramConfig], seeds: Sequence[int], t1: float = 4000.0,
          rtol: float = 1e-6, atol: float = 1e-8, max_steps: int = 20_000) -> EpsRuns:  # fmt: skip
    """The gradient flow of each (config, seed) on the configs' shared sample of contexts, to
    t1, all of one shape in one vmapped solve. Raises FlowFailed if any run fails."""
    configs, seeds = tuple(configs), tuple(int(s) for s in seeds)
    started = time.perf_counter()
    shape, sample, held_out, g, gamma, beta = _prepare(configs, "solve")
    ts = jnp.asarray([0.0, t1])
    logits, result = _flow_solver(shape, rtol, atol, max_steps)(
        _starts(configs, seeds), g, gamma, beta, sample, ts
    )
    bad = first_failure(result)
    if bad is not None:
        raise FlowFailed(
            f"eps flow of eps={configs[bad].eps:g} seed {seeds[bad]} failed (diffrax result "
            f"code {int(result[bad])}): raise max_steps or lower t1"
        )
    return _finish(configs, seeds, logits, g, sample, held_out, started)


@functools.lru_cache(maxsize=8)
def _trainer(shape: GramConfig, batch: int, steps: int):
    def one(y0, g, gamma, beta, lr, seed):
        def step(y, key):
            k1, k2, k3 = jax.random.split(key, 3)
            contexts = induction.sample_contexts(k1, shape.induction_config(), batch)
            chunk = jax.random.randint(k2, (batch,), 0, shape.chunks)
            position = jax.random.randint(k3, (batch,), 0, shape.stride - 1)

            def loss(y):
                per = jax.vmap(
                    lambda t, c, r: eps_model.query_loss_and_hit(y, g, t, c, r, gamma, beta)[0]
                )(contexts, chunk, position)
                return jnp.mean(per)

            return y - lr * jax.grad(loss)(y), None

        keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), 1), steps)
        y, _ = jax.lax.scan(step, y0, keys)
        return y

    return jit(jax.vmap(one))


def train(configs: Sequence[GramConfig], seeds: Sequence[int], lr: float = 1.0, batch: int = 64,
          steps: int = 2000) -> EpsRuns:  # fmt: skip
    """SGD on fresh (context, query) problems for each (config, seed), from the flow's start,
    all of one shape in one vmapped program."""
    configs, seeds = tuple(configs), tuple(int(s) for s in seeds)
    started = time.perf_counter()
    shape, sample, held_out, g, gamma, beta = _prepare(configs, "train")
    logits = _trainer(shape, batch, steps)(
        _starts(configs, seeds), g, gamma, beta, jnp.full(len(configs), lr),
        jnp.asarray(seeds, jnp.uint32),
    )  # fmt: skip
    if not np.all(np.isfinite(np.asarray(logits))):
        raise FlowFailed("eps SGD left non-finite gates")
    return _finish(configs, seeds, logits, g, sample, held_out, started)


def assignment_losses(config: GramConfig, assignments) -> np.ndarray:
    """The sample loss (the flow's sample) of one-hot assignments at the config's Gram."""
    g = jnp.asarray(eps_model.gram(config))
    loss = _assignment_loss(_shape(config))
    return np.asarray([
        float(loss(jnp.asarray(eps_model.one_hot_logits(a, config.stride)), g, config.gamma, config.beta))
        for a in assignments
    ])  # fmt: skip


@functools.lru_cache(maxsize=8)
def _assignment_loss(shape: GramConfig):
    sample, _ = _samples(shape)
    return jit(lambda y, g, gamma, beta: eps_model.sample_loss(y, g, sample, gamma, beta))


float64_module(__name__)

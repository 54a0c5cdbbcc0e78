"""The gradient flow of the induction model (diffrax Tsit5 + PID, float64), many seeds in one
compiled, vmapped solve.

Static gates follow the exact population loss (`idealized.induction.population_loss`);
log-linear gates the mean loss of a fixed sample of `contexts` contexts, exact over every
query of each. Saved along the flow: the gates (averaged over held-out windows for
log-linear gates), the paper's effective numbers of offsets of every gate, and the loss.
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
import optimistix as optx

from weakspots.idealized import induction
from weakspots.idealized.induction import InductionFlowConfig
from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit
from weakspots.sims.induction.summary import run_summary
from weakspots.sims.toy.flow import FlowFailed, first_failure, gradient_flow, gradient_flow_term

EVAL_SEED = 12345  # held-out contexts for log-linear gates' measures, shared by every run
SAMPLE_SEED = 54321  # the fixed sample the log-linear flow follows


def save_times(t1: float, saves: int) -> np.ndarray:
    """0, then saves - 1 log-spaced times from t1/1000 to t1."""
    return np.concatenate([[0.0], np.geomspace(t1 / 1000.0, t1, saves - 1)])


def eval_contexts(config, count: int):
    """The held-out contexts (static gates: one, they do not read tokens)."""
    if config.gate == "static":
        return jnp.zeros((1, config.chunks, config.stride), jnp.int32)
    return induction.sample_contexts(jax.random.key(EVAL_SEED), config, count)


def objective(config):
    """The loss the flow descends, `loss(gates, (scales, contexts))`."""
    if config.gate == "static":
        return lambda g, a: induction.population_loss(g, config.chunks, a[0])
    return lambda g, a: jnp.mean(
        jax.vmap(lambda t: induction.context_losses(g, t, a[0]))(a[1])
    )


def measures(gates, sc, held_out):
    """(gates (H, 2, S), offsets (H, 2, 2): static and per-window, loss) on `held_out`."""
    weights = induction.mean_gates(gates, held_out, sc.kappa)
    offsets = induction.gate_offsets(gates, held_out, sc.kappa)
    loss = jnp.mean(jax.vmap(lambda t: induction.context_losses(gates, t, sc))(held_out))
    return weights, offsets, loss


@functools.lru_cache(maxsize=16)
def _static_solver(config: InductionFlowConfig):
    """Static gates, every seed in one state (R, H, 2, S): the loss is the sum of the seeds'
    population losses, so each seed follows its own flow exactly; the step is controlled in
    the max norm, so no seed's local error exceeds the tolerance. Saves the logits only."""

    def total(logits, sc):
        per_seed = jax.vmap(
            lambda y: induction.population_loss(induction.StaticGates(y), config.chunks, sc)
        )(logits)
        return jnp.sum(per_seed)

    def run(y0, sc, ts):
        sol = diffrax.diffeqsolve(
            gradient_flow_term(total),
            diffrax.Tsit5(),
            t0=ts[0],
            t1=ts[-1],
            dt0=None,
            y0=y0,
            args=sc,
            saveat=diffrax.SaveAt(ts=ts),
            stepsize_controller=diffrax.PIDController(
                rtol=config.rtol, atol=config.atol, norm=optx.max_norm
            ),
            max_steps=config.max_steps,
            throw=False,
        )
        return jnp.moveaxis(sol.ys, 0, 1), jnp.full(y0.shape[0], sol.result._value)

    return jit(run)


@functools.lru_cache(maxsize=16)
def _static_measures(chunks: int):
    def one(logits, sc):
        gates = induction.StaticGates(logits)
        return induction.population_loss(gates, chunks, sc), induction.phase_accuracy(
            gates, chunks, sc
        )

    return jit(jax.vmap(one, in_axes=(0, None)))


def static_measures(logits: np.ndarray, chunks: int, sc) -> tuple:
    """From static gates' logits (R, T, H, 2, S): weights (R, T, H, 2, S), offsets
    (R, T, H, 2, 2) (static = per-window), population loss (R, T), phase accuracy at the
    last time (R, S-1)."""
    z = np.exp(logits - logits.max(axis=-1, keepdims=True))
    weights = z / z.sum(axis=-1, keepdims=True)
    offsets = np.repeat(_entropy_exp(weights)[..., None], 2, axis=-1)
    measure = _static_measures(chunks)
    loss, _ = measure(jnp.asarray(logits.reshape(-1, *logits.shape[2:])), sc)
    _, accuracy = measure(jnp.asarray(logits[:, -1]), sc)
    return weights, offsets, np.asarray(loss).reshape(logits.shape[:2]), np.asarray(accuracy)


@functools.lru_cache(maxsize=16)
def _loglinear_solver(config: InductionFlowConfig):
    """Log-linear gates: the measures on held-out windows are saved along the solve."""
    loss_fn = objective(config)

    def one(y0, sc, ts, sample, held_out):
        saveat = diffrax.SaveAt(
            subs=[
                diffrax.SubSaveAt(ts=ts, fn=lambda t, y, a: measures(y, a[0], held_out)),
                diffrax.SubSaveAt(t1=True),
            ]
        )
        sol = gradient_flow(loss_fn, y0, (sc, sample), ts, rtol=config.rtol, atol=config.atol,
                            max_steps=config.max_steps, saveat=saveat, throw=False)  # fmt: skip
        (weights, offsets, loss), final = sol.ys
        last = jax.tree_util.tree_map(lambda x: x[0], final)
        accuracy = jnp.mean(
            jax.vmap(lambda t: induction.context_correct(last, t, sc))(held_out), axis=(0, 1)
        )
        return weights, offsets, loss, accuracy, sol.result._value

    return jit(jax.vmap(one, in_axes=(0, None, None, None, None)))


def _entropy_exp(p: np.ndarray) -> np.ndarray:
    return np.exp(-np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=-1))


@dataclass(frozen=True)
class FlowHistory:
    """Flows of one config from several seeds: times (T,), weights (R, T, H, 2, S) (key,
    value), offsets (R, T, H, 2, 2) (static, per-window), loss (R, T), phase_accuracy
    (R, S-1) at t1, seeds, wall_seconds."""

    config: InductionFlowConfig
    seeds: tuple[int, ...]
    times: np.ndarray
    weights: np.ndarray
    offsets: np.ndarray
    loss: np.ndarray
    phase_accuracy: np.ndarray
    wall_seconds: float

    def summary(self, run: int = 0) -> dict:
        """One run as plain data: key_weights, value_weights (H, S) at t1, positions, the
        end state (`summary.end_state`), loss, phase_accuracy, delta_max, and along the flow
        times, loss, key and value weights and effective offsets."""
        return run_summary(self, run)


@functools.lru_cache(maxsize=16)
def _starts(config):
    return jit(
        jax.vmap(
            lambda seed, rho: induction.init_gates(jax.random.key(seed), config, rho),
            in_axes=(0, None),
        )
    )


def starts(config, seeds: Sequence[int]):
    """The starts of `seeds` stacked on a leading axis (`induction.start`, seed for seed: the
    trainer's and the flow's)."""
    shape = induction.InductionConfig(
        stride=config.stride, heads=config.heads, chunks=config.chunks, vocab=config.vocab, gate=config.gate
    )
    return _starts(shape)(jnp.asarray(seeds, jnp.uint32), jnp.asarray(config.init_scale))


def solve(config: InductionFlowConfig, seeds: Sequence[int] | None = None) -> FlowHistory:
    """Integrate the flow of `config` from each seed's start (default: config.seed), all in
    one vmapped solve (one compile per config shape). Raises FlowFailed if any run fails."""
    seeds = (config.seed,) if seeds is None else tuple(int(s) for s in seeds)
    start_time = time.perf_counter()
    shape = config.replace(seed=0, init_scale=0.0, gamma=1.0, beta=1.0, kappa=0.0, t1=1.0)
    sc = induction.scales(config)
    y0 = starts(config, seeds)
    ts = jnp.asarray(save_times(config.t1, config.saves))
    if config.gate == "static":
        shape = shape.replace(vocab=config.stride * config.chunks)
        logits, result = _static_solver(shape)(y0.logits, sc, ts)
        weights, offsets, loss, accuracy = static_measures(np.asarray(logits), config.chunks, sc)
    else:
        sample = induction.sample_contexts(jax.random.key(SAMPLE_SEED), config, config.contexts)
        held_out = eval_contexts(config, 64)
        weights, offsets, loss, accuracy, result = _loglinear_solver(shape)(
            y0, sc, ts, sample, held_out
        )
    bad = first_failure(result)
    if bad is not None:
        raise FlowFailed(
            f"induction flow of seed {seeds[bad]} failed (diffrax result code "
            f"{int(result[bad])}, e.g. max_steps reached): raise --max-steps or lower --t1"
        )
    loss = np.asarray(loss)
    if not np.all(np.isfinite(loss)):
        raise FlowFailed("induction flow left a non-finite loss")
    return FlowHistory(
        config,
        seeds,
        np.asarray(ts),
        np.asarray(weights),
        np.asarray(offsets),
        loss,
        np.asarray(accuracy),
        time.perf_counter() - start_time,
    )


float64_module(__name__)

"""Training many retrieval models at once: pure `init`/`advance`/`evaluate`, vmapped over runs.

The structure of a run (`TrainConfig.static`) is static; its hyperparameters
(`lr`, `gain`, `weight_decay`, `init_scale`, `seed`) travel as arrays (`Hyper`), so
one compiled program serves every run of a sweep that shares a shape. Steps run
inside `lax.scan`, `eval_every` at a time; between blocks the host records the
evaluation on a fixed held-out set, stops on a non-finite loss, and reports progress.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from functools import partial
from typing import TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jaxtyping import Array, Float, Int, PRNGKeyArray

from weakspots.errors import ConfigError
from weakspots.idealized.mechanisms import model_module as _kind_module
from weakspots.idealized.metrics import phase_report, specialization_index, support_size
from weakspots.idealized.operators.registry import lookup
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.loss import (
    batch_logits,
    correct,
    inference_logits,
    objective,
    retrieval_loss,
)
from weakspots.idealized.toy.model import RetrievalModel, init_model, run_keys
from weakspots.idealized.toy.task import Batch, sample_batch, split_key
from weakspots.idealized.xla import jit
from weakspots.sims.progress import Progress

DTYPE = jnp.float32
H = TypeVar("H", bound=eqx.Module)
EVAL_SUBBATCH_KEYS = 256  # needles per evaluation slice when real keys are drawn (bounds memory)


class TrainingDiverged(RuntimeError):
    """A run's loss became non-finite, or its learned gain left `(0, inf)`; the message
    names the run and the step."""


def stack_hyper(cls: type[H], configs: Sequence) -> H:
    """`cls` (an `eqx.Module` of shape-free hyperparameters) with each field stacked over
    `configs`, read by name: float32 arrays, the `seed` uint32."""
    names = [field.name for field in dataclasses.fields(cls)]
    values = {k: [getattr(c, k) for c in configs] for k in names}
    floats = {k: jnp.asarray(v, DTYPE) for k, v in values.items() if k != "seed"}
    return cls(**floats, seed=jnp.asarray(values["seed"], jnp.uint32))


class Hyper(eqx.Module):
    """One run's (or, with a leading axis, many runs') shape-free hyperparameters."""

    lr: Float[Array, "*R"]
    gain: Float[Array, "*R"]
    weight_decay: Float[Array, "*R"]
    init_scale: Float[Array, "*R"]
    seed: Int[Array, "*R"]

    @staticmethod
    def stack(configs: Sequence[TrainConfig]) -> Hyper:
        """Stack the hyperparameters of configs that share `TrainConfig.static`."""
        return stack_hyper(Hyper, configs)


class TrainState(eqx.Module):
    model: RetrievalModel
    opt_state: optax.OptState
    key: PRNGKeyArray
    step: Int[Array, ""]


class History(eqx.Module):
    """What a run records at each evaluation (leading axis T; a run axis in front when batched).

    `times` is the gradient-flow time `lr * step` (docs/theory.md §5), so that SGD and
    the ODEs of `sims.toy.flow` lay over one another.
    """

    times: Float[Array, " T"]
    steps: Int[Array, " T"]
    pooling_weights: Float[Array, "T H s"] | None
    gain: Float[Array, "T H"]
    loss: Float[Array, " T"]
    phase_accuracy: Float[Array, "T s"]


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """One finished run: its config, history (numpy), final model and phase metrics."""

    config: TrainConfig
    history: History
    model: RetrievalModel
    step_loss: np.ndarray
    wall_seconds: float

    def summary(self) -> dict:
        """The run's final metrics as plain Python values (the `--json` keys of `weakspots train`)."""
        acc = np.asarray(self.history.phase_accuracy[-1])
        out = phase_report(acc, self.config.eval_samples)
        weights = self.model.pooling_weights()
        out["pooling_weights"] = None if weights is None else np.asarray(weights).tolist()
        out["support_size"] = None if weights is None else support_size(weights).tolist()
        out["specialization_index"] = (
            None if weights is None else specialization_index(weights).tolist()
        )
        out["gain"] = np.asarray(self.model.gain).tolist()
        out["final_loss"] = float(self.history.loss[-1])
        out["wall_seconds"] = self.wall_seconds
        return out


def _optimizer(config: TrainConfig, lr) -> optax.GradientTransformation:
    """`lr` lives in the optimizer state (`inject_hyperparams`), so it can be an array per run."""
    factory = {"sgd": optax.sgd, "adam": optax.adam}[config.optimizer]
    return optax.inject_hyperparams(factory)(learning_rate=lr)


def _params(model: RetrievalModel):
    return eqx.filter(model, eqx.is_inexact_array)


def init(config: TrainConfig, hyper: Hyper) -> TrainState:
    """The initial state of one run (vmap it over a stacked `Hyper` for many)."""
    k_model, k_data = run_keys(hyper.seed)
    kind = _kind_module(config)
    if kind is not None:
        model = kind.init_model_for_seed(hyper.seed, config, hyper.gain, hyper.init_scale, DTYPE)
    else:
        model = init_model(k_model, config.model, hyper.gain, hyper.init_scale, DTYPE)
    opt_state = _optimizer(config, hyper.lr).init(_params(model))
    return TrainState(model, opt_state, k_data, jnp.zeros((), jnp.int32))


def step(config: TrainConfig, state: TrainState, hyper: Hyper) -> tuple[TrainState, Array]:
    """One SGD/Adam step on a fresh minibatch; steps past `config.steps` leave the state as is."""
    key, k_batch = split_key(state.key)
    model = state.model
    params, static = eqx.partition(model, eqx.is_inexact_array)
    kind = _kind_module(config)
    if kind is not None:
        batch = kind.sample_batch(k_batch, config, config.batch, dtype=DTYPE)

        def loss_fn(params):
            return kind.objective(eqx.combine(params, static), batch, config)

    else:
        batch = sample_batch(
            k_batch, config.model, config.batch, keys=not model.uses_gram, dtype=DTYPE
        )

        def loss_fn(params):
            return objective(eqx.combine(params, static), batch, config.loss, hyper.weight_decay)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = _optimizer(config, hyper.lr).update(grads, state.opt_state, params)
    new = TrainState(eqx.apply_updates(model, updates), opt_state, key, state.step + 1)
    active = state.step < config.steps
    new = jax.tree.map(lambda a, b: jnp.where(active, a, b), new, state)
    return new, jnp.where(active, loss, jnp.full_like(loss, jnp.nan))


def advance(config: TrainConfig, state: TrainState, hyper: Hyper):
    """`eval_every` steps inside `lax.scan`; returns the new state and each step's loss."""
    return jax.lax.scan(lambda s, _: step(config, s, hyper), state, None, length=config.eval_every)


def _eval_slice(config: TrainConfig, keys: bool, size: int, phase, index) -> Batch:
    k = jax.random.fold_in(jax.random.fold_in(jax.random.key(config.eval_seed), phase), index)
    return sample_batch(k, config.model, size, keys=keys, phase=phase, dtype=DTYPE)


# The fields the inner-product held-out draw reads (`sample_batch` with keys=False).
HELD_OUT_FIELDS = (
    "stride",
    "chunks",
    "dim",
    "rope_dim",
    "rope_anchor",
    "eval_samples",
    "eval_seed",
)


def held_out_gram(config: TrainConfig) -> Batch:
    """The held-out set as inner products, `(s, eval_samples, ...)`: drawn once, shared by all runs.

    It depends on `HELD_OUT_FIELDS` alone, so configs that differ elsewhere (heads,
    operator, mitigations, training fields) share one compiled draw and one set.
    """
    return _held_out_gram(_held_out_key(config))


def _held_out_key(config: TrainConfig) -> TrainConfig:
    return TrainConfig(**{k: getattr(config, k) for k in HELD_OUT_FIELDS})


@partial(jit, static_argnums=0)
def _held_out_gram(config: TrainConfig) -> Batch:
    n = config.eval_samples
    return jax.vmap(lambda phase: _eval_slice(config, False, n, phase, 0))(
        jnp.arange(config.stride)
    )


def _shared_held_out(config: TrainConfig) -> Batch:
    """`held_out_gram`, drawn once per process: a batch of runs costs as much to draw it as 64 steps."""
    return _cached_held_out(_held_out_key(config))


@functools.lru_cache(maxsize=2)
def _cached_held_out(key: TrainConfig) -> Batch:
    return _held_out_gram(key)


def evaluate(
    config: TrainConfig, model: RetrievalModel, held_out: Batch | None = None
) -> tuple[Array, Array]:
    """Per-phase accuracy `(s,)` and mean retrieval loss on the fixed held-out set.

    The held-out needles depend only on `eval_seed`, so every run sees the same ones.
    Models on the inner-product path take them precomputed (`held_out_gram`); models
    that need real keys draw them again in slices of `EVAL_SUBBATCH_KEYS` needles
    (the same numbers each time), which bounds memory.
    """

    def score(batch: Batch):
        logits = batch_logits(model, batch)
        losses = jax.vmap(retrieval_loss, in_axes=(0, 0, None))(logits, batch.target, config.loss)
        # The readout reuses the loss's logits (eval ~25% cheaper), except under an offset
        # ensemble, whose readout averages over K shifted chunkings.
        readout = logits if model.offset_ensemble == 1 else inference_logits(model, batch)
        hits = jax.vmap(correct)(readout, batch.target)
        return jnp.mean(hits), jnp.mean(losses)

    if model.uses_gram:
        if held_out is None:
            held_out = held_out_gram(config)
        acc, loss = jax.lax.map(score, held_out)
        return acc, jnp.mean(loss)
    n = config.eval_samples
    size = math.gcd(n, EVAL_SUBBATCH_KEYS)
    phases = jnp.repeat(jnp.arange(config.stride), n // size)
    slices = jnp.tile(jnp.arange(n // size), config.stride)
    acc, loss = jax.lax.map(
        lambda pi: score(_eval_slice(config, True, size, *pi)), (phases, slices)
    )
    acc = jnp.mean(acc.reshape(config.stride, n // size), axis=1)
    return acc, jnp.mean(loss)


def _record(config: TrainConfig, state: TrainState, hyper: Hyper, held_out) -> dict:
    if _kind_module(config) is not None:
        acc, loss = _kind_module(config).evaluate(config, state.model, DTYPE)
    else:
        acc, loss = evaluate(config, state.model, held_out)
    weights = state.model.pooling_weights()
    return {
        "times": hyper.lr * state.step.astype(DTYPE),
        "steps": state.step,
        "pooling_weights": weights,
        "gain": state.model.gain,
        "loss": loss,
        "phase_accuracy": acc,
    }


def _record_many(config: TrainConfig, states: TrainState, hyper: Hyper, held_out):
    return jax.vmap(partial(_record, config), in_axes=(0, 0, None))(states, hyper, held_out)


@partial(jit, static_argnums=0)
def _init_many(config: TrainConfig, hyper: Hyper):
    return jax.vmap(partial(init, config))(hyper)


@partial(jit, static_argnums=0, donate_argnums=1)
def _advance_many(config: TrainConfig, states: TrainState, hyper: Hyper, held_out, go):
    """The record of `states`, then (if `go`) `eval_every` steps from them.

    Recording before advancing lets one compiled program give every record, the initial
    one included (the evaluation is most of a trainer's compile time); the last call, with
    `go` False, only records the final state (`lax.cond` outside the vmap: one branch runs).
    """
    record = _record_many(config, states, hyper, held_out)

    def skip(states):
        return states, jnp.full((states.step.shape[0], config.eval_every), jnp.nan, DTYPE)

    states, losses = jax.lax.cond(
        go, lambda st: jax.vmap(partial(advance, config))(st, hyper), skip, states
    )
    return states, losses, record


BYTES = 4  # float32
# Copies of a step's drawn needles alive at once (the draw, its scaled keys, and the
# backward pass's temporaries), and of an evaluation's: fitted to XLA's own memory
# analysis of the compiled programs (tests/toy/test_train.py checks the estimate against it).
STEP_COPIES = 3
EVAL_COPIES = 3


def memory_needed(config: TrainConfig, runs: int) -> tuple[int, str]:
    """Bytes `run_batch` needs to train `runs` runs of `config` on one device: an estimate
    from the shapes alone, made before anything compiles.

    A step holds each run's drawn needles (`batch` x N x slots, times d for real keys) and
    each head's logits, compressed keys or per-token maps; an evaluation holds the shared
    held-out set (inner products) or a slice of redrawn keys per run. The two do not
    overlap in time, so the larger counts. Returns the bytes and the flag that sizes most
    of them (`batch` or `eval_samples`).
    """
    m = config.model
    per_token = lookup(m.operator).token_maps  # maps of every token, per head
    if m.uses_gram:
        per_needle = config.chunks * (m.slots + config.heads)
    else:
        head = config.chunks * config.dim * (m.slots * per_token if per_token else 1)
        per_needle = config.chunks * m.slots * config.dim + config.heads * head
    step = STEP_COPIES * config.batch * per_needle * runs
    if m.uses_gram:  # one phase of the shared held-out set at a time, logits for every run
        shared = config.stride * config.eval_samples * config.chunks * m.slots
        evaluation = EVAL_COPIES * config.eval_samples * config.chunks * config.heads
        evaluation = evaluation * m.offset_ensemble * runs
    else:  # real keys are drawn again in slices of at most EVAL_SUBBATCH_KEYS needles
        shared = 0
        needles = math.gcd(config.eval_samples, EVAL_SUBBATCH_KEYS) * m.offset_ensemble
        evaluation = EVAL_COPIES * needles * per_needle * runs
    flag = "batch" if step >= evaluation + shared else "eval_samples"
    return BYTES * (max(step, evaluation) + shared), flag


def device_memory(device: jax.Device | None = None) -> int | None:
    """Bytes a device can hold: its allocator's limit, or the host's available memory for a CPU.

    The default device is this process's first (another process's device cannot be asked).
    """
    device = device or jax.local_devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # some backends do not report memory
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    if device.platform == "cpu":
        try:
            with open("/proc/meminfo") as f:
                info = dict(line.split(":", 1) for line in f)
            return int(info["MemAvailable"].split()[0]) * 1024
        except (OSError, KeyError, ValueError):
            return None
    return None


def check_memory(config: TrainConfig, runs: int, devices: int = 1) -> None:
    """Raise ConfigError (naming the flag to lower) if `runs` runs cannot fit in memory.

    Runs are split evenly over `devices` devices; the check uses `memory_needed` against
    `device_memory()` and does nothing where the device does not report its memory.
    """
    per_device = -(-runs // devices)
    need, flag = memory_needed(config, per_device)
    have = device_memory()
    if have is not None and need > have:
        runs_text = f"{per_device} run{'s' if per_device > 1 else ''}"
        sizes = ["batch", "chunks", "eval_samples"] + ([] if config.model.uses_gram else ["dim"])
        given = ", ".join(f"--{k.replace('_', '-')} {getattr(config, k)}" for k in sizes)
        lower = [flag, "chunks"] + ([] if config.model.uses_gram else ["dim"])
        raise ConfigError(
            flag,
            f"training {runs_text} at once needs about {_size(need)} of memory ({given}), "
            f"more than the {_size(have)} the device has; lower "
            + " or ".join(f"--{k.replace('_', '-')}" for k in lower)
            + (", or train fewer runs at once" if per_device > 1 else ""),
        )


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError


def failure(step_loss: np.ndarray, gain: np.ndarray, steps: np.ndarray) -> str | None:
    """Why one run's numbers are not a result, or None if they are.

    `step_loss` `(steps,)`, `gain` `(T, H)` and `steps` `(T,)` are the run's history. A
    run fails when its training loss is not finite, or when its gain (learned) leaves
    `(0, inf)`: at 0 every logit is 0, so retrieval is at chance whatever was learned.
    """
    bad = ~np.isfinite(step_loss)
    if bad.any():
        return f"loss is not finite at step {int(np.argmax(bad)) + 1}"
    gain = np.asarray(gain)
    out = ~(np.isfinite(gain) & (gain > 0)).all(axis=-1)
    if out.any():
        t = int(np.argmax(out))
        value = gain[t][~(np.isfinite(gain[t]) & (gain[t] > 0))][0]
        return f"the learned gain reached {float(value):g} by step {int(steps[t])}"
    return None


def run_batch(
    config: TrainConfig,
    hyper: Hyper,
    *,
    progress: Progress | None = None,
    mesh: jax.sharding.Mesh | None = None,
    stop_on_divergence: bool = True,
) -> tuple[History, RetrievalModel, np.ndarray]:
    """Train R runs that share `config.static`; `hyper` has leading axis R.

    Returns the stacked history `(R, T, ...)`, the stacked final models, and the per-step
    training loss `(R, steps)` as numpy. Raises `TrainingDiverged` at the first evaluation
    block in which some run's loss is not finite or its learned gain left `(0, inf)`
    (`failure`), naming the run and the step. Before compiling, raises ConfigError if the
    batch would not fit in the device's memory (`check_memory`).

    With a `mesh`, the run axis is split over the mesh's first axis (`shard_runs`: padded
    to a multiple of its size, padding dropped from the results), so the jitted, vmapped
    program is partitioned across its devices; each run's numbers do not depend on it.
    `stop_on_divergence=False` trains every run to the end instead of raising (a sweep
    records a diverged run's non-finite loss rather than losing its batch). `progress`
    (`sims.progress.Progress`) gets the steps of each evaluation block, the first marked
    as the compile's.
    """
    config = config.static
    runs, unsharded = hyper.seed.shape[0], hyper
    check_memory(config, runs, 1 if mesh is None else mesh.size)
    gram = config.model.uses_gram and _kind_module(config) is None
    held_out = _shared_held_out(config) if gram else None
    if mesh is not None:
        hyper = shard_runs(hyper, mesh)
        held_out = None if held_out is None else replicate(held_out, mesh)
    states = _init_many(config, hyper)
    records, step_losses = [], []
    blocks = config.eval_times

    def finish(block: int, losses, record) -> None:  # on the host, while the next block computes
        if stop_on_divergence and config.learn_gain:
            _raise_if_gain_left(_to_host(record["gain"])[:runs], unsharded, block, config)
        if block == blocks:  # the final state's record: its steps were all past the end
            return
        losses = _to_host(losses)[:runs]
        done = min(config.eval_every, config.steps - block * config.eval_every)
        losses = losses[:, :done]
        if stop_on_divergence:
            _raise_if_diverged(losses, unsharded, first_step=block * config.eval_every)
        step_losses.append(losses)
        if progress is not None:  # the first block's time includes the compile
            progress.update(done, warmup=block == 0)

    # Each block is dispatched before the host reads the previous one's results, so the
    # device never waits for the host; the last call only records the final state.
    pending = None
    for block in range(blocks + 1):
        go = jnp.asarray(block < blocks)
        states, losses, record = _advance_many(config, states, hyper, held_out, go)
        records.append(record)
        if pending is not None:
            finish(block - 1, *pending)
        pending = losses, record
    finish(blocks, *pending)
    stacked = jax.tree.map(lambda *xs: np.stack([_to_host(x)[:runs] for x in xs], axis=1), *records)
    history = History(**stacked)
    models = states.model
    if mesh is not None and (_padded(runs, mesh) != runs or jax.process_count() > 1):
        models = jax.tree.map(lambda x: _to_host(x)[:runs] if eqx.is_array(x) else x, models)
    return history, models, np.concatenate(step_losses, axis=1)


def _padded(runs: int, mesh: jax.sharding.Mesh) -> int:
    return -(-runs // mesh.size) * mesh.size


def shard_runs(tree, mesh: jax.sharding.Mesh):
    """Place a pytree of per-run arrays (leading run axis R) split over `mesh`'s first axis.

    R is padded to a multiple of `mesh.size` by repeating the last run (valid values, so
    padding trains like any run; callers drop it). Works across processes: every process
    holds the whole host array and contributes the slices its devices own.
    """
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(mesh.axis_names[0]))

    def place(x):
        x = np.asarray(x)
        pad = _padded(x.shape[0], mesh) - x.shape[0]
        x = np.concatenate([x, np.repeat(x[-1:], pad, axis=0)]) if pad else x
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(place, tree)


def replicate(tree, mesh: jax.sharding.Mesh):
    """Place a pytree of arrays whole on every device of `mesh` (shared inputs)."""
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def place(x):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(place, tree)


def _to_host(x) -> np.ndarray:
    """A jax array as numpy, gathered from every process when it spans several."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _raise_if_gain_left(gains: np.ndarray, hyper: Hyper, block: int, config) -> None:
    step = min(block * config.eval_every, config.steps)
    for run in range(gains.shape[0]):
        reason = failure(np.zeros(0), gains[run][None], np.asarray([step]))
        if reason is not None:
            seed = int(np.asarray(hyper.seed)[run])
            raise TrainingDiverged(
                f"training diverged: {reason} (run {run}, seed {seed}, "
                f"lr {float(np.asarray(hyper.lr)[run]):g}); try a smaller --lr or --weight-decay"
            )


def _raise_if_diverged(losses: np.ndarray, hyper: Hyper, first_step: int) -> None:
    bad = ~np.isfinite(losses)
    if bad.any():
        run, offset = map(int, np.argwhere(bad)[0])
        seed = int(np.asarray(hyper.seed)[run])
        raise TrainingDiverged(
            f"training diverged: loss is not finite at step {first_step + offset + 1} "
            f"(run {run}, seed {seed}, lr {float(np.asarray(hyper.lr)[run]):g}); "
            "try a smaller --lr or --gain"
        )


def train_many(
    configs: Sequence[TrainConfig], *, progress: Progress | None = None
) -> list[TrainResult]:
    """Train every config, one compiled program per distinct `config.static`, results in order.

    `progress` counts training steps (those of a batch of runs trained together count
    once); if it has no total yet, it is planned here (`planned_steps`).
    """
    groups: dict[TrainConfig, list[int]] = {}
    for i, config in enumerate(configs):
        groups.setdefault(config.static, []).append(i)
    if progress is not None and progress.total is None:
        steps, compiles = planned_steps(configs)
        progress.plan(steps, warmups=compiles)
    results: list[TrainResult | None] = [None] * len(configs)
    for static, members in groups.items():
        start = time.perf_counter()
        history, models, step_loss = run_batch(
            static, Hyper.stack([configs[i] for i in members]), progress=progress
        )
        wall = (time.perf_counter() - start) / len(members)
        for r, i in enumerate(members):
            take = lambda x, r=r: x[r] if x is not None else None  # noqa: E731
            results[i] = TrainResult(
                config=configs[i],
                history=jax.tree.map(take, history),
                model=jax.tree.map(take, models),
                step_loss=step_loss[r],
                wall_seconds=wall,
            )
    return results


def train(config: TrainConfig, **kwargs) -> TrainResult:
    """Train one model (a batch of one)."""
    return train_many([config], **kwargs)[0]


def planned_steps(configs: Sequence[TrainConfig]) -> tuple[int, int]:
    """`(steps, compiles)` that `train_many(configs)` reports: per distinct structure, its steps."""
    statics = {c.static for c in configs}
    return sum(s.steps for s in statics), len(statics)


def stderr_progress(label: str, configs: Sequence[TrainConfig] = (), **kwargs) -> Progress:
    """A `sims.progress.Progress` in training steps for `train_many(configs)`, on stderr.

    With `configs` it is planned for them (several `train_many` calls can share it);
    without, the first `train_many` plans it. `kwargs` go to `Progress` (`enabled`, ...).
    """
    progress = Progress(label, "steps", **kwargs)
    if configs:
        steps, compiles = planned_steps(configs)
        progress.plan(steps, warmups=compiles)
    return progress


float64_module(__name__)  # 64-bit types inside these functions only

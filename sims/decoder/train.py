"""Training many decoders at once: pure `init` / `step` / `advance`, vmapped over runs.

As `sims.toy.train` does for the toy: the structure of a run (`LMConfig.static`) is static,
its hyperparameters (`lr`, `weight_decay`, `warmup`, `clip`, `seed`) travel as arrays
(`LMHyper`), so one compiled program trains every seed of a sweep that shares a shape.
A model is an `nnx.split` pair: the graph (static, one per structure) and the parameter
state (one per run, stacked along a leading run axis). Steps run inside `lax.scan`,
`eval_every` at a time; between blocks the host records the held-out loss and accuracy,
stops on a non-finite loss, and reports progress. At the end every run is scored on the
placement-controlled evaluation set of `sims.decoder.evaluate`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int, PRNGKeyArray

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.decoder.recall import RecallBatch, sample_batch
from weakspots.idealized.decoder.v4_attention import IndexerStat
from weakspots.idealized.precision import float64
from weakspots.sims.decoder.evaluate import evaluate_many, phase_summary
from weakspots.sims.decoder.forward import (
    first_query_correct,
    first_query_correct_from_logits,
    first_query_hits,
    graphdef,
    jit,
    merge,
    query_logits,
    query_part,
)
from weakspots.sims.progress import Progress
from weakspots.sims.schedule import warmup_cosine
from weakspots.sims.toy.train import TrainingDiverged, stack_hyper

DTYPE = jnp.float32
SEQUENTIAL_FLOPS = 1e8  # model FLOPs per step from which runs advance in turn (`runs_in_sequence`)


class LMHyper(eqx.Module):
    """One run's (or, with a leading axis, many runs') shape-free hyperparameters."""

    lr: Float[Array, "*R"]
    weight_decay: Float[Array, "*R"]
    warmup: Float[Array, "*R"]
    clip: Float[Array, "*R"]
    seed: Int[Array, "*R"]

    @staticmethod
    def stack(configs: Sequence[LMConfig]) -> LMHyper:
        """Stack the hyperparameters of configs that share `LMConfig.static`."""
        return stack_hyper(LMHyper, configs)


class LMState(eqx.Module):
    params: nnx.State
    opt_state: optax.OptState
    key: PRNGKeyArray
    step: Int[Array, ""]


class LMHistory(eqx.Module):
    """What a run records after each block of `eval_every` steps (leading axis E; runs in front).

    `loss` is the mean training loss over the block; `eval_loss` and `eval_accuracy` are
    measured on `eval_batch` held-out sequences (uniform placement), the accuracy on the
    first query's value.
    """

    steps: Int[Array, " E"]
    loss: Float[Array, " E"]
    eval_loss: Float[Array, " E"]
    eval_accuracy: Float[Array, " E"]


def learning_rate(config: LMConfig, hyper: LMHyper, step) -> Array:
    """Linear warmup, then cosine decay to lr / 10 (`sims.schedule.warmup_cosine`)."""
    return warmup_cosine(step, lr=hyper.lr, warmup=hyper.warmup, steps=config.steps, dtype=DTYPE)


def optimizer(hyper: LMHyper, lr) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with weight decay on the matrices (ndim >= 2)."""
    matrices = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)  # noqa: E731
    return optax.chain(
        optax.clip_by_global_norm(hyper.clip),
        optax.adamw(lr, weight_decay=hyper.weight_decay, mask=matrices),
    )


def init(config: LMConfig, hyper: LMHyper) -> LMState:
    """The initial state of one run (vmap it over a stacked `LMHyper` for many)."""
    k_model, k_data = jax.random.split(jax.random.key(hyper.seed))
    params = nnx.split(Decoder(config.decoder, rngs=nnx.Rngs(params=k_model)))[1]
    opt_state = optimizer(hyper, hyper.lr).init(params)
    return LMState(params, opt_state, k_data, jnp.zeros((), jnp.int32))


def _loss(config: LMConfig, logits: Array, batch: RecallBatch) -> Array:
    targets = query_part(config, batch.targets)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    weights = query_part(config, batch.scored).astype(DTYPE)
    return jnp.sum(losses * weights) / jnp.sum(weights)


def sequence_loss(config: LMConfig, params: nnx.State, batch: RecallBatch) -> Array:
    """Mean cross-entropy of the scored next tokens (the queried values)."""
    return _loss(config, query_logits(config, params, batch.tokens), batch)


def pooling_entropy(config: LMConfig, params: nnx.State) -> Array:
    """Mean over compressed layers and heads of the entropy (nats) of the pooling weights.

    Each head's weights (`Decoder.pooling_weights`, `(H, s)`) are normalised to sum to one
    first (deepseek_v4 with overlap returns the own block's share of its window).
    """
    weights = [w for w in merge(config.decoder, params).pooling_weights() if w is not None]
    if not weights:
        raise ValueError(f"{config.operator} has no pooling weights to regularise")
    stacked = jnp.stack(weights)  # (layers, H, s)
    p = stacked / jnp.sum(stacked, axis=-1, keepdims=True)
    return jnp.mean(-jnp.sum(p * jnp.log(jnp.maximum(p, 1e-30)), axis=-1))


def indexer_statistics(
    config: LMConfig, params: nnx.State, tokens: Int[Array, "B T"]
) -> tuple[Array, Array, Array]:
    """Query logits, and per layer with an indexer (csa, compressed) its KL loss and its recall
    `(layers,)`.

    The KL runs from the main attention's distribution over the visible compressed entries
    (stop-gradient) to the indexer's; recall is the share of the entries the main
    attention ranks in its top `indexer_topk` that the indexer keeps
    (`idealized.decoder.v4_attention.indexer_statistics`).
    """
    model = merge(config.decoder, params)
    forward = nnx.capture(lambda m, t: m(t, start=config.task.context_len), IndexerStat)
    logits, stats = forward(model, tokens)
    flat = dict(nnx.to_flat_state(stats))
    kl = [v.get_value()[0] for path, v in flat.items() if path[-1] == "indexer_kl"]
    recall = [v.get_value()[0] for path, v in flat.items() if path[-1] == "indexer_recall"]
    return logits, jnp.stack(kl), jnp.stack(recall)


def indexer_recall(config: LMConfig, params: nnx.State, tokens: Int[Array, "B T"]) -> Array:
    """Per layer with an indexer, its recall of the entries the main attention would pick."""
    return indexer_statistics(config, params, tokens)[2]


def training_loss(config: LMConfig, params: nnx.State, batch: RecallBatch) -> Array:
    """The objective of a step: `sequence_loss`, minus `phase_entropy` times `pooling_entropy`
    when `config.phase_entropy > 0` (the toy's phase-entropy regulariser), plus
    `indexer_kl` times the mean indexer KL over the layers with an indexer (`config.indexed`)."""
    if config.indexed:
        logits, kl, _ = indexer_statistics(config, params, batch.tokens)
        loss = _loss(config, logits, batch) + config.indexer_kl * jnp.mean(kl)
    else:
        loss = sequence_loss(config, params, batch)
    if config.phase_entropy > 0:
        loss = loss - config.phase_entropy * pooling_entropy(config, params)
    return loss


def step(config: LMConfig, state: LMState, hyper: LMHyper) -> tuple[LMState, Array]:
    """One AdamW step on `training_loss` of a fresh batch; steps past `config.steps` leave the
    state as is."""
    key, k_batch = jax.random.split(state.key)
    batch = sample_batch(k_batch, config.task, config.batch)
    loss, grads = jax.value_and_grad(partial(training_loss, config))(state.params, batch)
    opt = optimizer(hyper, learning_rate(config, hyper, state.step))
    updates, opt_state = opt.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    new = LMState(params, opt_state, key, state.step + 1)
    active = state.step < config.steps
    new = jax.tree.map(lambda a, b: jnp.where(active, a, b), new, state)
    return new, jnp.where(active, loss, jnp.nan)


def advance(config: LMConfig, state: LMState, hyper: LMHyper):
    """`eval_every` steps inside `lax.scan`; returns the new state and each step's loss."""
    return jax.lax.scan(lambda s, _: step(config, s, hyper), state, None, length=config.eval_every)


@partial(jit, static_argnums=0)
def held_out_batch(config: LMConfig) -> RecallBatch:
    """The `eval_batch` sequences of the running evaluation (uniform placement, `eval_seed`)."""
    return sample_batch(jax.random.key(config.eval_seed), config.task, config.eval_batch)


def _record(config: LMConfig, params: nnx.State, held_out: RecallBatch):
    """Held-out loss and first-query accuracy from one forward pass."""
    logits = query_logits(config, params, held_out.tokens)
    return (
        _loss(config, logits, held_out),
        jnp.mean(first_query_correct_from_logits(config, logits, held_out).astype(DTYPE)),
    )


@partial(jit, static_argnums=0)
def held_out_recall(config: LMConfig, params: nnx.State) -> Array:
    """`indexer_recall` on the running evaluation's held-out sequences, per csa layer."""
    return indexer_recall(config, params, held_out_batch(config).tokens)


@partial(jit, static_argnums=0)
def _init_many(config: LMConfig, hyper: LMHyper) -> LMState:
    return jax.vmap(partial(init, config))(hyper)


def runs_in_sequence(config: LMConfig) -> bool:
    """Whether `_advance_many` advances its runs one after another in one program (`lax.map`)
    instead of vmapping them: on CPU, once one run's step is large enough to keep the cores'
    matmul units busy, vmapping turns every matmul into a batched one plus layout copies,
    which XLA:CPU runs more slowly than the runs in turn (docs/performance.md, decoders)."""
    return jax.default_backend() == "cpu" and model_flops_per_step(config) >= SEQUENTIAL_FLOPS


@partial(jit, static_argnums=0, donate_argnums=1)
def _advance_many(config: LMConfig, states: LMState, hyper: LMHyper, held_out: RecallBatch):
    """`eval_every` steps of every run, then each run's held-out loss and accuracy."""
    if runs_in_sequence(config):
        states, losses = jax.lax.map(lambda run: advance(config, *run), (states, hyper))
        record = jax.lax.map(lambda params: _record(config, params, held_out), states.params)
    else:
        states, losses = jax.vmap(partial(advance, config))(states, hyper)
        record = jax.vmap(partial(_record, config), in_axes=(0, None))(states.params, held_out)
    return states, losses, record


def run_batch(
    config: LMConfig,
    hyper: LMHyper,
    *,
    progress: Progress | None = None,
    stop_on_divergence: bool = True,
) -> tuple[LMHistory, nnx.State, np.ndarray]:
    """Train R runs that share `config.static`; `hyper` has leading axis R.

    Returns the stacked history `(R, E)`, the stacked final parameter states and the
    per-step training loss `(R, steps)` as numpy. Raises `TrainingDiverged` at the first
    block in which some run's loss is not finite. `progress` (`sims.progress.Progress`)
    gets the steps of each block, the first marked as carrying the compile.
    `stop_on_divergence=False` trains every run to the end instead of raising.
    """
    config = config.static
    held_out = held_out_batch(config)
    states = _init_many(config, hyper)
    records, step_losses, steps_done = [], [], []
    for block in range(config.eval_times):
        states, losses, record = _advance_many(config, states, hyper, held_out)
        done = min(config.eval_every, config.steps - block * config.eval_every)
        losses = np.asarray(losses)[:, :done]
        if stop_on_divergence:
            _raise_if_diverged(losses, hyper, block * config.eval_every)
        step_losses.append(losses)
        steps_done.append(block * config.eval_every + done)
        records.append((losses.mean(axis=1), *map(np.asarray, record)))
        if progress is not None:
            progress.update(done, warmup=block == 0)
    loss, eval_loss, eval_accuracy = (np.stack(x, axis=1) for x in zip(*records, strict=True))
    runs = loss.shape[0]
    steps = np.broadcast_to(np.asarray(steps_done), (runs, len(steps_done)))
    history = LMHistory(steps, loss, eval_loss, eval_accuracy)
    return history, states.params, np.concatenate(step_losses, axis=1)


def _raise_if_diverged(losses: np.ndarray, hyper: LMHyper, first_step: int) -> None:
    bad = ~np.isfinite(losses)
    if bad.any():
        run, offset = map(int, np.argwhere(bad)[0])
        raise TrainingDiverged(
            f"training diverged: loss is not finite at step {first_step + offset + 1} "
            f"(run {run}, seed {int(np.asarray(hyper.seed)[run])}, "
            f"lr {float(np.asarray(hyper.lr)[run]):g}); try a smaller --lr"
        )


@dataclasses.dataclass(frozen=True)
class LMResult:
    """One finished run: config, history, final parameters, the evaluation's outcomes, timing."""

    config: LMConfig
    history: LMHistory
    params: nnx.State
    step_loss: np.ndarray
    outcomes: np.ndarray  # (M,) bool: the first query answered, per evaluation sequence
    wall_seconds: float
    tokens_per_second: float

    @property
    def model(self) -> Decoder:
        return merge(self.config.decoder, self.params)

    def summary(self) -> dict:
        """The run's metrics as plain Python values (the `--json` keys of `weakspots lm train`)."""
        out = phase_summary(self.config, self.outcomes)
        weights = [
            None if w is None else np.asarray(w).tolist() for w in self.model.pooling_weights()
        ]
        out["pooling_weights"] = weights if any(w is not None for w in weights) else None
        if self.config.indexed:
            recall = held_out_recall(self.config.static, self.params)
            out["indexer_recall"] = np.asarray(recall).tolist()
        out["final_loss"] = float(self.history.loss[-1])
        out["final_eval_accuracy"] = float(self.history.eval_accuracy[-1])
        out["wall_seconds"] = self.wall_seconds
        out["tokens_per_second"] = self.tokens_per_second
        return out


def train_many(configs: Sequence[LMConfig], *, progress: Progress | None = None) -> list[LMResult]:
    """Train and evaluate every config, one compiled program per distinct `config.static`.

    `progress` counts training steps (a batch of runs trained together counts once); if it
    has no total yet, it is planned here.
    """
    groups: dict[LMConfig, list[int]] = {}
    for i, config in enumerate(configs):
        groups.setdefault(config.static, []).append(i)
    if progress is not None and progress.total is None:
        progress.plan(sum(s.steps for s in groups), warmups=len(groups))
    results: list[LMResult | None] = [None] * len(configs)
    for static, members in groups.items():
        start = time.perf_counter()
        history, params, step_loss = run_batch(
            static, LMHyper.stack([configs[i] for i in members]), progress=progress
        )
        jax.block_until_ready(params)
        train_seconds = time.perf_counter() - start
        outcomes = evaluate_many(static, params, seeds=[configs[i].seed for i in members])
        wall = (time.perf_counter() - start) / len(members)
        tokens = len(members) * static.steps * static.batch * static.seq_len
        for r, i in enumerate(members):
            take = lambda x, r=r: x[r]  # noqa: E731
            results[i] = LMResult(
                config=configs[i],
                history=jax.tree.map(take, history),
                params=jax.tree.map(take, params),
                step_loss=step_loss[r],
                outcomes=outcomes[r],
                wall_seconds=wall,
                tokens_per_second=tokens / train_seconds,
            )
    return results


def train(config: LMConfig, **kwargs) -> LMResult:
    """Train one decoder (a batch of one)."""
    return train_many([config], **kwargs)[0]


def model_flops_per_step(config: LMConfig) -> float:
    """Matmul FLOPs of one training step (forward and backward, 3x the forward), by count.

    Per layer: the four `D x D` projections and the MLP of every token, and attention
    (`2 hd` per score and per weighted value, every head) against the slots the layer
    computes, as its kind counts them (`AbstractLayerKind.scored_slots`): all `T` tokens
    (dense), the `T // s` entries (compressed), and for a local window `W' = min(W, T)` the
    `2 W'` keys of each block of `W'` queries, over `T` rounded up to whole blocks
    (`attention.local_scores`). Plus the unembedding of the query section (`query_logits`).
    Pooling and elementwise work are not counted (as in MFU accounting).
    """
    d, T, V = config.d_model, config.seq_len, config.task.vocab
    flops = 2 * d * V * (T - config.task.context_len)
    for kind in config.layer_kinds:
        flops += (2 * 4 * d * d + 2 * 2 * config.mlp * d * d) * T
        flops += 2 * 2 * d * layer_kind(kind).scored_slots(config, T)
    return 3.0 * flops * config.batch


def tokens_per_step(config: LMConfig) -> int:
    return config.batch * config.seq_len


__all__ = [
    "LMHistory",
    "LMHyper",
    "LMResult",
    "LMState",
    "advance",
    "first_query_correct",
    "first_query_hits",
    "graphdef",
    "held_out_recall",
    "indexer_recall",
    "indexer_statistics",
    "init",
    "learning_rate",
    "merge",
    "model_flops_per_step",
    "pooling_entropy",
    "query_logits",
    "run_batch",
    "sequence_loss",
    "step",
    "train",
    "train_many",
    "training_loss",
]

# The entry points run with 64-bit types on, as the CLI, sweeps and experiments run them:
# the decoder computes in float32 by explicit dtypes, but jax's integer defaults follow
# the setting, and a library call must give the recorded runs' numbers bit for bit.
run_batch, train_many, train = float64(run_batch), float64(train_many), float64(train)


def stacked_params(runs) -> object:
    """The runs' parameter states stacked along a leading run axis."""
    return jax.tree.map(lambda *xs: jax.numpy.stack(xs), *[r.params for r in runs])

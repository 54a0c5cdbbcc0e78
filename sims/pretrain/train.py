"""Next-token pretraining of the backbone, many seeds at once: AdamW, warmup, cosine, clipping.

As `sims.decoder.train` does: the structure (`PretrainConfig.static`) is static, the
hyperparameters (`lr`, `weight_decay`, `warmup`, `clip`, `seed`, `steps`) travel as arrays, and
`config.seeds` runs are vmapped in one compiled program, `log_every` steps per call inside
`lax.scan`. Batches come from the host (`corpus.batches`, deterministic in `(seed, step)`:
seed s trains on the stream of seed s), so a run resumed from its last checkpoint sees the
same data and ends with the same parameters, bit for bit, as one never interrupted.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jaxtyping import Array, Float, Int

from weakspots.idealized.pretrain import corpus
from weakspots.idealized.pretrain.config import PRETRAIN_HYPER_FIELDS, PretrainConfig
from weakspots.idealized.pretrain.model import Backbone, merge, train_flops_per_step
from weakspots.idealized.pretrain.tokenizer import Tokenizer
from weakspots.sims.pretrain import checkpoint
from weakspots.sims.pretrain.emergence import Emergence
from weakspots.sims.progress import Progress
from weakspots.sims.schedule import warmup_constant, warmup_cosine

DTYPE = jnp.float32
VALIDATION_SEED = corpus.VALIDATION_SEED  # the stream every run's validation loss is measured on
LOG_SECONDS = 10.0  # at most one loss line per this many seconds
KEPT = "checkpoints"  # with keep_checkpoints: <out>/checkpoints/step-<n>/ holds each checkpoint

Batches = Callable[[int, int, int, int], Iterator[np.ndarray]]
"""`(seed, batch, length, start_step) -> iterator of int32 (batch, length + 1)` token arrays."""


class Hyper(eqx.Module):
    """One run's (or, with a leading axis, many runs') shape-free hyperparameters."""

    lr: Float[Array, "*R"]
    weight_decay: Float[Array, "*R"]
    warmup: Float[Array, "*R"]
    clip: Float[Array, "*R"]
    seed: Int[Array, "*R"]
    steps: Float[Array, "*R"]  # the cosine's length

    @staticmethod
    def of(config: PretrainConfig) -> Hyper:
        """Every seed's hyperparameters, stacked `(seeds,)`."""
        seeds = np.arange(config.seed, config.seed + config.seeds, dtype=np.int32)
        fill = lambda name: np.full(config.seeds, getattr(config, name), np.float32)  # noqa: E731
        return Hyper(
            fill("lr"), fill("weight_decay"), fill("warmup"), fill("clip"), seeds, fill("steps")
        )


class TrainState(eqx.Module):
    params: nnx.State
    opt_state: optax.OptState
    step: Int[Array, ""]


def tokenizer_of(config: PretrainConfig) -> Tokenizer:
    """The corpus tokenizer a run trains with (`open_words` words per open class)."""
    return Tokenizer.sized(config.open_words)


def corpus_for(config: PretrainConfig) -> Batches:
    """The corpus of a run's recipe: its tokenizer and its word distribution (`zipf`)."""
    tokenizer = tokenizer_of(config)

    def batches(seed: int, batch: int, length: int, start_step: int) -> Iterator[np.ndarray]:
        return corpus.batches(tokenizer, seed, batch, length, start_step, config.zipf)

    return batches


def resolve_vocab(config: PretrainConfig) -> PretrainConfig:
    """`vocab = 0` read as the run's tokenizer's size."""
    if config.vocab:
        return config
    return config.replace(vocab=tokenizer_of(config).vocab_size)


def learning_rate(config: PretrainConfig, hyper: Hyper, step) -> Array:
    """Linear warmup, then `config.schedule`: cosine decay to lr / 10
    (`sims.schedule.warmup_cosine`) or the peak held (`warmup_constant`)."""
    if config.schedule == "constant":
        return warmup_constant(step, lr=hyper.lr, warmup=hyper.warmup, dtype=DTYPE)
    return warmup_cosine(step, lr=hyper.lr, warmup=hyper.warmup, steps=hyper.steps, dtype=DTYPE)


def optimizer(hyper: Hyper, lr) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW with weight decay on the matrices (ndim >= 2)."""
    matrices = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)  # noqa: E731
    return optax.chain(
        optax.clip_by_global_norm(hyper.clip),
        optax.adamw(lr, b1=0.9, b2=0.95, weight_decay=hyper.weight_decay, mask=matrices),
    )


def init(config: PretrainConfig, hyper: Hyper) -> TrainState:
    """The initial state of one run (vmap it over a stacked `Hyper` for many)."""
    model = Backbone(config, rngs=nnx.Rngs(params=jax.random.key(hyper.seed)))
    params = nnx.split(model)[1]
    opt_state = optimizer(hyper, hyper.lr).init(params)
    return TrainState(params, opt_state, jnp.zeros((), jnp.int32))


def next_token_loss(config: PretrainConfig, params: nnx.State, tokens: Int[Array, "B T1"]):
    """Mean cross-entropy of every next token; `tokens` `(B, T + 1)`."""
    logits = merge(config, params)(tokens[:, :-1])
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
    return jnp.mean(losses)


def step(
    config: PretrainConfig, state: TrainState, hyper: Hyper, tokens
) -> tuple[TrainState, Array]:
    """One AdamW step of one run on `tokens` `(B, T + 1)`; returns the state and the loss."""
    loss, grads = jax.value_and_grad(partial(next_token_loss, config))(state.params, tokens)
    opt = optimizer(hyper, learning_rate(config, hyper, state.step))
    updates, opt_state = opt.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return TrainState(params, opt_state, state.step + 1), loss


def advance(config: PretrainConfig, state: TrainState, hyper: Hyper, tokens):
    """`tokens` `(k, B, T + 1)`: k steps of one run in `lax.scan`; returns the losses `(k,)`."""
    return jax.lax.scan(lambda s, t: step(config, s, hyper, t), state, tokens)


@partial(jax.jit, static_argnums=0)
def init_many(config: PretrainConfig, hyper: Hyper) -> TrainState:
    return jax.vmap(partial(init, config))(hyper)


@partial(jax.jit, static_argnums=0, donate_argnums=1)
def advance_many(config: PretrainConfig, states: TrainState, hyper: Hyper, tokens):
    """Every run's `advance`; `tokens` `(R, k, B, T + 1)`."""
    return jax.vmap(partial(advance, config))(states, hyper, tokens)


@partial(jax.jit, static_argnums=0)
def validation_loss_many(config: PretrainConfig, params: nnx.State, tokens) -> Array:
    """Every run's mean loss on the same held-out `tokens` `(n, B, T + 1)`, `(R,)`."""
    one = lambda p: jnp.mean(jax.lax.map(partial(next_token_loss, config, p), tokens))  # noqa: E731
    return jax.vmap(one)(params)


@dataclasses.dataclass
class History:
    """Loss curves: the mean training loss of each `log_every` block `(blocks, R)` and the
    validation loss at each checkpoint `(checkpoints, R)`."""

    steps: list[int] = dataclasses.field(default_factory=list)
    loss: list[list[float]] = dataclasses.field(default_factory=list)
    val_steps: list[int] = dataclasses.field(default_factory=list)
    val_loss: list[list[float]] = dataclasses.field(default_factory=list)
    train_seconds: float = 0.0  # wall time of the blocks after each call's first
    timed_steps: int = 0
    tokens_per_second: float = 0.0
    flops_per_second: float = 0.0
    # every `emergence_every` steps (`sims.pretrain.emergence`): per measurement, per seed
    emergence_steps: list[int] = dataclasses.field(default_factory=list)
    emergence_tokens: list[int] = dataclasses.field(default_factory=list)  # per seed
    copy_accuracy: list[list[float]] = dataclasses.field(default_factory=list)
    copy_accuracy_contested: list[list[float]] = dataclasses.field(default_factory=list)
    lookup_prefix: list[list[float]] = dataclasses.field(default_factory=list)
    lookup_in_sequence: list[list[float]] = dataclasses.field(default_factory=list)
    emergence_probe: dict = dataclasses.field(default_factory=dict)

    def record_emergence(self, step: int, tokens: int, scores: dict) -> None:
        self.emergence_steps.append(step)
        self.emergence_tokens.append(tokens)
        for name, values in scores.items():
            getattr(self, name).append(values)

    def asdict(self) -> dict:
        return dataclasses.asdict(self)


def _stream(data: Batches, config: PretrainConfig, seed: int, start: int) -> Iterator[np.ndarray]:
    return iter(data(seed, config.batch, config.seq_len, start))


def _block(streams: list[Iterator[np.ndarray]], k: int) -> np.ndarray:
    """`(R, k, B, T + 1)` int32: the next k batches of every seed's stream."""
    return np.stack([np.stack([next(s) for _ in range(k)]) for s in streams]).astype(np.int32)


def _validation_tokens(data: Batches, config: PretrainConfig) -> np.ndarray:
    stream = _stream(data, config, VALIDATION_SEED, 0)
    return np.stack([next(stream) for _ in range(config.val_batches)]).astype(np.int32)


def _checkpoint(
    out_dir: Path, config, states: TrainState, history: History, val_tokens, keep: bool = False
) -> None:
    step = int(np.asarray(states.step)[0])
    if config.val_batches:
        val = np.asarray(validation_loss_many(config.static, states.params, val_tokens))
        history.val_steps.append(step)
        history.val_loss.append(val.tolist())
    checkpoint.save_tree(out_dir / checkpoint.STATE, states)
    for r, seed in enumerate(range(config.seed, config.seed + config.seeds)):
        params = jax.tree.map(lambda x, r=r: x[r], states.params)
        checkpoint.save_seed(out_dir, config.for_seed(seed), params)
        if keep:
            checkpoint.save_seed(out_dir / KEPT / f"step-{step}", config.for_seed(seed), params)
    if keep:
        checkpoint.write_json(out_dir / KEPT / f"step-{step}" / checkpoint.CONFIG, config.asdict())
    checkpoint.write_json(out_dir / checkpoint.HISTORY, history.asdict())


def _check_same_run(out_dir: Path, config: PretrainConfig) -> None:
    """Refuse to resume a run of another config, except a constant-rate run asked for more
    steps (its trajectory does not depend on `steps`): that one is extended."""
    stored = checkpoint.read_config(out_dir)
    if stored == config:
        return
    changed = [k for k, v in config.asdict().items() if stored.asdict()[k] != v]
    if changed == ["steps"] and config.schedule == "constant" and config.steps > stored.steps:
        checkpoint.write_json(out_dir / checkpoint.CONFIG, config.asdict())
        return
    raise ValueError(
        f"{out_dir} holds a run of another config ({', '.join(changed)} differ); "
        "use a new --out directory"
    )


def _history_json(out_dir: Path) -> dict:
    return json.loads((out_dir / checkpoint.HISTORY).read_text())


def pretrain(
    config: PretrainConfig,
    *,
    out_dir: str | Path,
    progress: Progress | None = None,
    data: Batches | None = None,
    stop_after: int | None = None,
    keep_checkpoints: bool = False,
) -> History:
    """Train `config.seeds` runs, writing checkpoints to `out_dir` (and resuming from it).

    `data` (default: the project's corpus) gives each seed's batches; `stop_after` ends the
    call after the first checkpoint at or past that step (an interruption, for tests);
    `keep_checkpoints` also keeps every checkpoint's seeds in `out_dir/checkpoints/step-<n>/`
    (the gates over training, `sims.pretrain.mechanism.gate_trajectory`).
    Returns the loss curves; the runs' checkpoints are `checkpoint.seed_checkpoints(out_dir)`.
    """
    config = resolve_vocab(config)
    data = corpus_for(config) if data is None else data
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    static, hyper = config.static, Hyper.of(config)
    resuming = (out_dir / checkpoint.STATE).exists()
    if resuming:
        _check_same_run(out_dir, config)
    else:
        checkpoint.write_json(out_dir / checkpoint.CONFIG, config.asdict())
    states = init_many(static, hyper)
    history = History()
    if resuming:
        states = checkpoint.load_tree(out_dir / checkpoint.STATE, states)
        history = History(**_history_json(out_dir))
    start = int(np.asarray(states.step)[0])
    seeds = range(config.seed, config.seed + config.seeds)
    streams = [_stream(data, config, s, start) for s in seeds]
    val_tokens = _validation_tokens(data, config) if config.val_batches else None
    every = config.checkpoint_every or config.steps
    emergence = None
    if config.emergence_every:
        emergence = Emergence(config, tokenizer_of(config))
        history.emergence_probe = emergence.describe()
        if start == 0 and not history.emergence_steps:
            history.record_emergence(0, 0, emergence.measure(states.params))
    tokens_per_step = config.seeds * config.batch * config.seq_len
    if progress is not None and progress.total is None:
        progress.plan(config.steps, done=start, warmups=1)
    last_line, first = time.perf_counter(), True
    done = start
    while done < config.steps:
        k = min(config.log_every, config.steps - done)
        tokens = _block(streams, k)
        began = time.perf_counter()
        states, losses = advance_many(static, states, hyper, tokens)
        losses = np.asarray(losses)  # waits for the block
        seconds = time.perf_counter() - began
        if not first:  # the first block of a call carries the compile
            history.train_seconds += seconds
            history.timed_steps += k
        done += k
        history.steps.append(done)
        history.loss.append(losses.mean(axis=1).tolist())
        if not np.all(np.isfinite(losses)):
            raise FloatingPointError(
                f"training diverged: loss not finite by step {done}; try a smaller --lr"
            )
        if progress is not None:
            progress.update(k, warmup=first)
            rate = tokens_per_step * history.timed_steps / max(history.train_seconds, 1e-9)
            now = time.perf_counter()
            if now - last_line >= LOG_SECONDS or done == config.steps:
                shown = f"{rate:.3g} tokens/s" if history.timed_steps else "compiling"
                progress.write(f"step {done}: loss {losses[:, -1].mean():.4f}, {shown}")
                last_line = now
        first = False
        if emergence is not None and (done % config.emergence_every == 0 or done == config.steps):
            scores = emergence.measure(states.params)
            history.record_emergence(done, done * config.batch * config.seq_len, scores)
            if progress is not None:
                progress.write(
                    f"step {done}: copy {np.mean(scores['copy_accuracy']):.3f} (contested "
                    f"{np.mean(scores['copy_accuracy_contested']):.3f}), lookup "
                    f"{np.mean(scores['lookup_prefix']):.3f} (prefix), "
                    f"{np.mean(scores['lookup_in_sequence']):.3f} (in-sequence)"
                )
        if done % every == 0 or done == config.steps:
            if history.train_seconds:
                rate = history.timed_steps / history.train_seconds
                history.tokens_per_second = tokens_per_step * rate
                history.flops_per_second = config.seeds * train_flops_per_step(config) * rate
            _checkpoint(out_dir, config, states, history, val_tokens, keep_checkpoints)
            if stop_after is not None and done >= stop_after and done < config.steps:
                break
    return history


def logits_fn(config: PretrainConfig, params: nnx.State) -> Callable[[np.ndarray], np.ndarray]:
    """`tokens (B, T) int32 -> logits (B, T, V)` of one run, compiled once per shape."""
    model = merge(config, params)
    graph, state = nnx.split(model)

    @jax.jit
    def forward(state, tokens):
        return nnx.merge(graph, state)(tokens)

    return lambda tokens: np.asarray(forward(state, jnp.asarray(tokens, jnp.int32)))


__all__ = [
    "PRETRAIN_HYPER_FIELDS",
    "History",
    "Hyper",
    "TrainState",
    "advance",
    "init",
    "learning_rate",
    "logits_fn",
    "merge",
    "next_token_loss",
    "pretrain",
    "step",
]

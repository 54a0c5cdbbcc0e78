"""The selection model at finite d: an indexer keeps the top k of N entries (docs/theory.md §9.5).

The toy's task (docs/theory.md §2) read through DeepSeek-V4's Lightning Indexer, idealised.
Each problem has two independent sets of products: the main attention's `q . x[e, j]` and
the indexer's `q_I . x_I[e, j]` (its own keys and query, as the indexer's own projections
give it), both drawn exactly as `idealized.toy.task.sample_batch` draws them, the needle at entry
0 (entries are exchangeable). The indexer pools with its own weights `alpha_I` and scores
`u_e = sum_j alpha_I[j] q_I . x_I[e, j]`; the main attention pools with `alpha`, logits
`z_e = beta sum_j alpha_j q . x[e, j]`, and reads only the `k` entries with the largest
scores (the top-k passes no gradient). The loss is

    |P_sel - onehot|^2  +  KL(stop_grad(P_all) || softmax(beta u)),

the toy's mse on the main attention restricted to the selected entries, plus the indexer's
KL to the main attention's distribution over all entries (V3.2/V4's indexer objective). A
problem is retrieved when the needle is selected and has the largest main logit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from weakspots import validation as check
from weakspots.errors import ConfigError
from weakspots.idealized.toy.config import FlowConfig, TrainConfig
from weakspots.idealized.toy.model import initial_pooling_logits
from weakspots.idealized.toy.task import chi_square, random_integers, split_key, standard_normal


def _check_kind(heads, loss, learn_gain, chunks, topk) -> None:
    if loss != "mse":
        raise ConfigError("loss", f"the selection model's loss is mse + KL, got {loss!r}")
    if learn_gain:
        raise ConfigError("learn_gain", "the selection model's gain is fixed")
    check.int_at_least("topk", topk, 1)
    if topk > chunks:
        raise ConfigError("topk", f"must be <= --chunks ({chunks}), got {topk}")


@dataclass(frozen=True)
class SelectionTrainConfig(TrainConfig):
    """A `TrainConfig` for the selection model (`sims.toy.train.train_many` trains it): `topk` k
    entries kept of `chunks`; one head of main attention and one indexer, each softmax-pooled,
    both with gain `gain`; no chunking variants. The plain `TrainConfig` is unchanged."""

    topk: int = 1

    def __post_init__(self):
        super().__post_init__()
        if self.heads != 1:
            raise ConfigError("heads", f"the selection model has one head, got {self.heads}")
        if self.operator != "softmax_pool":
            raise ConfigError("operator", f"the selection model pools with softmax_pool, got {self.operator!r}")
        _check_kind(self.heads, self.loss, self.learn_gain, self.chunks, self.topk)
        for flag in ("learn_projections", "rope_anchor", "stagger", "overlap"):
            if getattr(self, flag):
                raise ConfigError(flag, "does not apply to the selection model")
        if self.offset_ensemble != 1 or self.phase_entropy:
            raise ConfigError("offset_ensemble", "mitigations do not apply to the selection model")

    model_kind = "selection"


@dataclass(frozen=True)
class SelectionFlowConfig(FlowConfig):
    """A `FlowConfig` for the selection model's reduced flow (d = inf): the state's two rows of
    pooling logits are (main attention, indexer), hence `heads` = 2; `topk` k (static)."""

    heads: int = 2
    topk: int = 1

    def __post_init__(self):
        super().__post_init__()
        if self.heads != 2:
            raise ConfigError("heads", f"the selection flow's two rows are (main, indexer): 2, got {self.heads}")
        _check_kind(self.heads, self.loss, self.learn_gain, self.chunks, self.topk)
        if self.dim is not None:
            raise ConfigError("dim", "the selection flow is the d = inf loss: omit --dim")
        if self.weight_decay or self.phase_entropy:
            raise ConfigError("weight_decay", "penalties do not apply to the selection flow")

    model_kind = "selection"


class SelectionBatch(eqx.Module):
    """Problems: main and indexer products (B, N, s) with the needle at entry 0, and phases."""

    gram: Float[Array, "B N s"]
    index_gram: Float[Array, "B N s"]
    phase: Int[Array, " B"]


class SelectionModel(eqx.Module):
    """Main pooling logits (1, s), indexer pooling logits (1, s), fixed gain."""

    pooling_logits: Float[Array, "1 s"]
    index_logits: Float[Array, "1 s"]
    log_gain: Float[Array, " 1"]

    @property
    def gain(self) -> Float[Array, " 1"]:
        return jax.lax.stop_gradient(jnp.exp(self.log_gain))

    @property
    def uses_gram(self) -> bool:
        return True

    def pooling_weights(self) -> Float[Array, "1 s"]:
        return jax.nn.softmax(self.pooling_logits, axis=-1)

    def index_weights(self) -> Float[Array, "1 s"]:
        return jax.nn.softmax(self.index_logits, axis=-1)


def init_model_for_seed(seed, config: SelectionTrainConfig, gain, init_scale, dtype=jnp.float32):
    """The main and indexer logits: rows 0 and 1 of the toy trainer's two-head draw for `seed`
    (as `SelectionFlowConfig`'s start)."""
    logits = initial_pooling_logits(seed, 2, config.stride, init_scale, dtype)
    return SelectionModel(
        pooling_logits=logits[:1],
        index_logits=logits[1:],
        log_gain=jnp.full((1,), jnp.log(jnp.asarray(gain, dtype)), dtype),
    )


def _gram(key, batch, n, s, d, dtype):
    k_keys, k_norm = split_key(key)
    norm2 = chi_square(k_norm, d, (batch,), dtype) / d
    gram = jnp.sqrt(norm2 / d)[:, None, None] * standard_normal(k_keys, (batch, n, s), dtype)
    return gram, norm2


def sample_batch(key: PRNGKeyArray, config: SelectionTrainConfig, batch: int, *, phase=None, dtype=jnp.float32):
    """`batch` selection problems (module docstring); `phase=None` draws phases uniformly."""
    N, s, d = config.chunks, config.stride, config.dim
    k_phase, k_main, k_index = split_key(key, 3)
    if phase is None:
        phases = random_integers(k_phase, (batch,), 0, s)
    else:
        phases = jnp.full((batch,), phase, dtype=jnp.int32)
    rows = jnp.arange(batch)
    gram, r = _gram(k_main, batch, N, s, d, dtype)
    index_gram, r_index = _gram(k_index, batch, N, s, d, dtype)
    gram = gram.at[rows, 0, phases].set(r)
    index_gram = index_gram.at[rows, 0, phases].set(r_index)
    return SelectionBatch(gram=gram, index_gram=index_gram, phase=phases)


def problem_losses(model: SelectionModel, batch: SelectionBatch, config: SelectionTrainConfig):
    """Per problem: (mse on the selected entries + the indexer's KL, retrieved)."""
    beta = model.gain[0]
    z = beta * (batch.gram @ model.pooling_weights()[0])
    u = batch.index_gram @ model.index_weights()[0]
    kth = jax.lax.top_k(jax.lax.stop_gradient(u), config.topk)[0][:, -1:]
    selected = u >= kth
    p_sel = jax.nn.softmax(jnp.where(selected, z, -jnp.inf), axis=-1)
    onehot = jax.nn.one_hot(0, config.chunks, dtype=z.dtype)
    mse = jnp.sum((p_sel - onehot[None, :]) ** 2, axis=-1)
    p_all = jax.lax.stop_gradient(jax.nn.softmax(z, axis=-1))
    log_q = jax.nn.log_softmax(beta * u, axis=-1)
    kl = jnp.sum(p_all * (jnp.log(jnp.maximum(p_all, 1e-30)) - log_q), axis=-1)
    hit = selected[:, 0] & (jnp.argmax(jnp.where(selected, z, -jnp.inf), axis=-1) == 0)
    return mse + kl, hit, selected[:, 0]


def objective(model: SelectionModel, batch: SelectionBatch, config: SelectionTrainConfig):
    """The mean loss over the batch (what SGD minimises)."""
    return jnp.mean(problem_losses(model, batch, config)[0])


def evaluate(config: SelectionTrainConfig, model: SelectionModel, dtype=jnp.float32):
    """Per-phase accuracy (s,) and mean loss on `eval_samples` problems per phase from `eval_seed`."""

    def one(phase):
        k = jax.random.fold_in(jax.random.key(config.eval_seed), phase)
        batch = sample_batch(k, config, config.eval_samples, phase=phase, dtype=dtype)
        loss, hit, _ = problem_losses(model, batch, config)
        return jnp.mean(hit.astype(dtype)), jnp.mean(loss)

    acc, loss = jax.lax.map(one, jnp.arange(config.stride))
    return acc, jnp.mean(loss)


def selected_fraction(config: SelectionTrainConfig, model: SelectionModel, samples: int, seed: int = 0):
    """P(rank <= k) by phase, measured on `samples` problems per phase (numpy (s,))."""
    out = []
    for phase in range(config.stride):
        batch = sample_batch(jax.random.key(seed * 1000 + phase), config, samples, phase=phase)
        out.append(float(jnp.mean(problem_losses(model, batch, config)[2])))
    return np.asarray(out)


def is_selection(config) -> bool:
    """Whether a train or flow config is the selection model's."""
    return isinstance(config, (SelectionTrainConfig, SelectionFlowConfig))


def asdict(config) -> dict:
    """The config's fields with its kind, `model`: "selection" (for reports)."""
    return {"model": config.model_kind, **dataclasses.asdict(config)}

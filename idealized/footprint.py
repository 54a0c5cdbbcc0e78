"""The footprint model at finite d: carry by a local layer, then a compressed readout (docs/theory.md §9.4).

The task of docs/theory.md §2 with a fact instead of a lone needle. Keys `x[e, j] ~ N(0, I/d)`
for `N` entries of `s` tokens; the fact's value sits at entry 1, phase `phi` (entries are
exchangeable: the model has no positional parameter but the pooling weights, shared by all
entries), its key token at the position before. The query is a fresh `q ~ N(0, I/d)`; a
local layer of width `W` writes `c q` into the `W` tokens from the value on (flat carry),
and the key token holds `c_D q`:

    k_t = x_t + c q [0 <= t - p < W] + c_D q [t = p - 1],    c = g s / beta,  c_D = g_D s / beta,

so that at d = inf the entry logits `beta q . K_e` are the §9.4 `m_i(phi)` with
`g = beta c / s`, `g_D = beta_D / s` under any pooling (the gain beta then sets the finite-d
noise only). The loss is §9.4's per problem,
`N/(N-1) (1 - M)^2` with `M` the softmax mass on the entries holding the fact; a problem is
retrieved when the largest logit is one of them. The sampler draws the inner products only:
given `r = |q|^2 ~ chi2_d / d`, `q . x_t ~ N(0, r/d)` i.i.d. and `q . k_t` adds `r` times
the carry's shift (exact in distribution, as `idealized.toy.task.sample_batch`).
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

VALUE_ENTRY = 1  # the entry holding the fact's value (entry 0 holds the decoy at phase 0)
OPERATORS = ("softmax_pool", "mean_pool")


def shift_table(stride: int, chunks: int, window: int, carry_gain, decoy_gain):
    """(shift (s, N, s), holds (s, N)): per phase, the logit per unit `r = |q|^2` that the
    carry adds to each token (`beta c = g s` carried, `beta_D = g_D s` on the key token), and
    which entries hold the fact (numpy)."""
    s, w = int(stride), int(window)
    phi = np.arange(s)[:, None, None]
    e = np.arange(chunks)[None, :, None]
    j = np.arange(s)[None, None, :]
    rel = (e - VALUE_ENTRY) * s + j - phi  # t - p
    carried = (rel >= 0) & (rel < w)
    key = rel == -1
    shift = carry_gain * s * carried + decoy_gain * s * key
    holds = carried.any(axis=2)
    return shift.astype(np.float64), holds


def _check_shape(stride, chunks, window) -> None:
    last = VALUE_ENTRY + (stride - 1 + window - 1) // stride
    if chunks < last + 2:
        raise ConfigError(
            "chunks",
            f"must be >= {last + 2} for --window {window} at --stride {stride} "
            f"(the fact's entries, the decoy and a distractor), got {chunks}",
        )


def _check_kind(config, heads, loss, learn_gain, operator=None) -> None:
    if heads != 1:
        raise ConfigError("heads", f"the footprint model has one head, got {heads}")
    if loss != "mse":
        raise ConfigError("loss", f"the footprint model's loss is docs/theory.md §9.4's mse, got {loss!r}")
    if learn_gain:
        raise ConfigError("learn_gain", "the footprint model's gain is fixed")
    if operator is not None and operator not in OPERATORS:
        raise ConfigError("operator", f"must be one of {', '.join(OPERATORS)} for the footprint model, got {operator!r}")


def _footprint_fields(config, parent: type) -> None:
    """Cast and check the fields the footprint configs add (window, carry and decoy gains),
    with `parent`'s own checks (the config class the footprint one extends) between."""
    object.__setattr__(config, "carry_gain", float(config.carry_gain))
    object.__setattr__(config, "decoy_gain", float(config.decoy_gain))
    parent.__post_init__(config)
    check.int_at_least("window", config.window, 1)
    check.nonnegative_finite("carry_gain", config.carry_gain)
    check.nonnegative_finite("decoy_gain", config.decoy_gain)


@dataclass(frozen=True)
class FootprintTrainConfig(TrainConfig):
    """A `TrainConfig` for the footprint model (`sims.toy.train.train_many` trains it).

    window W (carry width, tokens from the value on), carry_gain g = beta c / s, decoy_gain
    g_D = beta_D / s (the key token's logit under mean pooling); `gain` is beta, which sets
    the finite-d noise only. One head, mse, fixed gain, softmax_pool or mean_pool, no
    chunking variants. The plain `TrainConfig` (the toy) is unchanged: its fields, hash and
    numbers do not see these.
    """

    window: int = 1
    carry_gain: float = 1.0
    decoy_gain: float = 0.0

    def __post_init__(self):
        _footprint_fields(self, TrainConfig)
        _check_kind(self, self.heads, self.loss, self.learn_gain, self.operator)
        for flag in ("learn_projections", "rope_anchor", "stagger", "overlap"):
            if getattr(self, flag):
                raise ConfigError(flag, "does not apply to the footprint model")
        if self.offset_ensemble != 1 or self.phase_entropy:
            raise ConfigError("offset_ensemble", "mitigations do not apply to the footprint model")
        _check_shape(self.stride, self.chunks, self.window)

    model_kind = "footprint"


@dataclass(frozen=True)
class FootprintFlowConfig(FlowConfig):
    """A `FlowConfig` for the footprint model's reduced flow (`sims.toy.flow.solve_many`): the
    flow of `theory.footprint_loss` (d = inf) in the pooling logits, flat carry.

    window, carry_gain, decoy_gain as `FootprintTrainConfig` (static: one compile each).
    """

    window: int = 1
    carry_gain: float = 1.0
    decoy_gain: float = 0.0

    def __post_init__(self):
        _footprint_fields(self, FlowConfig)
        _check_kind(self, self.heads, self.loss, self.learn_gain)
        if self.dim is not None:
            raise ConfigError("dim", "the footprint flow is the d = inf loss: omit --dim")
        if self.weight_decay or self.phase_entropy:
            raise ConfigError("weight_decay", "penalties do not apply to the footprint flow")
        _check_shape(self.stride, self.chunks, self.window)

    model_kind = "footprint"


class FootprintBatch(eqx.Module):
    """Problems of the footprint task: the products q . x (B, N, s) of the plain keys, the
    query norms r = |q|^2 (B,) and the phases (B,)."""

    gram: Float[Array, "B N s"]
    norm2: Float[Array, " B"]
    phase: Int[Array, " B"]


class FootprintModel(eqx.Module):
    """One head's pooling logits and its fixed gain (an immutable pytree)."""

    pooling_logits: Float[Array, "1 s"]
    log_gain: Float[Array, " 1"]
    learn_pooling: bool = eqx.field(static=True, default=True)

    @property
    def gain(self) -> Float[Array, " 1"]:
        return jax.lax.stop_gradient(jnp.exp(self.log_gain))

    @property
    def uses_gram(self) -> bool:
        return True

    def pooling_weights(self) -> Float[Array, "1 s"]:
        logits = self.pooling_logits if self.learn_pooling else jax.lax.stop_gradient(self.pooling_logits)
        return jax.nn.softmax(logits, axis=-1)


def init_model(key: PRNGKeyArray, config: FootprintTrainConfig, gain, init_scale, dtype=jnp.float32):
    """A fresh footprint model; its pooling logits are the toy trainer's for the same key."""
    del key
    return FootprintModel(
        pooling_logits=jnp.zeros((1, config.stride), dtype),
        log_gain=jnp.full((1,), jnp.log(jnp.asarray(gain, dtype)), dtype),
        learn_pooling=config.operator == "softmax_pool",
    )


def init_model_for_seed(seed, config: FootprintTrainConfig, gain, init_scale, dtype=jnp.float32):
    """`init_model` with the pooling logits the toy's trainer draws for `seed` (so SGD and the
    flow of the same seed start at the same point)."""
    model = init_model(None, config, gain, init_scale, dtype)
    if config.operator == "mean_pool":
        return model
    logits = initial_pooling_logits(seed, 1, config.stride, init_scale, dtype)
    return eqx.tree_at(lambda m: m.pooling_logits, model, logits)


def sample_batch(key: PRNGKeyArray, config: FootprintTrainConfig, batch: int, *, phase=None, dtype=jnp.float32):
    """`batch` footprint problems (module docstring); `phase=None` draws phases uniformly."""
    N, s, d = config.chunks, config.stride, config.dim
    k_phase, k_keys, k_norm = split_key(key, 3)
    if phase is None:
        phases = random_integers(k_phase, (batch,), 0, s)
    else:
        phases = jnp.full((batch,), phase, dtype=jnp.int32)
    norm2 = chi_square(k_norm, d, (batch,), dtype) / d
    gram = jnp.sqrt(norm2 / d)[:, None, None] * standard_normal(k_keys, (batch, N, s), dtype)
    return FootprintBatch(gram=gram, norm2=norm2, phase=phases)


def batch_logits(model: FootprintModel, batch: FootprintBatch, config) -> Float[Array, "B N"]:
    """Entry logits beta q . K_e = beta sum_j alpha_j q . x + r sum_j alpha_j shift[phi, e, j]."""
    weights = model.pooling_weights()[0]
    shift, _ = shift_table(config.stride, config.chunks, config.window, config.carry_gain, config.decoy_gain)
    carried = jnp.asarray(shift, batch.gram.dtype)[batch.phase] @ weights
    return model.gain[0] * (batch.gram @ weights) + batch.norm2[:, None] * carried


def _holds(config, phases):
    _, holds = shift_table(config.stride, config.chunks, config.window, config.carry_gain, config.decoy_gain)
    return jnp.asarray(holds)[phases]


def problem_losses(model: FootprintModel, batch: FootprintBatch, config: FootprintTrainConfig):
    """Per problem: (N/(N-1) (1 - M)^2, retrieved) with M the mass on the fact's entries."""
    logits = batch_logits(model, batch, config)
    holds = _holds(config, batch.phase)
    mass = jnp.sum(jnp.where(holds, jax.nn.softmax(logits, axis=-1), 0.0), axis=-1)
    n = config.chunks
    loss = n / (n - 1.0) * (1.0 - mass) ** 2
    hit = jnp.take_along_axis(holds, jnp.argmax(logits, axis=-1)[:, None], axis=1)[:, 0]
    return loss, hit


def objective(model: FootprintModel, batch: FootprintBatch, config: FootprintTrainConfig):
    """The mean §9.4 loss over the batch (what SGD minimises)."""
    return jnp.mean(problem_losses(model, batch, config)[0])


def evaluate(config: FootprintTrainConfig, model: FootprintModel, dtype=jnp.float32):
    """Per-phase accuracy (s,) and mean loss on `eval_samples` problems per phase drawn from
    `eval_seed` (the same for every run)."""

    def one(phase):
        k = jax.random.fold_in(jax.random.key(config.eval_seed), phase)
        batch = sample_batch(k, config, config.eval_samples, phase=phase, dtype=dtype)
        loss, hit = problem_losses(model, batch, config)
        return jnp.mean(hit.astype(dtype)), jnp.mean(loss)

    acc, loss = jax.lax.map(one, jnp.arange(config.stride))
    return acc, jnp.mean(loss)


def is_footprint(config) -> bool:
    """Whether a train or flow config is the footprint model's."""
    return isinstance(config, (FootprintTrainConfig, FootprintFlowConfig))


def asdict(config) -> dict:
    """The config's fields with its kind, `model`: "footprint" (for reports)."""
    return {"model": config.model_kind, **dataclasses.asdict(config)}

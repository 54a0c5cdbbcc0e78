"""Frozen configs of plain scalars, validated at construction.

Two kinds of field:

* shape-determining or structural fields (`stride`, `chunks`, `dim`, `heads`,
  `operator`, `loss`, ...) are static under jit: changing one compiles a new program;
* hyperparameters that do not change shapes (`lr`, `gain`, `weight_decay`,
  `init_scale`, `seed`) travel as arrays, so one compiled program serves a sweep.

`TrainConfig` (a training run) and `FlowConfig` (a reduced gradient flow) are flat and
their field names are the command-line flag names of `weakspots train` and `weakspots
flow`, so a sweep is a list of configs and a stored row is `dataclasses.asdict(config)`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from weakspots import validation as check
from weakspots.errors import ConfigError as ConfigError  # re-exported: its home is weakspots.errors
from weakspots.idealized.operators.base import TOY
from weakspots.idealized.operators.registry import (
    check_fixed_weights,
    check_phase_entropy,
    lookup,
    operator_names,
)

# The toy's operators as registered when this module was imported (`idealized.operators.
# registry` is the list; validation reads it live, so later registrations count).
OPERATORS = operator_names(TOY)
# Operators with K[c] = sum_j w[j] x[c, j]: their logits need only the inner products q . x.
PHASE_WEIGHTED_OPERATORS = operator_names(TOY, phase_weighted=True)
LOSSES = ("mse", "ce")
OPTIMIZERS = ("sgd", "adam")

# Operators whose pooling weights are a distribution over phases (the phase-entropy regulariser).
DISTRIBUTION_POOLING_OPERATORS = operator_names(TOY, distribution=True)

# Fields of TrainConfig that travel as arrays (one compiled program for all their values).
HYPER_FIELDS = ("lr", "gain", "weight_decay", "init_scale", "seed")


@dataclass(frozen=True)
class ModelConfig:
    """The structure of one retrieval model (docs/theory.md §3); all fields static.

    stride `s` tokens per chunk, `chunks` N chunks of context, key dimension `dim` d,
    `heads` H. `operator` is the compression operator, `loss` the training loss.
    `rank` is the rank of each phase's correction under `low_rank`; `rope_dim`
    is the number of rotary channels (`deepseek_v4` and `rope_anchor`).

    Chunking variants and mitigations (all off by default):
    `rope_anchor` rotates the last `rope_dim` channels of each compressed key to its
    chunk's first position and the query to its own (needs the real keys);
    `phase_entropy` adds `-phase_entropy * mean_h entropy(alpha_h)` to the objective
    (static: a new value compiles a new program); `stagger` shifts head h's chunk
    boundaries by `h * s // H` tokens; `overlap` pools windows of `2s` tokens (previous
    chunk and own chunk) with stride `s`; `offset_ensemble` K averages the readout over
    K chunkings shifted by `k * s // K` at inference (training is unchanged).
    """

    stride: int = 8
    chunks: int = 64
    dim: int = 64
    heads: int = 1
    operator: str = "softmax_pool"
    loss: str = "mse"
    learn_gain: bool = False
    learn_projections: bool = False
    rank: int = 4
    rope_dim: int = 0
    rope_anchor: bool = False
    phase_entropy: float = 0.0
    stagger: bool = False
    overlap: bool = False
    offset_ensemble: int = 1

    def __post_init__(self):
        check.canonical_numbers(
            self,
            ("phase_entropy",),
            ("stride", "chunks", "dim", "heads", "rank", "rope_dim", "offset_ensemble"),
        )
        check.int_at_least("stride", self.stride, 1)
        check.int_at_least("chunks", self.chunks, 2)
        check.int_at_least("dim", self.dim, 1)
        check.int_at_least("heads", self.heads, 1)
        check.one_of("operator", self.operator, operator_names(TOY))
        check.one_of("loss", self.loss, LOSSES)
        check.int_at_least("rank", self.rank, 1)
        check.int_at_least("rope_dim", self.rope_dim, 0)
        if self.rope_dim % 2 or self.rope_dim > self.dim:
            raise ConfigError(
                "rope_dim", f"must be even and <= --dim ({self.dim}), got {self.rope_dim}"
            )
        for flag in ("learn_gain", "learn_projections", "rope_anchor", "stagger", "overlap"):
            check.boolean(flag, getattr(self, flag))
        self._validate_chunking()

    def _validate_chunking(self) -> None:
        if self.rope_anchor and self.rope_dim == 0:
            raise ConfigError("rope_anchor", "needs rotary channels: set --rope-dim > 0")
        check_phase_entropy(self.phase_entropy, self.operator, TOY)
        check.int_at_least("offset_ensemble", self.offset_ensemble, 1)
        if self.offset_ensemble > self.stride:
            raise ConfigError(
                "offset_ensemble",
                f"must be <= --stride ({self.stride}), got {self.offset_ensemble}",
            )
        if self.operator == "deepseek_v4":
            for flag in ("rope_anchor", "stagger", "overlap"):
                if getattr(self, flag):
                    raise ConfigError(flag, "does not apply to deepseek_v4 (it chunks itself)")
            if self.offset_ensemble != 1:
                raise ConfigError(
                    "offset_ensemble",
                    f"does not apply to deepseek_v4 (it chunks itself), got {self.offset_ensemble}",
                )

    @property
    def slots(self) -> int:
        """Tokens pooled into one cache entry: `2s` with `overlap`, else `s`."""
        return 2 * self.stride if self.overlap else self.stride

    @property
    def chunking_variant(self) -> bool:
        """True when the logits need the needle's position (staggered, overlapping or RoPE-anchored)."""
        return self.rope_anchor or self.stagger or self.overlap

    @property
    def uses_gram(self) -> bool:
        """True when the logits depend on the keys only through `q . x[c, j]` (the fast path)."""
        # rope_anchor keeps it: only the needle's self-product rotates (idealized.toy.model.logits_at).
        return lookup(self.operator).phase_weighted and not self.learn_projections


@dataclass(frozen=True)
class TrainConfig(ModelConfig):
    """Everything one training run needs, flat, named as the command-line flags.

    The model's fields (inherited from `ModelConfig`) come first, then training's.

    Defaults are the canonical config (stride 8, 64 chunks, d = 64, 1 head, fixed
    gain 16, `softmax_pool`, `mse`, SGD with learning rate 2, batch 256).
    `init_scale` is the standard deviation of the initial pooling logits.
    `eval_every` steps between evaluations on a fixed held-out set of
    `eval_samples` needles per phase (drawn from `eval_seed`, shared by all runs).

    Validation (a `ConfigError` naming the flag and the value): booleans must be `bool`;
    integers given for float fields become floats, so one run has one hash; the float
    hyperparameters must be representable in float32 (the trainer's dtype); and a flag set
    away from its default where it changes nothing is refused with the reason (`rank`
    without `low_rank`, `rope_dim` without `deepseek_v4` or `rope_anchor`, `stagger` with
    one head, `overlap`/`stagger`/`phase_entropy` at stride 1, `phase_entropy` with
    `mean_pool`, `weight_decay` with nothing learned to decay).
    """

    optimizer: str = "sgd"
    steps: int = 600
    batch: int = 256
    eval_every: int = 50
    eval_samples: int = 2048
    eval_seed: int = 12345
    lr: float = 2.0
    gain: float = 16.0
    weight_decay: float = 0.0
    init_scale: float = 0.01
    seed: int = 0

    def __post_init__(self):
        check.canonical_numbers(
            self,
            ("lr", "gain", "weight_decay", "init_scale"),
            ("steps", "batch", "eval_every", "eval_samples", "eval_seed", "seed"),
        )
        super().__post_init__()
        check.one_of("optimizer", self.optimizer, OPTIMIZERS)
        check.int_at_least("steps", self.steps, 1)
        check.int_at_least("batch", self.batch, 1)
        check.int_at_least("eval_every", self.eval_every, 1)
        check.int_at_least("eval_samples", self.eval_samples, 1)
        check.int_at_least("eval_seed", self.eval_seed, 0)
        check.positive_finite("lr", self.lr)
        check.positive_finite("gain", self.gain)
        check.nonnegative_finite("weight_decay", self.weight_decay)
        check.nonnegative_finite("init_scale", self.init_scale)
        for name in ("lr", "gain", "weight_decay", "init_scale"):
            check.float32(name, getattr(self, name))
        check.int_at_least("seed", self.seed, 0)
        if self.seed >= 2**32:  # the trainer's seeds are uint32
            raise ConfigError("seed", f"must be an integer < 2**32, got {self.seed}")
        self._validate_applicable()

    def _validate_applicable(self) -> None:
        """Refuse a flag set away from its default where it changes nothing (one run, one hash)."""
        if self.rank != ModelConfig.rank and self.operator != "low_rank":
            raise ConfigError(
                "rank",
                f"applies only to --operator low_rank, not {self.operator} (got {self.rank})",
            )
        if self.rope_dim and self.operator != "deepseek_v4" and not self.rope_anchor:
            raise ConfigError(
                "rope_dim",
                f"rotary channels apply only to --operator deepseek_v4 or with --rope-anchor; "
                f"got {self.rope_dim} with --operator {self.operator}",
            )
        if self.stride == 1:
            for flag in ("overlap", "stagger", "phase_entropy"):
                if getattr(self, flag):
                    raise ConfigError(
                        flag, "needs --stride >= 2: with one token per chunk there is no phase"
                    )
        if self.stagger and self.heads == 1:
            raise ConfigError(
                "stagger", "shifts head h's chunk boundaries by h*s//H tokens: needs --heads >= 2"
            )
        check_fixed_weights(self.phase_entropy, self.operator)
        if self.weight_decay and not (self.learn_gain or self.learn_projections):
            raise ConfigError(
                "weight_decay",
                f"penalises a learned gain and projections: needs --learn-gain or "
                f"--learn-projections (got {self.weight_decay!r})",
            )

    @property
    def model(self) -> ModelConfig:
        """The model's structure alone (a plain `ModelConfig`, free of training fields)."""
        names = {f.name for f in dataclasses.fields(ModelConfig)}
        return ModelConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})

    @property
    def static(self) -> TrainConfig:
        """This config with every hyperparameter at its default: the compilation key."""
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
        return dataclasses.replace(self, **{k: defaults[k] for k in HYPER_FIELDS})

    @property
    def eval_times(self) -> int:
        """Number of evaluations: after every `eval_every` steps and at the end."""
        return -(-self.steps // self.eval_every)

    def replace(self, **changes) -> TrainConfig:
        return dataclasses.replace(self, **changes)


# Fields of FlowConfig that one compiled solve serves at any value: they travel as arrays
# (`saves` is padded: runs with fewer saves repeat their last time).
FLOW_HYPER_FIELDS = (
    "chunks",
    "dim",
    "gain",
    "learn_gain",
    "weight_decay",
    "phase_entropy",
    "init_scale",
    "seed",
    "t1",
    "saves",
    "rtol",
    "atol",
    "event_level",
)
GAIN_PARAMETRISATIONS = ("log", "linear")


@dataclass(frozen=True)
class FlowConfig:
    """One reduced gradient flow (docs/theory.md §5), flat, named as the `weakspots flow` flags.

    The flow is `da/dt = -grad L(a, beta)` on the pooling logits `a` `(H, s)` (and the gain
    `beta` `(H,)` with `learn_gain`), integrated by `sims.toy.flow.solve_many`. `L` is the
    d = infinity loss `L_inf` (`theory.reduced_loss`) unless `dim` is set, then the
    finite-d expected loss `L_d` (`theory.finite_d_loss`: one head, mse).

    Defaults are the canonical config and training's (`TrainConfig`): stride 8, 64 chunks,
    1 head, fixed gain 16, mse, the trainer's `init_scale`, and `t1 = lr * steps`, the
    flow time a default training run covers. The flow starts from the trainer's own initial
    pooling logits for `seed` (`idealized.toy.model.initial_pooling_logits`), so a flow and an
    SGD run with the same seed and `init_scale` start at the same point.

    `gain_parametrisation`: the learned gain's coordinate, "log" (d log beta/dt = -beta
    dL/dbeta, beta stays positive) or "linear" (dbeta/dt = -dL/dbeta, SGD on beta).
    `weight_decay` adds `weight_decay/2 sum_h beta_h^2`; `phase_entropy` adds
    `-phase_entropy * mean_h entropy(alpha_h)` (as `TrainConfig.phase_entropy`).
    Saves at `saves` evenly spaced times in `[0, t1]`; the solver is Tsit5 with a PID
    controller at `rtol`, `atol`, stopping with an error after `max_steps` steps.
    `event_level`: the specialisation time is the first time the order parameter
    `theory.specialization_order` reaches it (`theory.specialization_time`).
    """

    stride: int = ModelConfig.stride
    chunks: int = ModelConfig.chunks
    dim: int | None = None
    heads: int = ModelConfig.heads
    gain: float = TrainConfig.gain
    loss: str = ModelConfig.loss
    learn_gain: bool = False
    gain_parametrisation: str = "log"
    weight_decay: float = TrainConfig.weight_decay
    phase_entropy: float = ModelConfig.phase_entropy
    init_scale: float = TrainConfig.init_scale
    seed: int = TrainConfig.seed
    t1: float = TrainConfig.lr * TrainConfig.steps
    saves: int = 101
    rtol: float = 1e-8
    atol: float = 1e-10
    max_steps: int = 1_000_000
    event_level: float = 0.25

    def __post_init__(self):
        check.int_at_least("stride", self.stride, 1)
        check.int_at_least("chunks", self.chunks, 2)
        if self.dim is not None:
            check.int_at_least("dim", self.dim, 1)
        check.int_at_least("heads", self.heads, 1)
        check.positive_finite("gain", self.gain)
        check.one_of("loss", self.loss, LOSSES)
        if not isinstance(self.learn_gain, bool):
            raise ConfigError("learn_gain", f"must be true or false, got {self.learn_gain!r}")
        check.one_of("gain_parametrisation", self.gain_parametrisation, GAIN_PARAMETRISATIONS)
        check.nonnegative_finite("weight_decay", self.weight_decay)
        check.nonnegative_finite("phase_entropy", self.phase_entropy)
        check.nonnegative_finite("init_scale", self.init_scale)
        check.int_at_least("seed", self.seed, 0)
        check.positive_finite("t1", self.t1)
        check.int_at_least("saves", self.saves, 2)
        check.positive_finite("rtol", self.rtol)
        check.positive_finite("atol", self.atol)
        check.int_at_least("max_steps", self.max_steps, 1)
        check.nonnegative_finite("event_level", self.event_level)
        if self.dim is not None and (self.heads != 1 or self.loss != "mse"):
            raise ConfigError(
                "dim",
                f"the finite-d loss L_d is for one head and mse: got --dim {self.dim} "
                f"with --heads {self.heads} --loss {self.loss} (omit --dim for d = infinity)",
            )

    @property
    def static(self) -> FlowConfig:
        """The compilation key: this config with every `FLOW_HYPER_FIELDS` field at its default.

        What remains is what one compiled solve is specialised to: the shapes (`stride`,
        `heads`), `loss`, `gain_parametrisation`, `max_steps`, and whether `dim` is set (a
        finite `dim` becomes the canonical `ModelConfig.dim`: its value travels as an array).
        """
        defaults = {f.name: f.default for f in dataclasses.fields(FlowConfig)}
        changes = {k: defaults[k] for k in FLOW_HYPER_FIELDS}
        changes["dim"] = None if self.dim is None else ModelConfig.dim
        return dataclasses.replace(self, **changes)

    def replace(self, **changes) -> FlowConfig:
        return dataclasses.replace(self, **changes)

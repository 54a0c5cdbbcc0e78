"""The frozen config of a pretraining run: a Qwen3-shaped backbone, its attention kind, the recipe.

`PretrainConfig` is flat; its field names are the flags of `weakspots lm pretrain`.
`PretrainConfig.static` resets the hyperparameters that travel as arrays
(`PRETRAIN_HYPER_FIELDS`) and is the compilation key: one compiled program trains every
seed of a design at once.

The compressed kind follows the paper (docs: `idealized.pretrain.attention`): windows of
`window` tokens every `stride` tokens, per-offset gates (`gate`: scalar, vector or
uniform averaging; `gate_bias`) and payload maps, separate or tied K/V (`tied_kv`),
Q/K norm (`qk_norm`), RoPE on `rope_dim` channels of each head (-1: all, 0: none),
RMSNorm after the payload map (`post_norm`), and exact recent tokens (`local`: a
`local_window`-token window, or `tail`: only the current incomplete window).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from weakspots import validation as check
from weakspots.errors import ConfigError

ATTENTION_KINDS = ("full", "compressed")
"""Registered at import by `idealized.pretrain.attention` (validation reads this tuple)."""
GATES = ("scalar", "vector", "uniform")
LOCAL_MODES = ("window", "tail")
SCHEDULES = ("cosine", "constant")
PRETRAIN_HYPER_FIELDS = ("lr", "weight_decay", "warmup", "clip", "seed", "steps")


def _finite_at_least(field: str, value, low: float, *, strict: bool = False) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not math.isfinite(value) or value < low or (strict and value == low):
        relation = ">" if strict else ">="
        raise ConfigError(field, f"must be a finite number {relation} {low:g}, got {value!r}")


@dataclass(frozen=True)
class PretrainConfig:
    """One pretraining run (or `seeds` runs at once: seeds `seed .. seed + seeds - 1`).

    Model: `vocab` (0: the tokenizer's), `d_model`, `layers`, `heads` query heads of
    `head_dim`, `kv_heads` (grouped queries), SwiGLU of `mlp_hidden`, RoPE base `rope_theta`.
    Attention: `attention` (a registered kind), and the compressed kind's switches.
    Corpus: at most `open_words` words per open class (0: all; a smaller vocabulary),
    open-class words drawn with Zipf exponent `zipf` (0: uniform).
    Training: `steps` AdamW steps of `batch` sequences of `seq_len` tokens, peak `lr` after
    `warmup` linear steps, then (`schedule`) cosine to `lr / 10` or constant, global-norm
    clipping at `clip`, `weight_decay` on matrices; the loss is logged every `log_every`
    steps (one compiled block), a checkpoint written every `checkpoint_every` steps (0: at
    the end only), the validation loss measured on `val_batches` held-out batches at each
    checkpoint, and emergence (copy accuracy and a small lookup,
    `sims.pretrain.emergence`) every `emergence_every` steps (0: never).
    """

    vocab: int = 0
    open_words: int = 0
    zipf: float = 0.0
    d_model: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 1
    head_dim: int = 32
    mlp_hidden: int = 768
    rope_theta: float = 1_000_000.0
    attention: str = "full"
    window: int = 8
    stride: int = 8
    gate: str = "scalar"
    gate_bias: bool = True
    tied_kv: bool = False
    qk_norm: bool = True
    rope_dim: int = -1
    post_norm: bool = False
    local: str = "window"
    local_window: int = 16
    seq_len: int = 512
    batch: int = 32
    steps: int = 2000
    lr: float = 3e-3
    warmup: int = 100
    schedule: str = "cosine"
    weight_decay: float = 0.1
    clip: float = 1.0
    seed: int = 0
    seeds: int = 1
    log_every: int = 50
    checkpoint_every: int = 0
    val_batches: int = 4
    emergence_every: int = 0

    def __post_init__(self):
        for name in ("d_model", "layers", "heads", "kv_heads", "head_dim", "mlp_hidden"):
            check.int_at_least(name, getattr(self, name), 1)
        check.int_at_least("vocab", self.vocab, 0)
        check.int_at_least("open_words", self.open_words, 0)
        _finite_at_least("zipf", self.zipf, 0.0)
        _finite_at_least("rope_theta", self.rope_theta, 1.0, strict=True)
        check.one_of("attention", self.attention, ATTENTION_KINDS)
        if self.heads % self.kv_heads:
            raise ConfigError("kv_heads", f"must divide --heads {self.heads}, got {self.kv_heads}")
        check.int_at_least("window", self.window, 1)
        check.int_at_least("stride", self.stride, 1)
        if self.stride > self.window:
            raise ConfigError(
                "stride", f"must be <= --window {self.window} (windows may overlap, not skip "
                f"tokens), got {self.stride}",
            )  # fmt: skip
        check.one_of("gate", self.gate, GATES)
        for name in ("gate_bias", "tied_kv", "qk_norm", "post_norm"):
            check.boolean(name, getattr(self, name))
        check.int_at_least("rope_dim", self.rope_dim, -1)
        if self.rope_dim > self.head_dim or (self.rope_dim > 0 and self.rope_dim % 2):
            raise ConfigError(
                "rope_dim",
                f"must be -1 (all), 0 (none) or an even number <= --head-dim {self.head_dim}, "
                f"got {self.rope_dim}",
            )
        if self.rope_dim < 0 and self.head_dim % 2:
            raise ConfigError(
                "head_dim", f"must be even for RoPE on every channel (or give --rope-dim), "
                f"got {self.head_dim}",
            )  # fmt: skip
        check.one_of("local", self.local, LOCAL_MODES)
        check.int_at_least("local_window", self.local_window, 1)
        check.int_at_least("seq_len", self.seq_len, 2)
        if self.attention == "compressed" and self.window > self.seq_len:
            raise ConfigError("window", f"must be <= --seq-len {self.seq_len}, got {self.window}")
        check.int_at_least("batch", self.batch, 1)
        check.int_at_least("steps", self.steps, 1)
        _finite_at_least("lr", self.lr, 0.0, strict=True)
        check.int_at_least("warmup", self.warmup, 0)
        check.one_of("schedule", self.schedule, SCHEDULES)
        _finite_at_least("weight_decay", self.weight_decay, 0.0)
        _finite_at_least("clip", self.clip, 0.0, strict=True)
        check.int_at_least("seed", self.seed, 0)
        check.int_at_least("seeds", self.seeds, 1)
        check.int_at_least("log_every", self.log_every, 1)
        check.int_at_least("checkpoint_every", self.checkpoint_every, 0)
        if self.checkpoint_every % self.log_every:
            raise ConfigError(
                "checkpoint_every",
                f"must be a multiple of --log-every {self.log_every}, got {self.checkpoint_every}",
            )
        check.int_at_least("val_batches", self.val_batches, 0)
        check.int_at_least("emergence_every", self.emergence_every, 0)
        if self.emergence_every % self.log_every:
            raise ConfigError(
                "emergence_every",
                f"must be a multiple of --log-every {self.log_every}, got {self.emergence_every}",
            )

    @property
    def rotary_dim(self) -> int:
        """Channels of each head that RoPE turns (`rope_dim`, -1 read as `head_dim`)."""
        return self.head_dim if self.rope_dim < 0 else self.rope_dim

    @property
    def entries(self) -> int:
        """Complete windows in a sequence of `seq_len` tokens: `(T - W) // S + 1`."""
        return (self.seq_len - self.window) // self.stride + 1

    @property
    def static(self) -> PretrainConfig:
        """The config with its hyperparameters reset: the compilation key."""
        defaults = PretrainConfig()
        return self.replace(**{k: getattr(defaults, k) for k in PRETRAIN_HYPER_FIELDS})

    def replace(self, **changes) -> PretrainConfig:
        return dataclasses.replace(self, **changes)

    def asdict(self) -> dict:
        return dataclasses.asdict(self)

    def for_seed(self, seed: int) -> PretrainConfig:
        """The config of one of this run's seeds (`seeds = 1`)."""
        return self.replace(seed=seed, seeds=1)

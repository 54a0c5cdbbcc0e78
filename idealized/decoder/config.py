"""Frozen configs of the decoder family and its associative-recall task (plain scalars, validated).

A decoder run is composed of its parts, each a frozen dataclass that validates its own fields:
the task (`RecallTask`), the decoder (`DecoderConfig`: width, heads, layer kinds and the kinds'
own options, with DeepSeek-V4's switches as one group, `V4Switches`) and the training and
evaluation options (`Training`). `LMConfig` is the flat layer over them that faces the flags,
as `idealized.toy.config.TrainConfig` does for the toy: its field names are the flags of
`weakspots lm train`, its defaults are the parts' own, and its dict (`asdict`) is what the
store, the checkpoints and the recorded runs hash and keep. `LMConfig.task`, `.decoder`,
`.v4` and `.training` are its parts; `LMConfig.static` resets the hyperparameters that travel
as arrays (`LM_HYPER_FIELDS`), and is the compilation key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from weakspots import validation as check
from weakspots.errors import ConfigError
from weakspots.idealized.decoder.layers.registry import layer_kind_names, lookup
from weakspots.idealized.operators.base import DECODER
from weakspots.idealized.operators.registry import (
    check_fixed_weights,
    check_phase_entropy,
    operator_names,
)

LM_OPERATORS = operator_names(DECODER)
"""Compression operators of a compressed layer as registered at import (`idealized.operators`;
validation reads the registry live); `none` keeps every token (the dense control)."""
DISTRIBUTION_OPERATORS = operator_names(DECODER, distribution=True)
"""Operators whose pooling weights form a distribution over phases (`phase_entropy` needs
them learned too: not the registry's `fixed_weights`, so not mean_pool)."""
LAYER_KINDS = layer_kind_names()
"""Layer kinds as registered at import (`idealized.decoder.layers`; validation reads the registry live)."""
V4_KINDS = layer_kind_names(v4=True)
"""DeepSeek-V4's layer kinds (`idealized.decoder.v4_attention`): sliding-only, compressed sparse, heavily
compressed."""
LM_HYPER_FIELDS = ("lr", "weight_decay", "warmup", "clip", "seed")
V4_FIELDS = (
    "hca_stride", "indexer_topk", "index_heads", "index_dim", "shared_kv", "sink", "qk_norm",
    "rope_fraction", "compress_rope_theta", "q_rank", "o_groups", "o_rank", "indexer_kl",
    "separate_values", "indexer_pairs",
)  # fmt: skip
"""The fields of `V4Switches` (the indexer's also serve compressed layers) and the weight of
the indexer's training loss (`Training.indexer_kl`), in the order `weakspots lm train --help`
lists them."""
LM_MITIGATION_FIELDS = ("stagger", "phase_entropy")
LM_OPTIONAL_FIELDS = LM_MITIGATION_FIELDS + V4_FIELDS
"""Fields left out of `LMConfig.asdict` at their defaults (off): the records and cached
decoders of configs without them keep their content and hashes."""


def v4_layout(layers: int, sliding: int = 1) -> str:
    """DeepSeek-V4's layer schedule: `sliding` sliding-only layers (`swa`), then CSA and HCA
    interleaved, CSA first (`v4_layout(4)` is `swa,csa,hca,csa`)."""
    sliding = min(sliding, layers)
    rest = ["csa" if i % 2 == 0 else "hca" for i in range(layers - sliding)]
    return ",".join(["swa"] * sliding + rest)


V4_DESIGN = {
    "layers": 4,
    "layout": v4_layout(4),
    "heads": 4,
    "stride": 4,
    "hca_stride": 16,
    "window": 16,
    "local_window": 16,
    "rope_fraction": 0.25,
    "compress_rope_theta": 160000.0,
    "indexer_topk": 8,
    "index_heads": 4,
    "index_dim": 16,
    "shared_kv": True,
    "sink": True,
    "qk_norm": True,
    "q_rank": 32,
    "o_groups": 2,
    "o_rank": 16,
}
"""`--design v4`: DeepSeek-V4's choices at small scale (`docs/v4_attention.md`); flags given
beside it override them."""
DESIGNS = {"v4": V4_DESIGN}
"""The named designs (`--design`, a `kind = "lm"` sweep spec's `design`): the field values
each fills."""


def with_design(design: str, values: Mapping[str, Any], given: Collection[str]) -> dict[str, Any]:
    """`values` with the choices of `design` (`DESIGNS`) for every field not in `given`.

    `design = ""` returns `values` unchanged. `layers` given without `layout` lays out
    `v4_layout(layers)`. The one place the `--design` preset is applied: `weakspots lm train`
    and `kind = "lm"` sweeps both call it. Raises ConfigError("design", ...) for an unknown
    design.
    """
    out = dict(values)
    if design == "":
        return out
    if design not in DESIGNS:
        raise ConfigError("design", f"the one design is {', '.join(DESIGNS)}, got {design!r}")
    given = set(given)
    out.update({k: v for k, v in DESIGNS[design].items() if k not in given})
    if "layers" in given and "layout" not in given:
        out["layout"] = v4_layout(out["layers"])
    return out


@dataclass(frozen=True)
class V4Switches:
    """DeepSeek-V4's switches, one group (all fields static; `DecoderConfig.v4`).

    They shape DeepSeek-V4's kinds (`V4_KINDS`, `idealized.decoder.v4_attention`): `hca`
    layers read disjoint windows of `hca_stride` tokens; `csa` layers keep the entries of
    the indexer's top `indexer_topk` when > 0 (`index_heads` x `index_dim`; the indexer's
    three also serve the project's compressed layers, `DecoderConfig`). `shared_kv` (one K = V
    head for all query heads, else one per head, each with its own compressor), `sink` (a
    learned logit per head), `qk_norm` (RMSNorm on queries and KV), `q_rank` (low-rank query
    path, 0: off), `o_groups` x `o_rank` (grouped low-rank output, 0: off),
    `compress_rope_theta` (RoPE base of csa/hca layers). `rope_fraction > 0` sets the RoPE
    channels of every layer to `int(rope_fraction * head_dim)` in place of `rope_dim`.
    `separate_values` is not V4's: a value projection (and, in csa/hca layers, a value
    compressor) of its own beside the keys, K != V, values without RoPE (a diagnostic of
    V4's K = V). `indexer_pairs` is not V4's either: every entry the indexer keeps is read
    together with the entry before it (`v4_attention.paired_entries`; with overlapping
    windows, the other entry that pools its earlier window), an intervention on what the
    main attention gets to learn from. The checks that need the layers, the width or the
    heads are `DecoderConfig`'s.
    """

    hca_stride: int = 16
    indexer_topk: int = 0
    index_heads: int = 4
    index_dim: int = 16
    shared_kv: bool = False
    sink: bool = False
    qk_norm: bool = False
    rope_fraction: float = 0.0
    compress_rope_theta: float = 10000.0
    q_rank: int = 0
    o_groups: int = 0
    o_rank: int = 0
    separate_values: bool = False
    indexer_pairs: bool = False

    def __post_init__(self):
        check.nonnegative_finite("rope_fraction", self.rope_fraction)
        check.int_at_least("hca_stride", self.hca_stride, 1)
        check.int_at_least("indexer_topk", self.indexer_topk, 0)
        check.int_at_least("index_heads", self.index_heads, 1)
        check.int_at_least("index_dim", self.index_dim, 2)
        for name in ("shared_kv", "sink", "qk_norm", "separate_values", "indexer_pairs"):
            check.boolean(name, getattr(self, name))
        check.positive_finite("compress_rope_theta", self.compress_rope_theta)
        check.int_at_least("q_rank", self.q_rank, 0)
        check.int_at_least("o_groups", self.o_groups, 0)
        check.int_at_least("o_rank", self.o_rank, 0)

    @property
    def switched_on(self) -> tuple[str, ...]:
        """The switches of V4's own layers that are on (the indexer's, which also serve
        compressed layers, and `hca_stride`, `rope_fraction`, `compress_rope_theta` aside)."""
        names = ("shared_kv", "sink", "qk_norm", "q_rank", "o_groups", "separate_values")
        return tuple(name for name in names if getattr(self, name))


@dataclass(frozen=True)
class DecoderConfig:
    """The structure of one decoder (all fields static).

    `layer_kinds`: one of `LAYER_KINDS` per layer. `dense` attends to every earlier token;
    `sliding` to the last `window` tokens; `compressed` to the entries of complete windows
    of `stride` tokens packed by `operator` (`overlap`: windows of `2 stride` tokens, as
    DeepSeek-V4's CSA; `deepseek_v4` only), plus the last `local_window` tokens
    uncompressed (0: none). `rope_dim` trailing channels of each head carry RoPE
    (compressed entries at their window's first position); `mlp` is the MLP's hidden
    width in multiples of `d_model` (0: no MLP); `rank` the rank of `low_rank`.
    `stagger` shifts head h's window boundaries by `h * stride // heads` tokens in every
    compressed layer (as the toy's `ModelConfig.stagger`; `idealized.decoder.attention`).
    `v4.indexer_topk > 0` gives every compressed layer (not the dense control, nor with
    `stagger`) DeepSeek-V4's Lightning Indexer (`v4.index_heads` x `v4.index_dim`): each
    query reads only the visible entries among its top `indexer_topk`, as in csa layers.

    DeepSeek-V4's kinds (`V4_KINDS`): `swa` sees the last `window` tokens; `csa` the entries
    of overlapping windows of `2 stride` tokens every `stride`, `hca` those of disjoint
    windows of `v4.hca_stride` tokens, both plus the last `local_window` tokens; their
    switches are the group `v4` (`V4Switches`). `operator = none` makes csa and hca layers
    dense V4 layers (the control).
    """

    vocab: int
    layer_kinds: tuple[str, ...] = ("sliding", "compressed")
    d_model: int = 64
    heads: int = 2
    mlp: int = 0
    stride: int = 4
    operator: str = "mean_pool"
    overlap: bool = False
    window: int = 16
    local_window: int = 0
    rope_dim: int = 16
    rank: int = 4
    stagger: bool = False
    v4: V4Switches = V4Switches()

    def __post_init__(self):
        check.int_at_least("vocab", self.vocab, 2)
        for kind in self.layer_kinds:
            lookup(kind)
        check.int_at_least("layers", len(self.layer_kinds), 1)
        check.int_at_least("d_model", self.d_model, 2)
        check.int_at_least("heads", self.heads, 1)
        if self.d_model % self.heads:
            raise ConfigError("heads", f"must divide --d-model ({self.d_model}), got {self.heads}")
        check.int_at_least("mlp", self.mlp, 0)
        check.int_at_least("stride", self.stride, 1)
        check.one_of("operator", self.operator, operator_names(DECODER))
        check.boolean("overlap", self.overlap)
        if self.overlap and self.operator != "deepseek_v4":
            raise ConfigError("overlap", f"applies to deepseek_v4 only, not {self.operator}")
        check.int_at_least("window", self.window, 1)
        check.int_at_least("local_window", self.local_window, 0)
        check.int_at_least("rope_dim", self.rope_dim, 0)
        if not self.v4.rope_fraction and (self.rope_dim % 2 or self.rope_dim > self.head_dim):
            raise ConfigError(
                "rope_dim",
                f"must be even and <= the head dimension ({self.head_dim}), got {self.rope_dim}",
            )
        self._check_v4()
        check.int_at_least("rank", self.rank, 1)
        check.boolean("stagger", self.stagger)
        if self.stagger:
            if self.heads < 2:
                raise ConfigError(
                    "stagger",
                    "shifts head h's window boundaries by h*s//H tokens: needs --heads >= 2",
                )
            if self.stride < 2:
                raise ConfigError(
                    "stagger", "needs --stride >= 2: with one token per window there is no phase"
                )
            if self.operator in ("none", "deepseek_v4"):
                raise ConfigError(
                    "stagger",
                    f"applies to the per-head operators, not {self.operator} "
                    + ("(no windows)" if self.operator == "none" else "(one entry for all heads)"),
                )

    def _check_v4(self) -> None:
        """The checks of the `v4` group that need the layers, the width or the heads."""
        v4 = self.v4
        if v4.rope_fraction > 1 or self.rotary_dim % 2:
            raise ConfigError(
                "rope_fraction",
                f"must be in [0, 1] with int(fraction x head dim {self.head_dim}) even, "
                f"got {v4.rope_fraction}",
            )
        kinds = [lookup(kind) for kind in self.layer_kinds]
        if v4.switched_on and not any(kind.v4 for kind in kinds):
            raise ConfigError(
                v4.switched_on[0],
                "applies to DeepSeek-V4's layers: put swa, csa or hca in --layout",
            )
        if v4.indexer_topk and not any(kind.accepts_indexer(self) for kind in kinds):
            raise ConfigError(
                "indexer_topk",
                "the indexer serves csa layers and compressed layers (not --operator none): "
                "put csa or compressed in --layout",
            )
        if v4.indexer_pairs and not v4.indexer_topk:
            raise ConfigError(
                "indexer_pairs", "pairs the entries the indexer keeps: needs --indexer-topk >= 1"
            )
        if v4.indexer_topk and self.stagger and any(k.pooled_by_operator for k in kinds):
            raise ConfigError(
                "indexer_topk",
                "does not combine with --stagger: the indexer scores unstaggered windows",
            )
        for kind in dict.fromkeys(kinds):  # each kind's own options (csa: index_dim, swa: window)
            kind.check(self)
        if v4.o_groups and (self.heads % v4.o_groups or v4.o_rank < 1):
            raise ConfigError(
                "o_groups",
                f"must divide --heads ({self.heads}) and needs --o-rank >= 1, got {v4.o_groups} "
                f"groups of rank {v4.o_rank}",
            )
        if v4.o_rank and not v4.o_groups:
            raise ConfigError("o_rank", "is the rank of each output group: needs --o-groups >= 1")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def rotary_dim(self) -> int:
        """RoPE channels per head: `int(v4.rope_fraction * head_dim)`, or `rope_dim` when 0."""
        fraction = self.v4.rope_fraction
        return int(fraction * self.head_dim) if fraction else self.rope_dim

    @property
    def layers(self) -> int:
        return len(self.layer_kinds)


@dataclass(frozen=True)
class RecallTask:
    """Multi-query associative recall (all fields static).

    A sequence of `seq_len` tokens holds a context of `context_len` tokens: filler tokens
    (from `filler_vocab`) with `pairs` facts placed without overlap, each a key of
    `key_len` tokens (all key tokens of a sequence distinct, from `key_vocab`) followed by
    its value of `value_len` tokens (from `value_vocab`). Then every fact is queried once,
    in random order: its key, then its value, which the model must predict.
    """

    seq_len: int = 128
    pairs: int = 4
    key_len: int = 1
    value_len: int = 1
    key_vocab: int = 64
    value_vocab: int = 64
    filler_vocab: int = 16

    def __post_init__(self):
        check.int_at_least("pairs", self.pairs, 1)
        check.int_at_least("key_len", self.key_len, 1)
        check.int_at_least("value_len", self.value_len, 1)
        check.int_at_least("value_vocab", self.value_vocab, 2)
        check.int_at_least("filler_vocab", self.filler_vocab, 1)
        check.int_at_least("key_vocab", self.key_vocab, 1)
        if self.key_vocab < self.pairs * self.key_len:
            raise ConfigError(
                "key_vocab",
                f"must be >= --pairs x --key-len ({self.pairs * self.key_len}) for distinct keys, "
                f"got {self.key_vocab}",
            )
        check.int_at_least("seq_len", self.seq_len, 2)
        if self.context_len < self.pairs * self.fact_len:
            raise ConfigError(
                "seq_len",
                f"too short for {self.pairs} facts of {self.fact_len} tokens and their queries, "
                f"got {self.seq_len}",
            )

    @property
    def fact_len(self) -> int:
        return self.key_len + self.value_len

    @property
    def context_len(self) -> int:
        """Tokens before the queries: `seq_len - pairs * fact_len`."""
        return self.seq_len - self.pairs * self.fact_len

    @property
    def vocab(self) -> int:
        """Token ids: filler `[0, F)`, keys `[F, F + K)`, values `[F + K, F + K + V)`."""
        return self.filler_vocab + self.key_vocab + self.value_vocab


@dataclass(frozen=True)
class Training:
    """How a decoder is trained and evaluated (`LMConfig.training`).

    AdamW (`lr`, `weight_decay` on matrices), linear warmup over `warmup` steps then cosine
    decay to `lr / 10`, gradients clipped to global norm `clip`; `batch` sequences per step,
    `steps` steps from `seed`. Evaluation: every `eval_every` steps the loss and accuracy on
    `eval_batch` held-out sequences; at the end the per-phase protocol, `eval_samples`
    sequences for every position the queried value can take, drawn from `eval_seed`
    (`sims.decoder.evaluate`). The loss's two extra terms: `phase_entropy` adds
    `-phase_entropy * mean entropy(pooling weights)` over the compressed layers and heads (as
    the toy's `phase_entropy`); `indexer_kl` weighs the indexer's KL (`LMConfig`). The checks
    that need the decoder (`phase_entropy`'s operator and layers) are `LMConfig`'s.
    """

    phase_entropy: float = 0.0
    indexer_kl: float = 1.0
    steps: int = 2000
    batch: int = 32
    eval_every: int = 100
    eval_batch: int = 256
    eval_samples: int = 16
    eval_seed: int = 12345
    lr: float = 3e-3
    weight_decay: float = 0.0
    warmup: int = 100
    clip: float = 1.0
    seed: int = 0

    def __post_init__(self):
        check.int_at_least("steps", self.steps, 1)
        check.int_at_least("batch", self.batch, 1)
        check.int_at_least("eval_every", self.eval_every, 1)
        check.int_at_least("eval_batch", self.eval_batch, 1)
        check.int_at_least("eval_samples", self.eval_samples, 1)
        check.int_at_least("eval_seed", self.eval_seed, 0)
        check.positive_finite("lr", self.lr)
        check.nonnegative_finite("weight_decay", self.weight_decay)
        check.int_at_least("warmup", self.warmup, 0)
        check.positive_finite("clip", self.clip)
        check.int_at_least("seed", self.seed, 0)
        check.nonnegative_finite("indexer_kl", self.indexer_kl)


def _part(part: type, config: LMConfig, **given):
    """The `part` (a dataclass) of `config`: each of its fields from the flat field of that
    name, except those `given`."""
    names = [f.name for f in dataclasses.fields(part) if f.name not in given]
    return part(**{name: getattr(config, name) for name in names}, **given)


@dataclass(frozen=True)
class LMConfig:
    """Everything one decoder training run needs, flat, named as the flags of `weakspots lm train`.

    The flat layer over the parts (`task`: `RecallTask`; `decoder`: `DecoderConfig`, with
    `v4`: `V4Switches`; `training`: `Training`): every field is one part's field of the same
    name and default, except `layers` and `layout`, which give the decoder's `layer_kinds`.
    Each part validates its own fields; `__post_init__` builds them and adds the checks that
    span parts. What reads one part takes the part (the model a `DecoderConfig`, the task a
    `RecallTask`).

    `layout`: comma-separated layer kinds (`LAYER_KINDS`), one per layer; empty means
    DeepSeek-V4's order, the first layer sliding and the others compressed. `--operator none`
    makes every compressed layer dense: the control, whose phases are still counted modulo
    `stride`. Mitigations (off by default): `stagger` (see `DecoderConfig`); `overlap`
    (windows of `2 stride` tokens, `deepseek_v4` only); `phase_entropy` (`Training`;
    operators whose pooling weights are a distribution over phases and learned:
    `DISTRIBUTION_OPERATORS` but mean_pool).

    DeepSeek-V4's layers (`swa`, `csa`, `hca` in `layout`; `V4Switches`; `V4_DESIGN`):
    the indexer's top-k (csa layers, and compressed layers with `indexer_topk > 0`) passes
    no gradient, so with `indexer_topk > 0` the loss adds `indexer_kl` times the mean over
    the layers with an indexer of the KL from the main attention's
    distribution over the visible compressed entries (stop-gradient) to the indexer's
    (`idealized.decoder.v4_attention.indexer_statistics`); the indexer's input is detached, so
    this term trains the indexer alone.
    """

    # The field order is the order of the recorded configs' JSON (`asdict`): keep it.
    seq_len: int = RecallTask.seq_len
    pairs: int = RecallTask.pairs
    key_len: int = RecallTask.key_len
    value_len: int = RecallTask.value_len
    key_vocab: int = RecallTask.key_vocab
    value_vocab: int = RecallTask.value_vocab
    filler_vocab: int = RecallTask.filler_vocab
    layers: int = 2
    layout: str = ""
    d_model: int = DecoderConfig.d_model
    heads: int = DecoderConfig.heads
    mlp: int = DecoderConfig.mlp
    stride: int = DecoderConfig.stride
    operator: str = DecoderConfig.operator
    overlap: bool = DecoderConfig.overlap
    window: int = DecoderConfig.window
    local_window: int = DecoderConfig.local_window
    rope_dim: int = DecoderConfig.rope_dim
    rank: int = DecoderConfig.rank
    stagger: bool = DecoderConfig.stagger
    phase_entropy: float = Training.phase_entropy
    hca_stride: int = V4Switches.hca_stride
    indexer_topk: int = V4Switches.indexer_topk
    index_heads: int = V4Switches.index_heads
    index_dim: int = V4Switches.index_dim
    shared_kv: bool = V4Switches.shared_kv
    sink: bool = V4Switches.sink
    qk_norm: bool = V4Switches.qk_norm
    rope_fraction: float = V4Switches.rope_fraction
    compress_rope_theta: float = V4Switches.compress_rope_theta
    q_rank: int = V4Switches.q_rank
    o_groups: int = V4Switches.o_groups
    o_rank: int = V4Switches.o_rank
    separate_values: bool = V4Switches.separate_values
    indexer_pairs: bool = V4Switches.indexer_pairs
    indexer_kl: float = Training.indexer_kl
    steps: int = Training.steps
    batch: int = Training.batch
    eval_every: int = Training.eval_every
    eval_batch: int = Training.eval_batch
    eval_samples: int = Training.eval_samples
    eval_seed: int = Training.eval_seed
    lr: float = Training.lr
    weight_decay: float = Training.weight_decay
    warmup: int = Training.warmup
    clip: float = Training.clip
    seed: int = Training.seed

    def __post_init__(self):
        check.int_at_least("layers", self.layers, 1)
        # an unknown kind is named before the count, which it would only confuse
        kinds = [lookup(kind) for kind in self.layer_kinds]
        if self.layout and len(self.layer_kinds) != self.layers:
            raise ConfigError(
                "layout", f"names {len(self.layer_kinds)} layers but --layers is {self.layers}"
            )
        task, decoder, training = self.task, self.decoder, self.training  # each validates its own
        if task.context_len % decoder.stride:
            raise ConfigError(
                "seq_len",
                f"the context (--seq-len minus the queries: {task.context_len} tokens) must be "
                f"a multiple of --stride ({decoder.stride})",
            )
        entropy = training.phase_entropy
        check_phase_entropy(entropy, decoder.operator, DECODER)
        check_fixed_weights(entropy, decoder.operator)
        if entropy > 0 and any(kind.v4 for kind in kinds):
            raise ConfigError(
                "phase_entropy", "regularises --layout compressed layers, not swa/csa/hca"
            )
        if entropy > 0 and not self.compressed:
            raise ConfigError("phase_entropy", "needs a compressed layer (--layout, --layers)")
        if entropy > 0 and decoder.stride < 2:
            raise ConfigError(
                "phase_entropy", "needs --stride >= 2: with one token per window there is no phase"
            )

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        if self.layout:
            return tuple(kind.strip() for kind in self.layout.split(","))
        return (
            ("sliding",) + ("compressed",) * (self.layers - 1)
            if self.layers > 1
            else ("compressed",)
        )

    @property
    def task(self) -> RecallTask:
        return _part(RecallTask, self)

    @property
    def v4(self) -> V4Switches:
        return _part(V4Switches, self)

    @property
    def decoder(self) -> DecoderConfig:
        return _part(
            DecoderConfig, self, vocab=self.task.vocab, layer_kinds=self.layer_kinds, v4=self.v4
        )

    @property
    def training(self) -> Training:
        return _part(Training, self)

    @property
    def static(self) -> LMConfig:
        """This config with every hyperparameter at its default: the compilation key."""
        return dataclasses.replace(self, **{k: _DEFAULTS[k] for k in LM_HYPER_FIELDS})

    @property
    def eval_times(self) -> int:
        """Number of evaluation blocks: `eval_every` steps each, the last one possibly shorter."""
        return -(-self.steps // self.eval_every)

    @property
    def compressed(self) -> bool:
        """True when some layer reads compressed entries (not the dense control)."""
        return any(lookup(kind).reads_compressed(self) for kind in self.layer_kinds)

    @property
    def indexed(self) -> bool:
        """True when some layer with an indexer (csa, compressed) keeps its entries by its top-k."""
        selecting = any(lookup(kind).indexer for kind in self.layer_kinds)
        return self.compressed and self.indexer_topk > 0 and selecting

    def replace(self, **changes) -> LMConfig:
        return dataclasses.replace(self, **changes)

    def asdict(self) -> dict:
        """The fields as a dict, `LM_OPTIONAL_FIELDS` left out where at their defaults: what the
        store, the checkpoints and the recorded runs hash and keep."""
        out = dataclasses.asdict(self)
        for name in LM_OPTIONAL_FIELDS:
            if out[name] == _DEFAULTS[name]:
                del out[name]
        return out


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(LMConfig)}

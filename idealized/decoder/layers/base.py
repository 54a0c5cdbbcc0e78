"""The abstract decoder layer kind: what every layer-kind file defines.

A layer kind is a value of `--layout` (`LMConfig.layout`, `DecoderConfig.layer_kinds`). Its
class states the facts the rest of the code asks about instead of comparing names: what
the layer reads (`reads`: every earlier token, a local window of exact tokens, compressed
entries, or both), the ratio and overlap of its compressed windows, the attention slots it
scores (the FLOP count), which switches and edits apply to it (`v4`, `pooled_by_operator`,
`indexer`, `has_local`), and how its attention module is built from a `DecoderConfig`
(`attention`). The classes are never instantiated: every fact is a class attribute or a
classmethod of the config (a `DecoderConfig` or an `LMConfig`: both carry the fields read,
DeepSeek-V4's switches as the group `config.v4`).

Final classes subclass `AbstractLayerKind`, one per file, and are listed in `registry.py`.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

from flax import nnx

from weakspots.idealized.decoder.attention import Attention
from weakspots.idealized.decoder.v4_attention import V4Attention

if TYPE_CHECKING:
    from weakspots.idealized.decoder.config import DecoderConfig

ALL, LOCAL, COMPRESSED, BOTH = "all", "local", "compressed", "both"
"""What a layer reads (`AbstractLayerKind.reads`): every earlier token; the last tokens of a
local window, exact; compressed entries only; compressed entries and a local window."""

DENSE_WINDOW = 1 << 30
"""The local window of a V4 layer that sees every earlier token (`--operator none`)."""


def banded_slots(window: int, length: int) -> int:
    """Query rows x key slots of a banded local branch over `length` tokens: for `W' =
    min(window, length)`, the `2 W'` keys of each block of `W'` queries, over `length`
    rounded up to whole blocks (`idealized.decoder.attention.local_scores`)."""
    size = min(window, length)
    return -(-length // size) * size * 2 * size


class AbstractLayerKind(abc.ABC):
    """One kind of decoder layer: its facts, and its attention module built from a config."""

    name: ClassVar[str]
    """The kind's name: its value in `--layout`."""
    sliding: ClassVar[bool] = False
    """Reads only the last `window` tokens, exact."""
    compresses: ClassVar[bool] = False
    """Reads compressed entries (unless `operator = none`, which makes the layer dense: the control)."""
    pooled_by_operator: ClassVar[bool] = False
    """Its entries are pooled by `--operator` (`idealized.decoder.attention.Compressor`: the
    position-bias and branch edits act on it); otherwise by DeepSeek-V4's own compressor."""
    indexer: ClassVar[bool] = False
    """Keeps its entries by the Lightning Indexer's top-k when `indexer_topk > 0`."""
    v4: ClassVar[bool] = False
    """A DeepSeek-V4 layer (`V4Attention`): V4's switches (`V4Switches`, the sink) apply."""

    @classmethod
    def reads_compressed(cls, config) -> bool:
        """The layer reads compressed entries in this design (not the dense control)."""
        return cls.compresses and config.operator != "none"

    @classmethod
    def reads(cls, config) -> str:
        """What the layer reads: `ALL`, `LOCAL`, `COMPRESSED` or `BOTH`."""
        if cls.sliding:
            return LOCAL
        if not cls.reads_compressed(config):
            return ALL
        return BOTH if config.local_window > 0 else COMPRESSED

    @classmethod
    def has_local(cls, config) -> bool:
        """The layer has a local branch of exact tokens (where `CutLocalEdges` applies)."""
        return cls.reads(config) in (LOCAL, BOTH)

    @classmethod
    def local_reach(cls, config) -> int:
        """Tokens back its uncompressed local branch reaches: `window` for a sliding kind,
        `local_window` for a compressing one (also in its dense control), else 0."""
        if cls.sliding:
            return config.window
        return config.local_window if cls.compresses else 0

    @classmethod
    def ratio(cls, config) -> int:
        """Tokens per compressed entry (the stride of its windows)."""
        return config.stride

    @classmethod
    def overlap(cls, config) -> bool:
        """Its windows are `2 ratio` tokens long, one every `ratio` (as CSA's)."""
        return False

    @classmethod
    def indexed(cls, config) -> bool:
        """Its entries are kept by the indexer's top-k in this design."""
        return cls.indexer and cls.reads_compressed(config) and config.v4.indexer_topk > 0

    @classmethod
    def accepts_indexer(cls, config) -> bool:
        """`--indexer-topk` means something for the layer (V4's kinds keep the flag in their
        dense control, as `--design v4 --operator none` does)."""
        return cls.indexer and (cls.v4 or cls.reads_compressed(config))

    @classmethod
    def scored_slots(cls, config, length: int) -> int:
        """Query rows x key slots its attention scores over `length` tokens (the FLOP count):
        all `length` tokens per query (`ALL`), the `length // ratio` entries, and the banded
        local branch (`banded_slots`)."""
        reads = cls.reads(config)
        if reads == ALL:
            return length * length
        if reads == LOCAL:
            return banded_slots(cls.local_reach(config), length)
        scored = length * (length // cls.ratio(config))
        return scored + (banded_slots(config.local_window, length) if reads == BOTH else 0)

    @classmethod
    def removed(cls, config) -> str:
        """What removing the layer's output removes, as a reader names it (`AblateLayer`)."""
        return {ALL: "dense layer", LOCAL: "sliding window"}.get(
            cls.reads(config), "compressed branch"
        )

    @classmethod  # noqa: B027 (an optional hook: no check by default)
    def check(cls, config: DecoderConfig) -> None:
        """Refuse (`ConfigError`) options of `config` that this kind cannot take (none by default)."""

    @classmethod
    @abc.abstractmethod
    def attention(cls, config: DecoderConfig, *, rngs: nnx.Rngs) -> nnx.Module:
        """The layer's attention module (`(B, T, D) -> (B, T, D)`), drawn from `rngs`."""


def build_attention(
    config: DecoderConfig, *, compressor=None, local: int = 0, stagger: bool = False,
    topk: int = 0, rngs: nnx.Rngs
) -> Attention:  # fmt: skip
    """`idealized.decoder.attention.Attention` of the config's width, heads and RoPE."""
    return Attention(
        config.d_model,
        config.heads,
        compressor=compressor,
        local_window=local,
        rope_dim=config.rotary_dim,
        stagger=stagger,
        index_topk=topk,
        index_heads=config.v4.index_heads,
        index_dim=config.v4.index_dim,
        index_pairs=config.v4.indexer_pairs and topk > 0,
        rngs=rngs,
    )


def build_v4_attention(
    config: DecoderConfig, *, kind: str, ratio: int, window: int, theta: float, rngs: nnx.Rngs
) -> V4Attention:
    """DeepSeek-V4's attention (`V4Attention` of `kind` `sliding`, `csa` or `hca`) with the
    config's width and heads and its group of switches (`config.v4`)."""
    v4 = config.v4
    return V4Attention(
        config.d_model,
        config.heads,
        config.head_dim,
        kind=kind,
        ratio=ratio,
        local_window=window,
        rope_dim=config.rotary_dim,
        rope_theta=theta,
        shared_kv=v4.shared_kv,
        qk_norm=v4.qk_norm,
        sink=v4.sink,
        index_topk=v4.indexer_topk,
        index_heads=v4.index_heads,
        index_dim=v4.index_dim,
        index_pairs=v4.indexer_pairs,
        q_rank=v4.q_rank,
        o_groups=v4.o_groups,
        o_rank=v4.o_rank,
        separate_values=v4.separate_values,
        rngs=rngs,
    )


def build_v4_compressed(kind: type[AbstractLayerKind], config: DecoderConfig, *, rngs: nnx.Rngs):
    """A csa or hca layer (`kind.name`: `V4Attention`'s kind), with its `local_window`; with
    `operator = none` a V4 layer that sees every earlier token (the control, its other parts
    kept)."""
    dense = not kind.reads_compressed(config)
    return build_v4_attention(
        config,
        kind="sliding" if dense else kind.name,
        ratio=kind.ratio(config),
        window=DENSE_WINDOW if dense else config.local_window,
        theta=config.v4.compress_rope_theta,
        rngs=rngs,
    )

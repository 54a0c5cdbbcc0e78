"""`csa`: DeepSeek-V4's compressed sparse attention, entries of overlapping windows of
`2 stride` tokens every `stride` (kept by the indexer's top `indexer_topk` when > 0), plus
the last `local_window` tokens."""

from __future__ import annotations

from typing import final

from weakspots.errors import ConfigError
from weakspots.idealized.decoder.layers.base import AbstractLayerKind, build_v4_compressed


@final
class CSA(AbstractLayerKind):
    """DeepSeek-V4's compressed sparse attention."""

    name = "csa"
    compresses = True
    indexer = True
    v4 = True

    @classmethod
    def overlap(cls, config):
        return True

    @classmethod
    def check(cls, config):
        # a compressed layer's indexer clips its RoPE to index_dim; V4's csa layer does not
        if config.v4.indexer_topk and config.v4.index_dim < config.rotary_dim:
            raise ConfigError(
                "index_dim",
                f"must be >= the RoPE channels ({config.rotary_dim}), got {config.v4.index_dim}",
            )

    @classmethod
    def attention(cls, config, *, rngs):
        return build_v4_compressed(cls, config, rngs=rngs)

"""`compressed`: entries of windows of `stride` tokens pooled by `--operator`, plus the last
`local_window` tokens exact (`--overlap`: windows of `2 stride`; `--stagger`; the indexer
when `indexer_topk > 0`). `operator = none` keeps every token: the dense control."""

from __future__ import annotations

from typing import final

from weakspots.idealized.decoder.attention import make_compressor
from weakspots.idealized.decoder.layers.base import AbstractLayerKind, build_attention


@final
class Compressed(AbstractLayerKind):
    """Attends to the compressed entries of complete windows, and its local window."""

    name = "compressed"
    compresses = True
    pooled_by_operator = True
    indexer = True

    @classmethod
    def overlap(cls, config):
        return config.overlap

    @classmethod
    def attention(cls, config, *, rngs):
        compressor = make_compressor(
            config.operator,
            stride=config.stride,
            heads=config.heads,
            d_model=config.d_model,
            head_dim=config.head_dim,
            rank=config.rank,
            overlap=config.overlap,
            rngs=rngs,
        )
        compressing = cls.reads_compressed(config)
        return build_attention(
            config,
            compressor=compressor,
            local=config.local_window if compressing else 0,
            stagger=config.stagger,
            topk=config.v4.indexer_topk if compressing else 0,
            rngs=rngs,
        )

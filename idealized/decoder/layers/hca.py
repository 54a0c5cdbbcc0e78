"""`hca`: DeepSeek-V4's heavily compressed attention, entries of disjoint windows of
`hca_stride` tokens, plus the last `local_window` tokens."""

from __future__ import annotations

from typing import final

from weakspots.idealized.decoder.layers.base import AbstractLayerKind, build_v4_compressed


@final
class HCA(AbstractLayerKind):
    """DeepSeek-V4's heavily compressed attention."""

    name = "hca"
    compresses = True
    v4 = True

    @classmethod
    def ratio(cls, config):
        return config.v4.hca_stride

    @classmethod
    def attention(cls, config, *, rngs):
        return build_v4_compressed(cls, config, rngs=rngs)

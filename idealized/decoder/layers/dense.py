"""`dense`: every earlier token, exact (the operator `none` at stride 1)."""

from __future__ import annotations

from typing import final

from weakspots.idealized.decoder.attention import make_compressor
from weakspots.idealized.decoder.layers.base import AbstractLayerKind, build_attention


@final
class Dense(AbstractLayerKind):
    """Attends to every earlier token."""

    name = "dense"

    @classmethod
    def attention(cls, config, *, rngs):
        d, h = config.d_model, config.heads
        compressor = make_compressor(
            "none", stride=1, heads=h, d_model=d, head_dim=d // h, rngs=rngs
        )
        return build_attention(config, compressor=compressor, rngs=rngs)

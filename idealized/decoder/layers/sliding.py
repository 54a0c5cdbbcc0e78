"""`sliding`: the last `window` tokens, exact."""

from __future__ import annotations

from typing import final

from weakspots.idealized.decoder.layers.base import AbstractLayerKind, build_attention


@final
class Sliding(AbstractLayerKind):
    """Attends to the last `window` tokens."""

    name = "sliding"
    sliding = True

    @classmethod
    def attention(cls, config, *, rngs):
        return build_attention(config, local=config.window, rngs=rngs)

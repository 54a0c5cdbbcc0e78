"""`swa`: DeepSeek-V4's sliding-only layer, the last `window` tokens (RoPE base `ROPE_THETA`)."""

from __future__ import annotations

from typing import final

from weakspots.errors import ConfigError
from weakspots.idealized.decoder.layers.base import AbstractLayerKind, build_v4_attention
from weakspots.idealized.rope import ROPE_THETA


@final
class SWA(AbstractLayerKind):
    """DeepSeek-V4's sliding window attention."""

    name = "swa"
    sliding = True
    v4 = True

    @classmethod
    def check(cls, config):
        if config.window < 1:
            raise ConfigError("window", "swa layers need --window >= 1")

    @classmethod
    def attention(cls, config, *, rngs):
        return build_v4_attention(
            config, kind="sliding", ratio=config.stride, window=config.window, theta=ROPE_THETA,
            rngs=rngs,
        )  # fmt: skip

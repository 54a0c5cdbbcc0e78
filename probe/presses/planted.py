"""A press with a weak spot by construction: the tokens of one phase are dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from weakspots.errors import ConfigError

from .base import AbstractPress


@dataclass(frozen=True)
class PlantedPress(AbstractPress):
    """Drop every context token at position `t` with `t mod period == phase`, keep the rest.

    A known answer for the scan: a needle whose answer starts at that phase loses its first
    token from every layer's cache, so accuracy should dip at needle phase `phase` of stride
    `period` and nowhere else.
    """

    name: ClassVar[str] = "PlantedPress"
    period: int = 8
    phase: int = 0

    def __post_init__(self):
        if not isinstance(self.period, int) or isinstance(self.period, bool) or self.period < 2:
            raise ConfigError("press", f"period: an integer >= 2, got {self.period!r}")
        if not isinstance(self.phase, int) or not 0 <= self.phase < self.period:
            raise ConfigError(
                "press", f"phase: an integer in [0, {self.period}), got {self.phase!r}"
            )

    def keep(self, keys, queries):
        import torch

        batch, kv_heads, length, _ = keys.shape
        position = torch.arange(length, device=keys.device)
        kept = position[position % self.period != self.phase]
        return kept.expand(batch, kv_heads, -1)

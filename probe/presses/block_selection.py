"""Block selection (Quest, MoBA, NSA's selected branch) as a prefill press."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from weakspots.errors import ConfigError

from .base import AbstractPress

SUMMARIES = ("minmax", "mean")


@dataclass(frozen=True)
class BlockSelectionPress(AbstractPress):
    """Keep whole blocks of `block_size` exact tokens, chosen per KV head by a block summary.

    The context's tokens `[0, T - local_window)` are cut into blocks `[jB, (j+1)B)` from
    position 0 (so B is the stride and a token's phase is its position mod B); the last
    `local_window` tokens, and the incomplete block before them, are always kept. Each block
    is summarised by its keys: `minmax`, Quest's per-channel bound
    `u_j(q) = sum_c max(q_c min_c K_j, q_c max_c K_j)` (an upper bound on q . k over the block),
    or `mean`, `q . mean(K_j)` (MoBA's). A block's score is the mean, over the queries of the
    context's last `window` tokens and the query heads that share the KV head, of
    `softmax_j(u_j(q) / sqrt(d))`; the top `k` blocks are kept, k the most whole blocks that
    fit `(1 - compression_ratio) T` tokens with the always-kept ones. The query is the
    context's own end: question-agnostic, unless the question is inside the compressed
    context (`--question-aware`).
    """

    name: ClassVar[str] = "BlockSelectionPress"
    needs_queries: ClassVar[bool] = True
    compression_ratio: float = 0.5
    block_size: int = 8
    summary: str = "minmax"
    local_window: int = 16

    def __post_init__(self):
        if not 0.0 <= float(self.compression_ratio) < 1.0:
            raise ConfigError(
                "press", f"compression_ratio in [0, 1), got {self.compression_ratio!r}"
            )
        for field in ("block_size", "local_window"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError("press", f"{field}: an integer >= 1, got {value!r}")
        if self.summary not in SUMMARIES:
            raise ConfigError(
                "press", f"summary: one of {', '.join(SUMMARIES)}, got {self.summary!r}"
            )

    def plan(self, length: int) -> tuple[int, int]:
        """(whole blocks that may be dropped, blocks kept) for a context of `length` tokens."""
        blocks = max(0, (length - self.local_window) // self.block_size)
        fixed = length - blocks * self.block_size
        budget = max(1, int(length * (1 - self.compression_ratio)))
        return blocks, min(blocks, max(0, (budget - fixed) // self.block_size))

    def scores(self, keys, queries):
        """Block scores `(batch, kv_heads, blocks)` (class docstring)."""
        import torch

        batch, kv_heads, length, dim = keys.shape
        blocks, _ = self.plan(length)
        blocked = keys[:, :, : blocks * self.block_size].reshape(
            batch, kv_heads, blocks, self.block_size, dim
        )
        group = queries.shape[1] // kv_heads
        q = queries.reshape(batch, kv_heads, group * queries.shape[2], dim).float()
        if self.summary == "minmax":
            low, high = blocked.amin(3).float(), blocked.amax(3).float()
            bound = torch.maximum(
                q[:, :, :, None] * low[:, :, None], q[:, :, :, None] * high[:, :, None]
            )
            logits = bound.sum(-1)
        else:
            logits = q @ blocked.float().mean(3).transpose(-1, -2)
        return torch.softmax(logits / math.sqrt(dim), dim=-1).mean(2)

    def keep(self, keys, queries):
        import torch

        batch, kv_heads, length, _ = keys.shape
        blocks, kept = self.plan(length)
        device = keys.device
        always = torch.arange(blocks * self.block_size, length, device=device)
        if kept == 0:
            return always.expand(batch, kv_heads, -1)
        top = self.scores(keys, queries).topk(kept, dim=-1).indices.sort(-1).values
        offsets = torch.arange(self.block_size, device=device)
        chosen = (top[..., None] * self.block_size + offsets).flatten(-2)
        return torch.cat([chosen, always.expand(batch, kv_heads, -1)], dim=-1)

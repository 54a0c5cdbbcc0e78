"""Compression operators for the toy: each maps a chunk of `s` keys to one cache entry (docs/theory.md §3).

The operators live in `idealized.operators` (one file each, listed in its registry); this
module is the toy's view of them. The plain functions act on one context's keys
`(N, s, d)` and return `(N, d)`. The compressor modules hold per-head parameters (leading
axis H) and return `(H, N, d)`. Compressors that are linear in the keys with one weight
per phase (`softmax_pool`, `mean_pool`, `linear`) expose `phase_weights()`, which lets the
model compute logits from query-key inner products alone (see `idealized.toy.task`).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import PRNGKeyArray

from weakspots.idealized.deepseek_v4 import deepseek_v4 as deepseek_v4
from weakspots.idealized.operators import AbstractOperator as AbstractCompressor
from weakspots.idealized.operators import DeepSeekV4 as DeepSeekV4
from weakspots.idealized.operators import LinearPool as LinearPool
from weakspots.idealized.operators import LowRank as LowRank
from weakspots.idealized.operators import MaxPool as MaxPool
from weakspots.idealized.operators import MeanPool as MeanPool
from weakspots.idealized.operators import SoftmaxPool as SoftmaxPool
from weakspots.idealized.operators import linear_pool as linear_pool
from weakspots.idealized.operators import low_rank as low_rank
from weakspots.idealized.operators import max_pool as max_pool
from weakspots.idealized.operators import mean_pool as mean_pool
from weakspots.idealized.operators import phase_maps as phase_maps
from weakspots.idealized.operators import softmax_pool as softmax_pool
from weakspots.idealized.operators.base import TOY
from weakspots.idealized.operators.registry import lookup
from weakspots.idealized.toy.config import ModelConfig


def init_compressor(
    key: PRNGKeyArray, config: ModelConfig, init_scale, dtype=jnp.float32
) -> AbstractCompressor:
    """Fresh per-head compressor of `config.operator`; `init_scale` (an array) sets the
    symmetry-breaking noise.

    At `init_scale = 0` every operator starts at (or, for `max_pool`, near) uniform pooling.
    """
    return lookup(config.operator, TOY).init(key, config, init_scale, dtype)

"""Compression operators for the toy: each maps a chunk of `s` keys to one cache entry (docs/theory.md §3).

The operators live in `idealized.operators` (one file each, listed in its registry); this
module is the toy's view of them. The plain functions act on one context's keys
`(N, s, d)` and return `(N, d)`. The compressor modules hold per-head parameters (leading
axis H) and return `(H, N, d)`. Compressors that are linear in the keys with one weight
per phase (`softmax_pool`, `mean_pool`, `linear`) expose `phase_weights()`, which lets the
model compute logits from query-key inner products alone (see `idealized.task`).
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import PRNGKeyArray

from .config import ModelConfig
from .deepseek_v4 import deepseek_v4 as deepseek_v4
from .operators import AbstractOperator as AbstractCompressor
from .operators import DeepSeekV4 as DeepSeekV4
from .operators import LinearPool as LinearPool
from .operators import LowRank as LowRank
from .operators import MaxPool as MaxPool
from .operators import MeanPool as MeanPool
from .operators import SoftmaxPool as SoftmaxPool
from .operators import linear_pool as linear_pool
from .operators import low_rank as low_rank
from .operators import max_pool as max_pool
from .operators import mean_pool as mean_pool
from .operators import phase_maps as phase_maps
from .operators import softmax_pool as softmax_pool
from .operators.base import TOY
from .operators.registry import lookup


def init_compressor(
    key: PRNGKeyArray, config: ModelConfig, init_scale, dtype=jnp.float32
) -> AbstractCompressor:
    """Fresh per-head compressor of `config.operator`; `init_scale` (an array) sets the
    symmetry-breaking noise.

    At `init_scale = 0` every operator starts at (or, for `max_pool`, near) uniform pooling.
    """
    return lookup(config.operator, TOY).init(key, config, init_scale, dtype)

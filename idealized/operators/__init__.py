"""Compression operators: one abstraction (`base`), one final class per file, one registry.

Each maps a chunk of `s` keys to one cache entry (docs/theory.md §3); `registry` says what
each is and which families (the toy, the decoder) support it.
"""

from .base import AbstractOperator as AbstractOperator
from .deepseek_v4 import DeepSeekV4 as DeepSeekV4
from .linear import LinearPool as LinearPool
from .linear import linear_pool as linear_pool
from .low_rank import LowRank as LowRank
from .low_rank import low_rank as low_rank
from .low_rank import phase_maps as phase_maps
from .max_pool import MaxPool as MaxPool
from .max_pool import max_pool as max_pool
from .mean_pool import MeanPool as MeanPool
from .mean_pool import mean_pool as mean_pool
from .none import NoPool as NoPool
from .registry import lookup as lookup
from .registry import operator_names as operator_names
from .registry import register as register
from .registry import unregister as unregister
from .softmax_pool import SoftmaxPool as SoftmaxPool
from .softmax_pool import softmax_pool as softmax_pool

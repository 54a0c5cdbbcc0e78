"""Compression operators: one abstraction (`base`), one final class per file, one registry.

Each maps a chunk of `s` keys to one cache entry (docs/theory.md §3); `registry` says what
each is and which families (the toy, the decoder) support it.
"""

from weakspots.idealized.operators.base import AbstractOperator as AbstractOperator
from weakspots.idealized.operators.deepseek_v4 import DeepSeekV4 as DeepSeekV4
from weakspots.idealized.operators.linear import LinearPool as LinearPool
from weakspots.idealized.operators.linear import linear_pool as linear_pool
from weakspots.idealized.operators.low_rank import LowRank as LowRank
from weakspots.idealized.operators.low_rank import low_rank as low_rank
from weakspots.idealized.operators.low_rank import phase_maps as phase_maps
from weakspots.idealized.operators.max_pool import MaxPool as MaxPool
from weakspots.idealized.operators.max_pool import max_pool as max_pool
from weakspots.idealized.operators.mean_pool import MeanPool as MeanPool
from weakspots.idealized.operators.mean_pool import mean_pool as mean_pool
from weakspots.idealized.operators.none import NoPool as NoPool
from weakspots.idealized.operators.registry import lookup as lookup
from weakspots.idealized.operators.registry import operator_names as operator_names
from weakspots.idealized.operators.registry import register as register
from weakspots.idealized.operators.registry import unregister as unregister
from weakspots.idealized.operators.softmax_pool import SoftmaxPool as SoftmaxPool
from weakspots.idealized.operators.softmax_pool import softmax_pool as softmax_pool

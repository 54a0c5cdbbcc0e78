"""Closed-form and semi-analytic predictions, and the reduced gradient-flow loss."""

import idealized as _idealized  # noqa: F401  (sets the precision policy)

from .reduced import mean_needle_probability as mean_needle_probability
from .reduced import reduced_loss as reduced_loss
from .reduced import retrieval_probability as retrieval_probability
from .reduced import specialization_order as specialization_order
from .thresholds import critical_chunks as critical_chunks
from .thresholds import critical_gain as critical_gain
from .thresholds import growth_rate as growth_rate
from .thresholds import growth_rates as growth_rates
from .thresholds import ray_time_offset as ray_time_offset
from .thresholds import specialization_time as specialization_time

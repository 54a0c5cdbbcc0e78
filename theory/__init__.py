"""Closed-form and semi-analytic predictions, and the reduced gradient-flow loss."""

import idealized as _idealized  # noqa: F401  (sets the precision policy)

from .accuracy import delta_max as delta_max
from .accuracy import phase_accuracy as phase_accuracy
from .accuracy import phase_accuracy_gaussian as phase_accuracy_gaussian
from .accuracy import phase_accuracy_heads as phase_accuracy_heads
from .accuracy import phase_accuracy_profile as phase_accuracy_profile
from .accuracy import psc as psc
from .accuracy import psc_std as psc_std
from .accuracy import support_weights as support_weights
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

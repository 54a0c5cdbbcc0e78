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
from .gain import gain_race as gain_race
from .gain import learned_gain_outcome as learned_gain_outcome
from .gain import learned_gain_states as learned_gain_states
from .gain import weight_decay_equilibrium_gain as weight_decay_equilibrium_gain
from .heads import coverage_summary as coverage_summary
from .heads import expected_uncovered as expected_uncovered
from .heads import predicted_coverage as predicted_coverage
from .mitigations import entropy_critical_weight as entropy_critical_weight
from .mitigations import offset_ensemble_accuracy as offset_ensemble_accuracy
from .mitigations import overlap_coverage as overlap_coverage
from .mitigations import stagger_offsets as stagger_offsets
from .mitigations import staggered_coverage as staggered_coverage
from .reduced import mean_needle_probability as mean_needle_probability
from .reduced import reduced_loss as reduced_loss
from .reduced import retrieval_probability as retrieval_probability
from .reduced import specialization_order as specialization_order
from .rope import rope_attenuation as rope_attenuation
from .rope import rope_frequencies as rope_frequencies
from .rope import rope_weak_phases as rope_weak_phases
from .support import covered as covered
from .support import internal_rate as internal_rate
from .support import predicted_support_size as predicted_support_size
from .support import reentry_margin as reentry_margin
from .support import reentry_rate as reentry_rate
from .support import reentry_time as reentry_time
from .support import sampled_final_weights as sampled_final_weights
from .support import stable_support_sizes as stable_support_sizes
from .support import support_loss as support_loss
from .support import support_profile as support_profile
from .thresholds import critical_chunks as critical_chunks
from .thresholds import critical_gain as critical_gain
from .thresholds import growth_rate as growth_rate
from .thresholds import growth_rates as growth_rates
from .thresholds import ray_time_offset as ray_time_offset
from .thresholds import specialization_time as specialization_time

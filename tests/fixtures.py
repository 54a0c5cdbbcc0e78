"""Setups only tests use, built on the experiments' measurements (`sims.experiments.measure`)."""

from __future__ import annotations

import numpy as np

from weakspots.idealized.precision import float64
from weakspots.sims.experiments.measure import flows_from_the_trainers_start, reduced_weights


@float64
def distance_to_reduced(dims, samples, seed=0, t_end=400.0, saves=41):
    """Max abs pooling-weight distance between the finite-d flow at each d and the reduced flow.

    Same start (the trainer's init at init_scale 0.3, seed `seed`); returns (dims, distances).
    """
    ts, finite, start = flows_from_the_trainers_start(dims, samples, seed, 0, t_end, saves)
    return np.asarray(dims), np.max(np.abs(finite - reduced_weights(start, ts)), axis=(1, 2, 3))

"""What becomes of near-uniform pooling at the canonical gain: the support-size distribution
of the flow, and whether SGD at d = 64 escapes a metastable uniform state.

Shared by the experiments that compare SGD end states with theory (support_size,
phase_diagram, pooling_dynamics, operators); memoised in-process where several ask.
"""

from __future__ import annotations

import functools

from weakspots import theory
from weakspots.sims.experiments.canonical import DIM, GAIN, Training, base_config

ESCAPE_SAMPLES = 2**14  # Monte Carlo problems for the gradient noise along the escape path
ESCAPE_CHAINS = 256  # chains of theory.escape_fraction_discrete (binomial error ~0.03)


@functools.cache
def predicted_support(stride, chunks, gain, samples, dim=None) -> tuple:
    """theory.predicted_support_size (the flow of L_inf, or of L_d at `dim`), memoised.

    Returns (sizes (K,), probabilities (K,), admissible sizes).
    """
    return theory.predicted_support_size(stride, chunks, gain, samples=samples, dim=dim)


def metastable_uniform(stride, chunks, admissible) -> bool:
    """Uniform stable at d = DIM, but an admissible (s-1)-phase state lies below it in L_d."""
    return stride - 1 in admissible and theory.finite_d_support_loss(
        stride, chunks, GAIN, DIM, stride - 1
    ) < theory.finite_d_support_loss(stride, chunks, GAIN, DIM, stride)


def uniform_escape(training: Training, stride: int, chunks: int) -> dict:
    """P(a canonical SGD run of `training`'s steps has left the uniform well by its end), at
    d = DIM.

    p_escape: theory.escape_fraction_discrete, the SGD recursion on L_d with the escape
    path's gradient noise (all zero-sum modes, discrete steps); p_passage: the 1-D
    first-passage model (theory.escape_rate, continuous time), kept for comparison. The
    path's loss and curvatures are L_d's (theory.escape_path_finite_d), its noise Monte
    Carlo. Returns escape_rate's dict with p_passage and p_escape added.
    """
    c = base_config(training, stride=stride, chunks=chunks)
    path = theory.escape_path_finite_d(stride, chunks, DIM, GAIN, samples=ESCAPE_SAMPLES)
    escape = theory.escape_rate(path, stride, c.lr, c.batch)
    discrete = theory.escape_fraction_discrete(
        path, stride, chunks, DIM, GAIN, c.lr, c.batch, c.steps, c.init_scale, ESCAPE_CHAINS
    )
    passage = theory.escape_probability(escape["rate"], c.lr * c.steps)
    return escape | {"p_passage": passage, "p_escape": discrete}

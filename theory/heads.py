"""Several heads: how they divide the phases, and which phases no head covers (docs/theory.md §6.5, §6.8).

Linear stage (theory.thresholds): with H >= 2 heads the differential modes grow fastest,
at lambda_d = -(beta^2/(H s^3)) ell'(p) sigma''(beta/s), so heads first split the phases
between them; the threshold becomes N > 1 + exp(beta/s) for mse and ce alike (one ce head
never specialises). Nonlinear stage: which coverage pattern the heads end on is sampled
over isotropic near-uniform starts in the dominant subspace (semi-analytic, as
theory.support.predicted_support_size).
"""

from collections import Counter

import numpy as np

from .support import covered, sampled_final_weights


def coverage_summary(pooling_weights, stride):
    """(sorted phases per head, uncovered phases, phases covered twice or more) of one state.

    pooling_weights: (H, s). Returns a tuple (tuple of ints, int, int).
    """
    mask = covered(pooling_weights, stride)
    per_head = tuple(sorted(int(x) for x in mask.sum(axis=-1)))
    count = mask.sum(axis=0)
    return per_head, int(np.sum(count == 0)), int(np.sum(count >= 2))


def predicted_coverage(
    stride, chunks, gain, heads, loss="mse", samples=128, seed=0, settle=20000.0
):
    """Distribution of coverage outcomes of H heads from near-uniform starts (docs/theory.md §6.5).

    stride s, chunks N, gain beta, heads H, loss "mse" | "ce"; settle: time after the
    linear stage (heads trade phases by slow re-entry: t ~ 1e4 at s=8, N=64, beta=16).
    Returns a dict {coverage_summary: probability}.
    """
    weights = sampled_final_weights(stride, chunks, gain, heads, loss, samples, seed, settle=settle)
    counts = Counter(coverage_summary(w, stride) for w in weights)
    return {key: n / samples for key, n in counts.most_common()}


def expected_uncovered(stride, chunks, gain, heads, loss="mse", samples=128, seed=0):
    """Mean number of phases no head covers (docs/theory.md §6.5): weak spots capacity does not explain."""
    dist = predicted_coverage(stride, chunks, gain, heads, loss, samples, seed)
    return sum(p * key[1] for key, p in dist.items())

"""Finite-d phase accuracy (theory.accuracy) vs a direct Monte Carlo of the retrieval task."""

import numpy as np
import pytest

from weakspots.sims.experiments.measure import monte_carlo_accuracy
from weakspots.theory import (
    delta_max,
    phase_accuracy,
    phase_accuracy_gaussian,
    phase_accuracy_profile,
    psc,
    support_weights,
)

MC_ATOL = 0.02  # two points per phase (Monte Carlo standard error <= 0.0056 at 8000 samples)
SAMPLES = 8000


@pytest.mark.parametrize(
    ("weights", "chunks", "dim"),
    [
        (support_weights(8, 8), 64, 64),
        (support_weights(8, 3), 64, 64),
        pytest.param(support_weights(8, 8), 12, 64, marks=pytest.mark.slow),
        pytest.param(
            np.array([0.3, 0.25, 0.2, 0.1, 0.08, 0.04, 0.02, 0.01]), 20, 32, marks=pytest.mark.slow
        ),
        pytest.param(support_weights(6, 5), 11, 16, marks=pytest.mark.slow),
    ],
)
def test_exact_accuracy_matches_monte_carlo(weights, chunks, dim):
    predicted = phase_accuracy(weights, 16.0, chunks, dim)
    measured = monte_carlo_accuracy(weights, chunks, dim, SAMPLES, seed=chunks + dim)
    np.testing.assert_allclose(predicted, measured, atol=MC_ATOL)


def test_theory_numbers_and_gaussian_approximation():
    uniform = phase_accuracy(support_weights(8, 8), 16.0, 64, 64)
    three = phase_accuracy_profile(8, 64, 3, 64)
    # docs/theory.md §6.11: uniform about 0.68 on every phase; 3-phase state 0.99 and 0.016
    np.testing.assert_allclose(uniform, 0.68, atol=0.02)
    np.testing.assert_allclose(three[:3], 0.99, atol=0.01)
    np.testing.assert_allclose(three[3:], 0.016, atol=0.005)
    # docs/theory.md §6.12: the 1-D Gaussian form sits about 2 points below
    gaussian = phase_accuracy_gaussian(support_weights(8, 8), 16.0, 12, 64)
    exact = phase_accuracy(support_weights(8, 8), 16.0, 12, 64)
    assert np.all(gaussian < exact) and np.all(exact - gaussian < 0.04)
    assert np.isclose(delta_max(three), three[0] - three[-1])
    np.testing.assert_allclose(psc(np.array([1.0, 0.0])), 0.5)
    np.testing.assert_allclose(phase_accuracy_profile(8, 64, 3, np.inf), [1, 1, 1] + [1 / 64] * 5)

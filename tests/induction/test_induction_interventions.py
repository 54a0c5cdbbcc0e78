"""Issue 51's idealised checks: in the induction model a known one-hot assignment gives the
knockout, cycling and collision answers exactly (the measurement code is right)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.idealized import induction
from weakspots.sims.induction import interventions

CONFIG = induction.InductionConfig(stride=5, heads=3, chunks=4, vocab=200, gamma=6.0, beta=2.0, kappa=0.5)
SC = induction.scales(CONFIG)


def _one_hot(positions, s=CONFIG.stride):
    logits = np.full((len(positions), 2, s), -np.inf)
    for h, r in enumerate(positions):
        logits[h, 0, r] = logits[h, 1, r + 1] = 0.0
    return induction.StaticGates(jnp.asarray(logits))


@pytest.fixture(scope="module")
def contexts():
    both = induction.sample_contexts(jax.random.key(0), CONFIG, 12)
    return both[:6], both[6:]  # calibration, evaluation: disjoint problems


@pytest.fixture(scope="module")
def accuracy():
    return jax.jit(lambda g, c: interventions.phase_accuracy(g, c, SC, CONFIG.vocab))


@pytest.fixture(scope="module")
def knocked():
    return jax.jit(lambda g, h, cal, ev: interventions.knockout(g, h, cal, ev, SC, CONFIG.vocab), static_argnums=1)


def test_dense_accuracy_is_the_closed_form(contexts, accuracy):
    positions = (3, 0, 1)
    got = np.asarray(accuracy(_one_hot(positions), contexts[1]))
    want = theory.induction_assignment_phase_accuracy(positions, 5, 4, 6.0, 2.0)
    np.testing.assert_array_equal(got, want)


def test_knocking_out_the_head_on_r_removes_exactly_phase_r(contexts, accuracy, knocked):
    positions = (3, 0, 1)
    base = np.asarray(accuracy(_one_hot(positions), contexts[1]))
    for head, r in enumerate(positions):
        after = np.asarray(knocked(_one_hot(positions), head, *contexts))
        expected = base.copy()
        expected[r] = 0.0
        np.testing.assert_array_equal(after, expected)


@pytest.mark.parametrize("delta", [1, 2, -1, 3])
def test_cycling_by_delta_moves_the_profile_by_delta(contexts, accuracy, delta):
    positions = (3, 0, 1)
    gates = _one_hot(positions)
    profile = np.append(np.asarray(accuracy(gates, contexts[1])), 0.0)  # the boundary carries nothing
    cycled = np.asarray(accuracy(interventions.cycle(gates, delta), contexts[1]))
    np.testing.assert_array_equal(cycled, np.roll(profile, delta)[:-1])


def test_a_collided_pair_carries_one_phase_twice_and_one_not_at_all(contexts, accuracy, knocked):
    positions = (2, 2, 0)
    gates = _one_hot(positions)
    base = np.asarray(accuracy(gates, contexts[1]))
    np.testing.assert_array_equal(base, [1.0, 0.0, 1.0, 0.0])
    for head in (0, 1):  # either of the pair alone still carries phase 2
        np.testing.assert_array_equal(np.asarray(knocked(gates, head, *contexts)), base)
    np.testing.assert_array_equal(np.asarray(knocked(gates, 2, *contexts)), [0.0, 0.0, 1.0, 0.0])

"""idealized.induction_eps and theory.induction_eps: the explicit embeddings meet the bound
with equality, the model at eps = 0 is the closed form, the bound holds on the sample loss,
and the thresholds solve what they say; on configs the experiment does not use."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.errors import ConfigError
from weakspots.idealized import induction_eps as eps_model
from weakspots.sims.induction import eps as eps_runs
from weakspots.sims.induction.summary import end_state
from weakspots.theory import induction_eps as eps_theory

CONFIG = eps_model.GramConfig(stride=5, heads=3, chunks=3, vocab=60, gamma=4.0, beta=1.5,
                              kappa=0.4, dim=6, gram_seed=3, contexts=3)  # fmt: skip
sample_loss = jax.jit(eps_model.sample_loss)
sample_phase_accuracy = jax.jit(eps_model.sample_phase_accuracy)


def test_the_gram_meets_the_bound_with_equality_and_is_the_vectors_gram():
    c = CONFIG.replace(eps=0.5 * eps_model.max_overlap(60, 6, 3))
    g = eps_model.gram(c)
    off = np.abs(g - c.kappa - np.eye(60))
    assert off.max() == pytest.approx(c.eps, rel=1e-12)
    np.testing.assert_allclose(np.diag(g), c.kappa + 1.0, rtol=1e-14)
    x = eps_model.embeddings(c)
    np.testing.assert_allclose(x @ x.T, g, atol=1e-13)
    assert np.linalg.eigvalsh(g).min() > -1e-12


def test_eps_beyond_the_reach_is_refused_naming_the_flag():
    with pytest.raises(ConfigError, match="^--eps"):
        CONFIG.replace(eps=1.01)


def test_at_eps_zero_the_sample_loss_is_the_closed_form():
    logits = 0.8 * jax.random.normal(jax.random.key(1), (3, 2, 5))
    c = CONFIG
    got = float(
        sample_loss(logits, jnp.asarray(eps_model.gram(c)), eps_model.contexts(c, 5), 4.0, 1.5)
    )
    w = np.asarray(jax.nn.softmax(logits, axis=-1))
    want = theory.induction_population_loss(w[:, 0], w[:, 1], 3, 60, 4.0, 1.5)
    assert got == pytest.approx(want, rel=1e-12)


def test_the_bound_holds_on_every_query():
    # |L_eps - L_0| <= eps_bound for any gates, per query (the sample loss is their mean)
    c = CONFIG.replace(eps=0.9 * eps_model.max_overlap(60, 6, 3))
    ctx = eps_model.contexts(c, 9)
    for seed in range(3):
        logits = 2.0 * jax.random.normal(jax.random.key(seed), (3, 2, 5))
        at = [
            float(sample_loss(logits, jnp.asarray(eps_model.gram(d)), ctx[i : i + 1], 4.0, 1.5))
            for d in (c.replace(eps=0.0), c)
            for i in range(3)
        ]
        gap = np.abs(np.asarray(at[3:]) - np.asarray(at[:3]))
        assert gap.max() <= theory.induction_eps_bound(3, 4.0, 1.5, c.eps)
        assert gap.max() > 0.0


def test_eps_for_gap_solves_twice_the_bound_equal_to_the_gap():
    for gap in (1e-4, 0.3):
        e = eps_theory.eps_for_gap(2, 5.0, 1.5, gap)
        assert 2.0 * theory.induction_eps_bound(2, 5.0, 1.5, e) == pytest.approx(gap, rel=1e-10)


def test_concentration_gap_is_positive_and_below_the_one_hot_cost_of_a_cap():
    # the least loss with a capped gate lies above the optimum, and at most at the optimum's
    # gates with one head's key moved to `level` (the rest on the next position)
    s, m, big_l, n, gamma, beta = 5, 2, 3, 60, 4.0, 1.5
    gap = eps_theory.concentration_gap(m, s, big_l, n, gamma, beta, level=0.9)
    best, _ = theory.induction_optimal_assignments(m, s, big_l, n, gamma, beta)
    key = np.zeros((m, s))
    value = np.zeros((m, s))
    for h in range(m):
        key[h, h] = value[h, h + 1] = 1.0
    key[0] = 0.0
    key[0, 0], key[0, 1] = 0.9, 0.1
    moved = theory.induction_population_loss(key, value, big_l, n, gamma, beta)
    assert 0.0 < gap <= moved - best + 1e-12


def test_one_hot_logits_give_the_assignment_phase_accuracy_at_eps_zero():
    c = CONFIG
    logits = jnp.asarray(eps_model.one_hot_logits((0, 0, 2), 5))
    acc = sample_phase_accuracy(
        logits, jnp.asarray(eps_model.gram(c)), eps_model.contexts(c, 2), 4.0, 1.5
    )
    want = theory.induction_assignment_phase_accuracy((0, 0, 2), 5, 3, 4.0, 1.5)
    np.testing.assert_allclose(np.asarray(acc), want, atol=1e-12)


@pytest.mark.slow
def test_flow_and_sgd_at_eps_zero_end_one_hot_at_their_assignments_accuracy():
    c = CONFIG.replace(heads=2, init_scale=0.01)
    for runs in (
        eps_runs.solve([c, c], [0, 1], t1=3000.0),
        eps_runs.train([c], [2], lr=2.0, batch=16, steps=1500),
    ):
        for i in range(len(runs.seeds)):
            state = end_state(runs.weights[i, :, 0], runs.weights[i, :, 1])
            assert state["concentrated"]
            want = theory.induction_assignment_phase_accuracy(state["positions"], 5, 3, 4.0, 1.5)
            np.testing.assert_allclose(runs.phase_accuracy[i], want, atol=1e-12)

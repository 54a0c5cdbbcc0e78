"""idealized.induction_content and theory.induction_content: the content-gated model's exact
loss against the position-only model and a Monte Carlo of its task, the rules' closed forms,
and the flow's two regimes (slow), on configs the experiment does not use."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

from weakspots import theory
from weakspots.errors import ConfigError
from weakspots.idealized import induction
from weakspots.idealized import induction_content as content
from weakspots.sims.induction.content import rule_gates, rule_loss, solve_many, train_many
from weakspots.theory import induction_content as content_theory

CONFIG = content.ContentConfig(stride=5, heads=2, chunks=4, vocab=300, gamma=4.0, beta=1.5,
                               prior=0.35, reliability=0.55, favourite=2)  # fmt: skip


population_loss = jax.jit(content.population_loss, static_argnums=1)
phase_accuracy = jax.jit(content.phase_accuracy, static_argnums=1)
gate_offsets = jax.jit(content.gate_offsets, static_argnums=1)


def _scales(c):
    return induction.scales(induction.InductionConfig(vocab=c.vocab, gamma=c.gamma, beta=c.beta))


def _random_gates(seed, c, scale=1.0):
    return content.init_gates(jax.random.key(seed), c, scale)


def test_the_cases_are_a_distribution():
    for prior, q in ((0.35, 0.55), (0.0, 1.0), (1.0, 0.0)):
        kn = content.knobs(CONFIG.replace(prior=prior, reliability=q))
        w = jax.jit(content.case_weights, static_argnums=(0, 1, 2))(5, 4, 2, kn)
        assert float(jnp.sum(w)) == pytest.approx(1.0, abs=1e-12)
        assert float(jnp.min(w)) >= 0.0


def test_gates_that_ignore_content_are_the_position_only_model():
    # content weights 0: every window's gates are the static gates, whatever the marks,
    # so the loss is theory.induction_population_loss of them for every (prior = 0) task
    g = _random_gates(1, CONFIG)
    flat = content.ContentGates(g.position, jnp.zeros_like(g.content))
    c = CONFIG.replace(prior=0.0)
    got = float(population_loss(flat, c, _scales(c), content.knobs(c)))
    w = np.asarray(jax.nn.softmax(flat.position, axis=-1))
    want = theory.induction_population_loss(w[:, 0], w[:, 1], c.chunks, c.vocab, c.gamma, c.beta)
    assert got == pytest.approx(want, rel=1e-12)


def test_population_loss_is_the_mean_over_sampled_problems():
    g = _random_gates(2, CONFIG)
    sc, kn = _scales(CONFIG), content.knobs(CONFIG)
    exact = float(population_loss(g, CONFIG, sc, kn))
    queries, marks = content.sample_problems(jax.random.key(3), CONFIG, kn, 40_000)
    per = jax.jit(jax.vmap(lambda r, m: content.batch_loss(g, r[None], m[None], sc)))(
        queries, marks
    )
    mean, se = float(jnp.mean(per)), float(jnp.std(per)) / np.sqrt(per.size)
    assert abs(mean - exact) < 4.0 * se


def test_the_rules_losses_cross_at_reliability_equal_to_prior():
    for prior in (0.15, 0.6):
        c = CONFIG.replace(prior=prior)

        def gap(q, c=c):
            d = c.replace(reliability=q)
            return rule_loss(d, "static") - rule_loss(d, "content")

        assert brentq(gap, 1e-3, 1.0, xtol=1e-12) == pytest.approx(
            content_theory.boundary_reliability(prior), abs=1e-9
        )
    # away from the boundary the gap is the leading-order one to O(1/N)
    c = CONFIG.replace(prior=0.1, reliability=0.9, vocab=10**6)
    got = rule_loss(c, "static") - rule_loss(c, "content")
    want = content_theory.leading_loss_gap(5, 2, 4, 4.0, 1.5, 0.1, 0.9)
    assert got == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize("regime", ["static", "content"])
def test_rules_phase_accuracy_and_offsets_are_the_closed_forms(regime):
    c = CONFIG
    g = rule_gates(c, regime)
    sc, kn = _scales(c), content.knobs(c)
    acc = np.asarray(phase_accuracy(g, c, sc, kn))
    want = content_theory.regime_phase_accuracy(5, 2, 4, 4.0, 1.5, c.reliability, 2, regime)
    np.testing.assert_allclose(acc, want, atol=1e-12)
    offsets = np.asarray(gate_offsets(g, c, kn))  # (H, 2, 2)
    limit = content_theory.regime_offsets(5, c.prior, c.reliability, 2, regime)
    np.testing.assert_allclose(offsets, np.broadcast_to(limit, offsets.shape), atol=1e-9)


def test_content_offsets_read_the_law_of_the_marks():
    mu = content_theory.mark_law(5, 0.35, 0.55, 2)
    assert mu.sum() == pytest.approx(1.0)
    pi = content_theory.query_prior(5, 0.35, 2)
    assert mu[2] == pytest.approx(0.55 * pi[2] + 0.45 / 4)
    static, per_window = content_theory.regime_offsets(5, 0.35, 0.55, 2, "content")
    assert per_window == 1.0 and 1.0 < static < 4.0


def test_config_errors_name_the_flag():
    with pytest.raises(ConfigError, match="^--prior"):
        content.ContentConfig(prior=1.5)
    with pytest.raises(ConfigError, match="^--favourite"):
        content.ContentConfig(stride=4, favourite=3)
    with pytest.raises(ConfigError, match="^--reliability"):
        content.ContentConfig(reliability=-0.1)


@pytest.mark.slow
def test_the_flow_ends_in_each_regime_and_at_its_closed_form():
    base = content.ContentConfig(stride=5, heads=2, chunks=6, vocab=1000, gamma=5.0, beta=2.0,
                                 favourite=2, init_scale=0.01, t1=4000.0, saves=5)  # fmt: skip
    configs = (base.replace(prior=0.05, reliability=1.0), base.replace(prior=0.5, reliability=0.2))
    flows = solve_many(configs)
    assert [flows.regime(0), flows.regime(1)] == ["content", "static"]
    for i, (c, regime) in enumerate(zip(configs, ("content", "static"), strict=True)):
        want = content_theory.regime_phase_accuracy(5, 2, 6, 5.0, 2.0, c.reliability, 2, regime)
        np.testing.assert_allclose(flows.phase_accuracy[i], want, atol=1e-9)
        limit = content_theory.regime_offsets(5, c.prior, c.reliability, 2, regime)
        np.testing.assert_allclose(
            flows.offsets[i, -1], np.broadcast_to(limit, (2, 2, 2)), atol=0.07
        )


@pytest.mark.slow
def test_sgd_on_the_task_ends_in_each_regime_at_its_closed_form():
    base = content.ContentConfig(stride=5, heads=1, chunks=6, vocab=1000, gamma=5.0, beta=2.0,
                                 favourite=2, init_scale=0.01)  # fmt: skip
    configs = (base.replace(prior=0.05, reliability=1.0), base.replace(prior=0.5, reliability=0.2))
    out = train_many(configs, lr=2.0, batch=64, steps=2000)
    assert out["rules"] == [["content"], ["static"]]
    for i, (c, regime) in enumerate(zip(configs, ("content", "static"), strict=True)):
        want = content_theory.regime_phase_accuracy(5, 1, 6, 5.0, 2.0, c.reliability, 2, regime)
        np.testing.assert_allclose(out["phase_accuracy"][i], want, atol=1e-9)

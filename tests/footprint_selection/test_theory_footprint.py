"""The footprint model's theory (theory.footprint, docs/theory.md §9.4) against a token-level
brute force of the §9.4 definitions written here, the toy's §5 loss, autodiff, and its bounds."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.theory import footprint as fp

EXACT = 1e-10  # float64 evaluations of one formula two ways


def brute_force(alpha, stride, chunks, carry, gain, key_gain, nu=None, start_entry=2):
    """M(phi) and m_eff(phi) by walking a context of `chunks` entries token by token.

    The value sits at p = start_entry * s + phi, its key at p - 1; token t carries the fact
    with share carry[t - p] for 0 <= t - p < W. Entry e pools tokens e s .. e s + s - 1;
    its logit is beta sum_j alpha_j share(e s + j) + beta_D alpha_j [e s + j = p - 1]; it holds
    the fact when one of its tokens carries it. nu: read quality per holding entry, in order.
    """
    s, w = stride, len(carry)
    retrieval, m_eff = [], []
    for phi in range(s):
        p = start_entry * s + phi
        assert p + w - 1 < chunks * s
        num, den, holding_logits = 0.0, 0.0, []
        for e in range(chunks):
            logit, holds = 0.0, False
            for j in range(s):
                t = e * s + j
                if 0 <= t - p < w:
                    logit += gain * alpha[j] * carry[t - p]
                    holds = True
                if t == p - 1:
                    logit += key_gain * alpha[j]
            den += math.exp(logit)
            if holds:
                quality = 1.0 if nu is None else nu[len(holding_logits)]
                num += quality * math.exp(logit)
                holding_logits.append(logit)
        retrieval.append(num / den)
        m_eff.append(math.log(sum(math.exp(x) for x in holding_logits)))
    return np.array(retrieval), np.array(m_eff)


# Configs the project never used: odd strides, windows off the multiples, uneven carry.
CONFIGS = [
    (5, 7, 23, 1.7, 0.9),
    (3, 11, 17, 2.3, 0.0),
    (6, 4, 29, 0.8, 2.1),
    (7, 21, 31, 0.6, 1.3),
]


@pytest.mark.parametrize("stride,window,chunks,gain_per_token,key_gain", CONFIGS)
def test_general_definition_matches_brute_force(stride, window, chunks, gain_per_token, key_gain):
    rng = np.random.default_rng(stride * 100 + window)
    alpha = rng.dirichlet(np.ones(stride))
    carry = rng.uniform(0.1, 1.0, window)
    gain = gain_per_token * stride
    n = int(fp.entry_count(stride, window).max())
    nu = rng.uniform(0.3, 1.0, n)
    want_m, want_logit = brute_force(alpha, stride, chunks, carry, gain, key_gain, nu)
    got_m = fp.footprint_retrieval(alpha, stride, chunks, carry, gain, key_gain, nu)
    got_logit = fp.footprint_phase_logit(alpha, stride, carry, gain, key_gain)
    np.testing.assert_allclose(got_m, want_m, rtol=EXACT)
    np.testing.assert_allclose(got_logit, want_logit, rtol=EXACT)


@pytest.mark.parametrize("stride,window,chunks,carry_gain,decoy_gain", CONFIGS)
def test_flat_closed_forms_match_brute_force(stride, window, chunks, carry_gain, decoy_gain):
    alpha = np.full(stride, 1.0 / stride)
    carry = np.ones(window)
    want_m, want_logit = brute_force(alpha, stride, chunks, carry, carry_gain * stride, decoy_gain * stride)
    np.testing.assert_allclose(fp.flat_phase_logit(stride, window, carry_gain, decoy_gain), want_logit, rtol=EXACT)
    np.testing.assert_allclose(fp.flat_retrieval(stride, window, chunks, carry_gain, decoy_gain), want_m, rtol=EXACT)


def test_allocation_law_where_the_next_entry_is_full():
    # brute-force m_0 - m_1 from the entry logits of the walk; law g_D - g phi for phi >= 1
    stride, window, carry_gain, decoy_gain = 6, 13, 0.7, 1.9
    alpha = np.full(stride, 1.0 / stride)
    m, _ = fp.entry_logits(alpha, stride, np.ones(window), carry_gain * stride, decoy_gain * stride)
    law = fp.allocation_law(stride, carry_gain, decoy_gain)
    phi = np.arange(stride)
    full_next = (window >= 2 * stride - phi) & (phi >= 1)
    assert full_next.sum() >= 4
    np.testing.assert_allclose((m[:, 0] - m[:, 1])[full_next], law[full_next], rtol=EXACT)
    # at phi = 0 the key is the decoy, outside entry 0: the ratio is 0, not g_D
    assert abs(m[0, 0] - m[0, 1]) < EXACT


@pytest.mark.parametrize("stride,window,carry_gain,decoy_gain", [(9, 20, 0.4, 0.3), (10, 13, 0.9, 0.0), (7, 15, 0.5, 1.2)])
def test_weakest_phase_is_nearest_phi_star_among_phases_1_to_s_minus_rho(stride, window, carry_gain, decoy_gain):
    rho = window % stride
    phi_star = fp.weakest_phase_flat(stride, window, carry_gain, decoy_gain)
    alpha = np.full(stride, 1.0 / stride)
    _, logit = brute_force(alpha, stride, 40, np.ones(window), carry_gain * stride, decoy_gain * stride)
    region = np.arange(1, stride - rho + 1)
    assert region[0] <= phi_star <= region[-1]
    weakest = region[np.argmin(logit[region])]
    assert abs(weakest - phi_star) <= 0.5 + 1e-12


@pytest.mark.parametrize("stride,window,carry_gain,decoy_gain", [(6, 15, 0.4, 0.9), (9, 22, 0.3, 0.2)])
def test_the_wrapped_phases_form_a_second_well(stride, window, carry_gain, decoy_gain):
    rho = window % stride
    centre = fp.weakest_phase_wrapped(stride, window, carry_gain, decoy_gain)
    alpha = np.full(stride, 1.0 / stride)
    _, logit = brute_force(alpha, stride, 40, np.ones(window), carry_gain * stride, decoy_gain * stride)
    region = np.arange(stride - rho + 1, stride)
    weakest = region[np.argmin(logit[region])]
    assert abs(weakest - np.clip(centre, region[0], region[-1])) <= 0.5 + 1e-12


def test_phase_zero_can_be_weaker_than_phi_star_when_the_key_counts():
    # with g_D > 0 phase 0 lacks the key term (it is the decoy): phi* is not the global minimum
    stride, window, carry_gain, decoy_gain = 4, 8, 0.5, 1.0
    logit = fp.flat_phase_logit(stride, window, carry_gain, decoy_gain)
    assert np.argmin(logit) == 0
    assert fp.weakest_phase_flat(stride, window, carry_gain, decoy_gain) == 3.0


@pytest.mark.parametrize("multiple", [2, 3, 5])
def test_gap_bound_for_whole_windows_over_any_pooling(multiple):
    stride = 6
    rng = np.random.default_rng(multiple)
    worst = 0.0
    for trial in range(200):
        alpha = rng.dirichlet(np.full(stride, 0.2))  # often near-collapsed
        if trial % 4 == 0:
            alpha = np.eye(stride)[trial % stride] * (1 - 1e-9) + 1e-9 / stride
        gain = rng.uniform(0.5, 60.0)
        logit = fp.footprint_phase_logit(alpha, stride, np.ones(multiple * stride), gain, 0.0)
        worst = max(worst, logit.max() - logit.min())
    bound = fp.gap_bound(multiple)
    assert bound == pytest.approx(math.log(multiple / (multiple - 1)))
    assert worst <= bound
    assert worst > 0.5 * bound  # the bound is approached, not loose by orders


def test_gap_bound_needs_the_key_logit_term():
    # log(q/(q-1)) alone fails once beta_D > 0; the bound with D = beta_D max alpha holds
    stride, multiple, carry_gain, decoy_gain = 4, 2, 1.0, 3.0
    logit = fp.flat_phase_logit(stride, multiple * stride, carry_gain, decoy_gain)
    gap = logit.max() - logit.min()
    assert gap > fp.gap_bound(multiple, 0.0)
    assert gap <= fp.gap_bound(multiple, decoy_gain)


def test_windows_within_a_chunk_leave_toy_weak_spots():
    # W <= s, pooling collapsed on k phases: phases whose carry misses the support read at
    # logit 0 in every entry (the toy's dropped phases), at least s - k W of them
    stride, window, chunks, gain = 8, 2, 64, 16.0
    support = np.zeros(stride, bool)
    support[[0, 4]] = True
    alpha = np.where(support, 0.5, 0.0)
    uncovered = fp.uncovered_phases(stride, window, support)
    assert uncovered.sum() >= stride - support.sum() * window
    m, _ = fp.entry_logits(alpha, stride, np.ones(window), gain)
    finite = np.where(np.isfinite(m), m, 0.0)
    assert np.all(finite[uncovered] == 0.0)
    retrieval = fp.footprint_retrieval(alpha, stride, chunks, np.ones(window), gain)
    toy_covered = theory.retrieval_probability(gain / 2, chunks)
    single = ~uncovered & (fp.entry_count(stride, window) == 1)
    assert single.sum() >= 2
    np.testing.assert_allclose(retrieval[single], float(toy_covered), rtol=1e-9)
    np.testing.assert_allclose(retrieval[uncovered], fp.entry_count(stride, window)[uncovered] / chunks)


def test_invariant_at_equal_window_over_stride():
    # lattice phases of (lambda s, lambda W) at fixed beta c = g s and fixed g_D
    base_s, base_w, chunks, total, decoy = 3, 7, 30, 2.4, 0.8
    ref = fp.flat_retrieval(base_s, base_w, chunks, total / base_s, decoy)
    for scale in (2, 5):
        s = base_s * scale
        got = fp.flat_retrieval(s, base_w * scale, chunks, total / s, decoy)
        np.testing.assert_allclose(got[::scale], ref, rtol=EXACT)


def test_length_enters_only_through_the_entry_count():
    lengths = np.array([64, 128, 512]) * 5
    table = fp.retrieval_vs_length(5, 12, lengths, 0.6, 0.4)
    m_eff = fp.flat_phase_logit(5, 12, 0.6, 0.4)
    counts = fp.entry_count(5, 12)
    extra = np.where(np.arange(5) == 0, np.expm1(0.4), 0.0)
    for row, t in zip(table, lengths, strict=True):
        logit = np.log(row / (1 - row))
        np.testing.assert_allclose(logit, m_eff - np.log(t // 5 - counts + extra), rtol=1e-9)


@pytest.mark.parametrize("stride,chunks,gain", [(5, 37, 11.0), (6, 90, 20.0)])
def test_toy_limit_is_the_reduced_loss(stride, chunks, gain):
    with jax.enable_x64(True):
        logits = jnp.asarray(np.random.default_rng(stride).normal(0, 0.7, stride), jnp.float64)
        got = fp.footprint_loss(logits, stride, chunks, np.ones(1), gain, 0.0)
        want = theory.reduced_loss(logits[None, :], jnp.asarray([gain], jnp.float64), chunks)
    assert float(got) == pytest.approx(float(want), rel=1e-12)
    assert fp.footprint_growth_rate(stride, chunks, np.ones(1), gain) == pytest.approx(
        float(theory.growth_rate(stride, chunks, gain)), rel=1e-10
    )


@pytest.mark.parametrize("stride,window,chunks,gain,key_gain", [(5, 9, 41, 13.0, 4.0), (4, 3, 19, 7.0, 2.5)])
def test_hessian_and_gradient_against_autodiff(stride, window, chunks, gain, key_gain):
    rng = np.random.default_rng(window)
    carry = rng.uniform(0.2, 1.0, window)
    nu = rng.uniform(0.5, 1.0, int(fp.entry_count(stride, window).max()))
    u = rng.normal(0, 0.4, stride)
    alpha = np.exp(u) / np.exp(u).sum()

    def loss(x):
        return fp.footprint_loss(x, stride, chunks, carry, gain, key_gain, nu)

    with jax.enable_x64(True):
        x = jnp.asarray(u, jnp.float64)
        want_h = np.asarray(jax.jit(jax.hessian(loss))(x))
        grad_u = np.asarray(jax.jit(jax.grad(loss))(x))
    got_h = fp.footprint_hessian(stride, chunks, carry, gain, key_gain, nu, pooling_weights=alpha)
    np.testing.assert_allclose(got_h, want_h, rtol=1e-8, atol=1e-12)
    g = fp.footprint_gradient(alpha, stride, chunks, carry, gain, key_gain, nu)
    np.testing.assert_allclose(alpha * (g - alpha @ g), grad_u, rtol=1e-8, atol=1e-14)


def test_carry_breaks_the_fixed_point():
    g = fp.footprint_gradient(np.full(8, 1 / 8), 8, 64, np.ones(4), 16.0)
    assert np.ptp(g) > 1e-3
    assert np.ptp(fp.footprint_gradient(np.full(8, 1 / 8), 8, 64, np.ones(1), 16.0)) < 1e-14


def test_largest_growth_rate_no_carry_matches_the_table():
    # docs/theory.md §9.4.3: §9.1's 0.0989 at s=8, N=64 without carry is the toy's max over gains
    rate, gain = fp.max_growth_rate(8, 64, np.ones(1), gains=np.arange(10.0, 40.0, 0.5))
    assert rate == pytest.approx(0.0989, abs=5e-5)
    grid = np.linspace(gain - 2, gain + 2, 401)
    assert rate >= float(np.max(theory.growth_rate(8, 64, grid))) - 1e-9


def test_gap_requirement_numbers():
    need = fp.footprint_gap_requirement(0.4, multiple=2)
    assert need["logit_gap_needed"] == pytest.approx(4 * math.atanh(0.4))
    assert need["carry_only_ceiling"] < 0.4
    # the key logit that the bound needs reaches the logit gap needed
    assert fp.gap_bound(2, need["key_logit_needed"]) == pytest.approx(need["logit_gap_needed"])

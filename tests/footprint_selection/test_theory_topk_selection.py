"""The selection model's theory (theory.topk_selection, docs/theory.md §9.5) against Monte Carlo
of the §9.5 definition, an independent quadrature, and its limits."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from weakspots import theory
from weakspots.theory import topk_selection as ts

Z_TOL = 4.0  # Monte Carlo: |theory - MC| within 4 binomial standard errors


def monte_carlo_miss(mu, sigma, chunks, topk, samples, seed):
    """P(rank > k): the needle N(mu, sigma^2) against N - 1 i.i.d. N(0, 1), counted directly."""
    rng = np.random.default_rng(seed)
    misses = 0
    for start in range(0, samples, 2000):
        b = min(2000, samples - start)
        needle = mu + sigma * rng.standard_normal(b)
        others = rng.standard_normal((b, chunks - 1))
        misses += int(((others > needle[:, None]).sum(axis=1) >= topk).sum())
    return misses / samples


@pytest.mark.parametrize(
    "mu,sigma,chunks,topk",
    [(2.1, 1.0, 150, 3), (2.6, 0.4, 300, 7), (1.2, 0.0, 45, 2), (0.3, 1.3, 60, 20)],
)
def test_miss_probability_against_monte_carlo(mu, sigma, chunks, topk):
    samples = 20000
    mc = monte_carlo_miss(mu, sigma, chunks, topk, samples, seed=chunks + topk)
    p = float(ts.miss_probability(mu, sigma, chunks, topk))
    se = math.sqrt(max(p * (1 - p), 1e-4) / samples)
    assert abs(p - mc) < Z_TOL * se


@pytest.mark.parametrize("mu,sigma,chunks,topk", [(2.9, 0.6, 500, 9), (1.5, 1.0, 80, 4)])
def test_miss_probability_against_the_order_statistic_form(mu, sigma, chunks, topk):
    # Phi(Y_(k)) ~ Beta(N - k, k): P(hit) = E Phi((mu - Y_(k)) / sigma), by adaptive quadrature
    def f(u):
        return stats.beta.pdf(u, chunks - topk, topk) * stats.norm.cdf((mu - stats.norm.ppf(u)) / sigma)

    hit, _ = integrate.quad(f, 0.0, 1.0, limit=400, epsabs=1e-12)
    assert float(ts.miss_probability(mu, sigma, chunks, topk)) == pytest.approx(1 - hit, abs=1e-8)


def test_topk_one_is_the_toy_readout():
    # k = 1: selected iff the needle beats every distractor, the toy's Phi(.)^(N-1) integral
    weights = np.array([0.5, 0.3, 0.2])
    miss = ts.phase_miss_probability(weights, 40, 1, 24)
    acc = theory.needle_accuracy(weights, np.sum(weights**2), 40, 24)
    np.testing.assert_allclose(1 - miss, acc, atol=2e-6)


def test_step_form_approaches_the_exact_miss_at_large_n():
    err = []
    for chunks in (10**3, 10**5):
        topk = chunks // 100
        t = ts.step_location(chunks, topk)
        mu = t + np.linspace(-1.5, 1.5, 7)
        exact = ts.miss_probability(mu, 0.5, chunks, topk)
        err.append(np.max(np.abs(exact - ts.miss_probability_step(mu, 0.5, chunks, topk))))
    assert err[1] < err[0] < 0.02


def test_step_sharpens_with_log_n_over_k():
    widths = [ts.step_width(n, 8) for n in (64, 1024, 32768)]
    assert widths[0] > widths[1] > widths[2]
    for n, w in zip((1024, 32768), widths[1:], strict=True):
        t = ts.step_location(n, 8)
        assert w * t * math.sqrt(8) == pytest.approx(1.0, rel=0.15)
    assert ts.step_location(32768, 512) == pytest.approx(float(stats.norm.ppf(1 - 512 / 32768)))


def test_amplification_peaks_at_the_step():
    chunks, topk, sigma = 4096, 16, 0.3
    t = ts.step_location(chunks, topk)
    mu = np.array([t - 1.0, t, t + 1.0])
    amp = ts.amplification(mu, sigma, chunks, topk)
    assert amp[1] > amp[0] and amp[1] > amp[2]
    np.testing.assert_allclose(amp, ts.amplification_step(mu, sigma, chunks, topk), rtol=0.15)
    peak = 1 / (math.sqrt(2 * math.pi) * math.hypot(sigma, ts.step_width(chunks, topk)))
    assert amp[1] == pytest.approx(peak, rel=0.1)


def test_phase_miss_against_monte_carlo_of_the_toy_indexer():
    # keys i.i.d. N(0, I/d), indexer pooled keys sum_j alpha_j x[c, j], query x[c*, phi]
    stride, chunks, topk, dim, samples = 3, 30, 4, 12, 6000
    weights = np.array([0.55, 0.3, 0.15])
    theory_miss = ts.phase_miss_probability(weights, chunks, topk, dim)
    rng = np.random.default_rng(7)
    for phi in range(stride):
        x = rng.standard_normal((samples, chunks, stride, dim)) / math.sqrt(dim)
        pooled = np.einsum("bcjd,j->bcd", x, weights)
        score = np.einsum("bcd,bd->bc", pooled, x[:, 0, phi])
        miss = ((score[:, 1:] > score[:, :1]).sum(axis=1) >= topk).mean()
        p = theory_miss[phi]
        assert abs(miss - p) < Z_TOL * math.sqrt(max(p * (1 - p), 1e-4) / samples)


def test_gap_requirement():
    need = ts.topk_gap_requirement(0.4, 32768, 512, 1.0)
    t, s_eff = need["step_location"], need["effective_width"]
    spread = need["margin_spread_needed"]
    low, high = t - spread / 2, t + spread / 2
    gap = ts.miss_probability_step(low, 1.0, 32768, 512) - ts.miss_probability_step(high, 1.0, 32768, 512)
    assert float(gap) == pytest.approx(0.4, abs=1e-9)
    assert s_eff >= 1.0

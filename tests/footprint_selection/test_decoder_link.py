"""How the §9 models are held against decoders (docs/theory.md §9.4.5, §9.5.2): the footprint
model's logit with entries hidden against a token walk written here, the inverse of the
selection model's hit probability against Monte Carlo, and the profile fit against a profile
made from known parameters."""

import math

import numpy as np
import pytest
from scipy.special import logit

from weakspots import theory
from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.experiments.decoder.footprint import study as footprint

EXACT = 1e-10


def walk(stride, window, chunks, g, g_d, hidden=(), start_entry=2):
    """logit M(phi) by walking `chunks` entries token by token: flat carry of share 1 over
    `window` tokens from the value at p, mean pooling, key at p - 1 with gain g_D s; the
    entries of `hidden` (direct: the key's and the value's windows; next1: the one after the
    value's) left out of the softmax."""
    out = []
    for phi in range(stride):
        p = start_entry * stride + phi
        gone = set()
        if "direct" in hidden:
            gone |= {(p - 1) // stride, p // stride}
        if "next1" in hidden:
            gone.add(p // stride + 1)
        num = den = 0.0
        for e in range(chunks):
            if e in gone:
                continue
            tokens = range(e * stride, (e + 1) * stride)
            carried = sum(1 for t in tokens if 0 <= t - p < window)
            key = sum(1 for t in tokens if t == p - 1)
            x = math.exp(g * carried + g_d * key)
            den += x
            num += x if carried else 0.0
        out.append(math.log(num) - math.log(den - num) if num > 0 else -math.inf)
    return np.array(out)


@pytest.mark.parametrize("stride,window,chunks,g,g_d", [
    (5, 7, 23, 0.45, 0.9), (3, 11, 17, 0.8, 0.0), (6, 4, 29, 0.3, 2.1), (7, 21, 31, 0.2, -0.4),
    (8, 16, 15, 0.5, 0.7), (4, 2, 30, 1.1, 0.3),
])  # fmt: skip
@pytest.mark.parametrize("hidden", [(), ("direct",), ("next1",), ("direct", "next1")])
def test_hidden_entries_logit_matches_a_token_walk(stride, window, chunks, g, g_d, hidden):
    want = walk(stride, window, chunks, g, g_d, hidden)
    got = theory.footprint_flat_retrieval_logit(stride, window, chunks, g, g_d, hidden)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=EXACT, atol=EXACT)


def test_nothing_hidden_is_the_retrieval_logit_and_unknown_entries_are_refused():
    got = theory.footprint_flat_retrieval_logit(6, 15, 48, 0.4, 0.9)
    want = logit(theory.footprint_flat_retrieval(6, 15, 48, 0.4, 0.9))
    np.testing.assert_allclose(got, want, rtol=EXACT)
    with pytest.raises(ValueError, match="hidden entries"):
        theory.footprint_flat_retrieval_logit(6, 15, 48, 0.4, 0.9, ("next2",))


@pytest.mark.parametrize("hit,chunks,topk", [(0.7, 30, 4), (0.2, 120, 4), (0.95, 60, 8)])
def test_needle_mean_gives_back_the_hit_rate_in_a_monte_carlo(hit, chunks, topk):
    mu = theory.topk_needle_mean(hit, 1.0, chunks, topk)
    rng = np.random.default_rng(7)
    draws = 40_000
    needle = rng.normal(mu, 1.0, draws)
    above = (rng.normal(size=(draws, chunks - 1)) > needle[:, None]).sum(axis=1)
    measured = float(np.mean(above < topk))
    assert abs(measured - hit) <= 4 * math.sqrt(hit * (1 - hit) / draws)


def test_needle_mean_rises_with_the_hit_rate():
    means = [theory.topk_needle_mean(h, 1.0, 60, 4) for h in (0.1, 0.4, 0.7, 0.9)]
    assert np.all(np.diff(means) > 0)


@pytest.mark.parametrize("stride,window", [(8, 16), (8, 4), (4, 8)])
def test_the_profile_fit_recovers_known_parameters(stride, window):
    config = LMConfig(stride=stride, window=window)
    truth = dict(offset=-0.8, carry_gain=1.6 / stride, decoy_gain=0.7)
    accuracy = footprint.fitted_accuracy(config, truth)
    fit = footprint.fit_profile(config, accuracy)
    assert fit["residual"] < 1e-6
    np.testing.assert_allclose(footprint.fitted_accuracy(config, fit), accuracy, atol=1e-6)
    if window >= stride:  # below the stride the key and carry gains trade off at phi >= 1
        for name, value in truth.items():
            assert fit[name] == pytest.approx(value, abs=1e-4)

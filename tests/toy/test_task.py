"""The inner-product sampler against the inner products of real keys (two independent samplers)."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from weakspots.idealized.toy.config import ModelConfig
from weakspots.idealized.toy.task import sample_batch

CONFIG = ModelConfig(stride=4, chunks=8, dim=16)


def _gram_from_keys(batch):
    return np.einsum("bcjd,bd->bcj", batch.keys, batch.query)


def _split(gram, target, phase):
    rows = np.arange(len(target))
    needle = gram[rows, target, phase]
    mask = np.ones(gram.shape, bool)
    mask[rows, target, phase] = False
    return needle, gram[mask].reshape(len(target), -1)


def test_gram_sampler_matches_real_keys_in_distribution():
    n = 20000
    real = sample_batch(jax.random.key(0), CONFIG, n, keys=True, dtype=jnp.float64)
    fast = sample_batch(jax.random.key(1), CONFIG, n, keys=False, dtype=jnp.float64)
    needle_r, others_r = _split(
        _gram_from_keys(real), np.asarray(real.target), np.asarray(real.phase)
    )
    needle_f, others_f = _split(
        np.asarray(fast.gram), np.asarray(fast.target), np.asarray(fast.phase)
    )
    # The needle's entry is |q|^2 ~ chi2_d / d.
    d = CONFIG.dim
    for needle in (needle_r, needle_f):
        assert stats.kstest(needle * d, stats.chi2(d).cdf).pvalue > 1e-3
    # Distractor entries: same marginal, and the same dependence through the shared |q|.
    assert stats.ks_2samp(others_r[:, 0], others_f[:, 0]).pvalue > 1e-3
    for stat in (lambda o: o.var(), lambda o: np.mean(o[:, 0] ** 2 * o[:, 1] ** 2)):
        np.testing.assert_allclose(stat(others_f), stat(others_r), rtol=0.05)
    # Correlation of a distractor's square with the needle (through |q|^2) agrees.
    corr = [
        np.corrcoef(nd, o[:, 0] ** 2)[0, 1]
        for nd, o in ((needle_r, others_r), (needle_f, others_f))
    ]
    assert abs(corr[0] - corr[1]) < 0.04


def test_targets_and_phases_uniform_and_query_is_the_needle():
    batch = sample_batch(jax.random.key(2), CONFIG, 8000, keys=True)
    counts_c = np.bincount(np.asarray(batch.target), minlength=CONFIG.chunks)
    counts_p = np.bincount(np.asarray(batch.phase), minlength=CONFIG.stride)
    assert stats.chisquare(counts_c).pvalue > 1e-3
    assert stats.chisquare(counts_p).pvalue > 1e-3
    rows = np.arange(8000)
    np.testing.assert_array_equal(
        np.asarray(batch.keys)[rows, batch.target, batch.phase], np.asarray(batch.query)
    )


def test_fixed_phase_and_determinism():
    a = sample_batch(jax.random.key(3), CONFIG, 64, keys=False, phase=2)
    b = sample_batch(jax.random.key(3), CONFIG, 64, keys=False, phase=2)
    assert np.all(np.asarray(a.phase) == 2)
    np.testing.assert_array_equal(a.gram, b.gram)

"""theory.operators (DeepSeek-V4's unit-normalised key) vs autodiff and the `DeepSeekV4` module."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.compression import DeepSeekV4
from weakspots.theory import (
    normalised_critical_chunks,
    normalised_growth_rate,
    normalised_needle_logit,
    normalised_phase_accuracy,
    normalised_reduced_loss,
    normalised_unstable_gains,
    phase_accuracy,
)

HESSIAN_RTOL = 1e-8  # closed form vs float64 autodiff
LOGIT_ATOL = 0.12  # d=1024 Monte Carlo needle logit (sd ~0.45, 256 draws, bias O(m/d)) vs d=inf
LOSS_ATOL = 0.01  # d=inf extrapolation of the module's loss at d=256, 1024 vs L_inf (se ~0.0025)
ACC_ATOL = 0.03  # 4096 needles: standard error 0.007
GAP_ATOL = 0.012  # paired normalised - mean_pool accuracy: standard error ~0.003


@jax.jit
def _hessian(logits, gain, chunks):
    return jax.hessian(lambda a: normalised_reduced_loss(a[None], gain, chunks))(logits)


def _zero_sum_hessian_eigenvalues(stride, chunks, gain):
    hess = np.asarray(_hessian(jnp.zeros(stride), jnp.array([gain]), jnp.asarray(chunks, float)))
    basis = np.linalg.qr(np.eye(stride) - 1.0 / stride)[0][:, : stride - 1]  # zero-sum plane
    return np.linalg.eigvalsh(basis.T @ hess @ basis)


@pytest.mark.parametrize(
    ("stride", "chunks", "gain"), [(8, 64, 16.0), (8, 64, 6.0), (6, 200, 4.0), (16, 40, 2.0)]
)
def test_growth_rate_is_minus_the_autodiff_hessian(stride, chunks, gain):
    eig = _zero_sum_hessian_eigenvalues(stride, chunks, gain)
    assert eig.shape == (stride - 1,)
    np.testing.assert_allclose(
        -eig, normalised_growth_rate(stride, chunks, gain), rtol=HESSIAN_RTOL
    )


def test_canonical_numbers():
    np.testing.assert_allclose(normalised_growth_rate(8, 64, 16.0), -0.35451, atol=5e-6)
    np.testing.assert_allclose(normalised_critical_chunks(8, 16.0), 757.90, atol=5e-3)
    lo, hi = normalised_unstable_gains(8, 64)
    np.testing.assert_allclose([lo, hi], [3.3124, 8.0842], atol=5e-4)
    assert normalised_unstable_gains(8, 35) is None


def test_threshold_sign_change_in_autodiff_hessian():
    n_c = normalised_critical_chunks(8, 16.0)
    below = _zero_sum_hessian_eigenvalues(8, n_c * 0.99, 16.0)
    above = _zero_sum_hessian_eigenvalues(8, n_c * 1.01, 16.0)
    assert np.all(below > 0.0) and np.all(above < 0.0)
    lo, hi = normalised_unstable_gains(8, 64)
    for gain, unstable in (
        (lo * 0.99, False),
        (lo * 1.01, True),
        (hi * 0.99, True),
        (hi * 1.01, False),
    ):
        assert np.all(_zero_sum_hessian_eigenvalues(8, 64, gain) < 0.0) == unstable
    assert normalised_critical_chunks(8, 2.0) == np.inf  # m0 <= 1: stable at every N


def _module_logits(key, ape, gain, chunks, dim, batch):
    """Logits of every phase's needle against the `DeepSeekV4` keys; (batch, s, N) and targets."""
    stride = ape.shape[0]
    eye = jnp.eye(dim)[None]
    module = DeepSeekV4(
        eye, jnp.zeros_like(eye), jnp.broadcast_to(ape[None, :, None], (1, stride, dim)), 0
    )
    kx, kc = jax.random.split(key)
    x = jax.random.normal(kx, (batch, chunks, stride, dim)) / jnp.sqrt(dim)
    target = jax.random.randint(kc, (batch,), 0, chunks)
    keys = jax.vmap(module)(x)[:, 0]
    queries = x[jnp.arange(batch), target]  # (batch, s, d): every phase of the needle chunk
    return gain * jnp.einsum("bpd,bnd->bpn", queries, keys), target, x


def _module_loss_and_needle_logits(dim, ape, gain, chunks, seed, batch=128, batches=2):
    losses, needles = [], []
    for i in range(batches):
        z, t, _ = _module_logits(jax.random.key(seed + i), ape, gain, chunks, dim, batch)
        z, t = np.asarray(z), np.asarray(t)
        onehot = np.arange(chunks)[None, None, :] == t[:, None, None]
        losses.append(np.sum((np.asarray(jax.nn.softmax(z, axis=-1)) - onehot) ** 2, axis=-1))
        needles.append(z[np.arange(len(t)), :, t])  # (batch, s)
    return np.concatenate(losses).mean(), np.concatenate(needles).mean(0)


@pytest.mark.slow
def test_infinite_d_logits_and_loss_match_the_module():
    chunks, gain = 8, 16.0
    ape = jnp.array([1.0, 0.5, 0.0, -0.3, 0.2, -1.0, 0.7, 0.1])
    m = np.asarray(normalised_needle_logit(ape[None], jnp.array([gain])))[0]
    loss_1024, needle = _module_loss_and_needle_logits(1024, ape, gain, chunks, seed=0)
    np.testing.assert_allclose(needle, m, atol=LOGIT_ATOL)
    # The loss's finite-d correction is O(1/d) (0.017 at d = 1024, 0.067 at d = 256): the
    # Richardson extrapolation of the two removes it.
    loss_256, _ = _module_loss_and_needle_logits(256, ape, gain, chunks, seed=10)
    reduced = float(normalised_reduced_loss(ape[None], jnp.array([gain]), chunks))
    np.testing.assert_allclose((4.0 * loss_1024 - loss_256) / 3.0, reduced, atol=LOSS_ATOL)


def test_finite_d_uniform_accuracy_matches_the_module():
    stride, chunks, dim, gain = 8, 64, 64, 16.0
    hits, mean_hits = [], []
    for i in range(4):
        z, t, x = _module_logits(jax.random.key(10 + i), jnp.zeros(stride), gain, chunks, dim, 128)
        queries = x[jnp.arange(len(t)), t]
        zm = jnp.einsum("bpd,bnd->bpn", queries, jnp.mean(x, axis=2))
        hits.append(np.asarray(jnp.argmax(z, -1) == t[:, None]))
        mean_hits.append(np.asarray(jnp.argmax(zm, -1) == t[:, None]))
    hits, mean_hits = np.concatenate(hits), np.concatenate(mean_hits)
    predicted = normalised_phase_accuracy(np.full(stride, 1 / stride), chunks, dim)
    unnormalised = phase_accuracy(np.full(stride, 1 / stride), gain, chunks, dim)
    np.testing.assert_allclose(hits.mean(), predicted.mean(), atol=ACC_ATOL)
    np.testing.assert_allclose(
        hits.mean() - mean_hits.mean(), predicted.mean() - unnormalised.mean(), atol=GAP_ATOL
    )

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy import compression
from weakspots.idealized.toy.config import ModelConfig

N, S, D = 5, 4, 6


@pytest.fixture
def keys():
    return jax.random.normal(jax.random.key(0), (N, S, D), jnp.float64)


def test_softmax_pool_limits(keys):
    np.testing.assert_allclose(compression.softmax_pool(keys, jnp.zeros(S)), keys.mean(axis=1))
    sharp = jnp.array([0.0, 60.0, 0.0, 0.0])
    np.testing.assert_allclose(compression.softmax_pool(keys, sharp), keys[:, 1], atol=1e-12)


def test_linear_low_rank_max_against_loops(keys):
    w = jnp.array([0.1, -0.5, 2.0, 0.3])
    expected = sum(w[j] * keys[:, j] for j in range(S))
    np.testing.assert_allclose(compression.linear_pool(keys, w), expected, atol=1e-12)

    rng = np.random.default_rng(0)
    left, right = rng.normal(size=(S, D, 2)), rng.normal(size=(S, D, 2))
    maps = [np.eye(D) / S + right[j] @ left[j].T for j in range(S)]
    expected = sum(np.asarray(keys[:, j]) @ maps[j] for j in range(S))
    np.testing.assert_allclose(compression.low_rank(keys, left, right), expected, atol=1e-12)

    proj = rng.normal(size=(D, D))
    expected = np.max(np.stack([np.asarray(keys[:, j]) @ proj for j in range(S)]), axis=0)
    np.testing.assert_allclose(compression.max_pool(keys, proj), expected, atol=1e-12)


@pytest.mark.parametrize(
    "operator", ["softmax_pool", "mean_pool", "linear", "max_pool", "low_rank", "deepseek_v4"]
)
def test_compressors_shape_and_uniform_start(keys, operator):
    config = ModelConfig(stride=S, chunks=N, dim=D, heads=3, operator=operator)
    comp = compression.init_compressor(jax.random.key(1), config, 0.0, jnp.float64)
    out = comp(keys)
    assert out.shape == (3, N, D)
    weights = comp.pooling_weights()
    if operator != "max_pool":
        # Every operator except max_pool starts at uniform pooling when init_scale = 0;
        # DeepSeek-V4 at ratio 4 spreads it over a window of 2s tokens, s of them its own.
        window = 2 * S if operator == "deepseek_v4" and S == 4 else S
        np.testing.assert_allclose(weights, np.full((3, S), 1 / window), atol=1e-12)
    if comp.phase_weighted:
        expected = np.einsum("hj,cjd->hcd", comp.phase_weights(), keys)
        np.testing.assert_allclose(out, expected, atol=1e-12)
    if operator == "low_rank":
        np.testing.assert_allclose(out, np.broadcast_to(keys.mean(axis=1), out.shape), atol=1e-12)


def test_deepseek_at_ratio_8_is_normalised_softmax_pooling(keys):
    # With no gate and channel-constant ape, DeepSeek-V4's compressor is RMSNorm(softmax_pool).
    config = ModelConfig(stride=S + 4, chunks=N, dim=D, heads=2, operator="deepseek_v4")
    x = jax.random.normal(jax.random.key(2), (N, S + 4, D), jnp.float64)
    comp = compression.init_compressor(jax.random.key(3), config, 0.5, jnp.float64)
    logits = comp.ape[:, :, 0]
    pooled = jax.vmap(compression.softmax_pool, in_axes=(None, 0))(x, logits)
    rms = jnp.sqrt(jnp.mean(pooled**2, axis=-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(comp(x), pooled / rms / jnp.sqrt(D), rtol=1e-6)
    np.testing.assert_allclose(comp.pooling_weights(), jax.nn.softmax(logits, axis=-1), atol=1e-12)


def test_low_rank_flat_product_equals_factored_form():
    """The stacked-map product (the fast form) against the factored sum, values and gradients."""
    rng = np.random.default_rng(4)
    left, right = (jnp.asarray(rng.normal(size=(S, D, 3))) for _ in range(2))
    keys = jnp.asarray(rng.normal(size=(N, S, D)))
    probe = jnp.asarray(rng.normal(size=(N, D)))

    def factored(keys, left, right):
        return jnp.sum(keys, axis=1) / S + jnp.einsum("cjd,jdr,jer->ce", keys, right, left)

    @jax.jit  # one compilation for both forms (eager dispatch costs seconds under load)
    def both(left, right):
        def loss(form, left, right):
            return jnp.sum(probe * jnp.tanh(form(keys, left, right)))

        return [
            (form(keys, left, right), jax.grad(partial(loss, form), argnums=(0, 1))(left, right))
            for form in (compression.low_rank, factored)
        ]

    fast, plain = both(left, right)
    for f, p in zip(jax.tree.leaves(fast), jax.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(f, p, rtol=0, atol=1e-12)

"""`idealized.deepseek_v4` against a plain-loop numpy reference, plus invariants."""

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.deepseek_v4 import deepseek_v4

ATOL = 1e-10  # float64 throughout
DIM, HEAD_DIM = 5, 6


def reference(x, wkv, wgate, ape, ratio, eps=1e-6, rope_dim=0, rope_theta=10000.0):
    """DeepSeek-V4 compressor written out slot by slot, independently of the module."""
    x, wkv, wgate, ape = (np.asarray(a, dtype=np.float64) for a in (x, wkv, wgate, ape))
    T = x.shape[0]
    kv = x @ wkv
    score = x @ wgate
    overlap = ratio == 4
    head_dim = wkv.shape[1] // 2 if overlap else wkv.shape[1]
    out = np.zeros((T // ratio, head_dim))
    for c in range(T // ratio):
        pooled = np.zeros(head_dim)
        for ch in range(head_dim):
            slots = []  # (score, value) of every window slot for this output channel
            if overlap:
                for p in range(ratio):
                    if c == 0:
                        slots.append((-math.inf, 0.0))
                    else:
                        t = (c - 1) * ratio + p
                        slots.append((score[t, ch] + ape[p, ch], kv[t, ch]))
                for p in range(ratio):
                    t = c * ratio + p
                    col = head_dim + ch
                    slots.append((score[t, col] + ape[p, col], kv[t, col]))
            else:
                for p in range(ratio):
                    t = c * ratio + p
                    slots.append((score[t, ch] + ape[p, ch], kv[t, ch]))
            top = max(s for s, _ in slots)
            z = sum(math.exp(s - top) for s, _ in slots)
            pooled[ch] = sum(math.exp(s - top) / z * v for s, v in slots)
        ms = sum(v * v for v in pooled) / head_dim
        normed = [v / math.sqrt(ms + eps) for v in pooled]
        start = head_dim - rope_dim
        pos = c * ratio
        for i in range(rope_dim // 2):
            a, b = normed[start + 2 * i], normed[start + 2 * i + 1]
            angle = pos * rope_theta ** (-2 * i / rope_dim)
            normed[start + 2 * i] = a * math.cos(angle) - b * math.sin(angle)
            normed[start + 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
        out[c] = normed
    return out


def make_inputs(ratio, n_blocks=5, seed=0):
    rng = np.random.default_rng(seed)
    coff = 2 if ratio == 4 else 1
    x = rng.standard_normal((n_blocks * ratio, DIM))
    wkv = rng.standard_normal((DIM, coff * HEAD_DIM))
    wgate = rng.standard_normal((DIM, coff * HEAD_DIM))
    ape = rng.standard_normal((ratio, coff * HEAD_DIM))
    return x, wkv, wgate, ape


@pytest.mark.parametrize("ratio", [4, 8, 2])
@pytest.mark.parametrize("rope_dim", [0, 4, HEAD_DIM])
def test_matches_loop_reference(ratio, rope_dim):
    x, wkv, wgate, ape = make_inputs(ratio, seed=ratio + rope_dim)
    got = deepseek_v4(
        jnp.asarray(x), jnp.asarray(wkv), jnp.asarray(wgate), jnp.asarray(ape),
        ratio=ratio, rope_dim=rope_dim, rope_theta=7.0,
    )  # fmt: skip
    assert got.dtype == jnp.float64
    want = reference(x, wkv, wgate, ape, ratio, rope_dim=rope_dim, rope_theta=7.0)
    assert got.shape == want.shape == (5, HEAD_DIM)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=ATOL)


def test_overlap_first_block_sees_only_its_own_tokens():
    x, wkv, wgate, ape = make_inputs(4, n_blocks=3)
    base = deepseek_v4(x, wkv, wgate, ape, ratio=4)
    x2 = x.copy()
    x2[4:] += 10.0  # perturb every token after block 0
    moved = deepseek_v4(x2, wkv, wgate, ape, ratio=4)
    np.testing.assert_allclose(moved[0], base[0], rtol=0, atol=ATOL)
    assert not np.allclose(moved[1], base[1])  # block 1 does see block 0 and its own tokens
    x3 = x.copy()
    x3[:4] += 10.0  # perturb block 0 only: block 1 changes through its previous-block slots
    moved = deepseek_v4(x3, wkv, wgate, ape, ratio=4)
    assert not np.allclose(moved[1], base[1])
    np.testing.assert_allclose(moved[2], base[2], rtol=0, atol=ATOL)


@pytest.mark.parametrize("ratio", [2, 3, 8])
def test_zero_gate_constant_ape_is_rmsnormed_softmax_pooling(ratio):
    x, wkv, _, _ = make_inputs(ratio, seed=1)
    a = np.random.default_rng(2).standard_normal(ratio)
    ape = np.repeat(a[:, None], HEAD_DIM, axis=1)
    got = deepseek_v4(x, wkv, np.zeros_like(wkv), ape, ratio=ratio, eps=1e-6)
    alpha = np.exp(a - a.max()) / np.exp(a - a.max()).sum()
    keys = np.einsum("j,cjd->cd", alpha, (x @ wkv).reshape(-1, ratio, HEAD_DIM))
    want = keys / np.sqrt((keys**2).mean(axis=1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("ratio", [4, 8])
def test_jit_and_vmap_agree_with_plain_call(ratio):
    batch = [make_inputs(ratio, seed=s) for s in range(3)]
    stacked = [jnp.stack([b[i] for b in batch]) for i in range(4)]
    kwargs = dict(ratio=ratio, rope_dim=2)
    plain = np.stack([np.asarray(deepseek_v4(*b, **kwargs)) for b in batch])

    @eqx.debug.assert_max_traces(max_traces=1)
    def compress(x, wkv, wgate, ape):
        return deepseek_v4(x, wkv, wgate, ape, **kwargs)

    jitted = jax.jit(compress)
    np.testing.assert_allclose(jitted(*batch[0]), plain[0], rtol=0, atol=ATOL)
    jitted(*batch[1])  # same shapes: no retrace
    vmapped = jax.vmap(jax.jit(lambda *a: deepseek_v4(*a, **kwargs)))(*stacked)
    np.testing.assert_allclose(vmapped, plain, rtol=0, atol=ATOL)


@pytest.mark.parametrize("ratio", [4, 8])
def test_gradients_are_finite_and_match_finite_differences(ratio):
    x, wkv, wgate, ape = (jnp.asarray(a) for a in make_inputs(ratio, n_blocks=3))
    probe = jnp.asarray(np.random.default_rng(3).standard_normal((3, HEAD_DIM)))

    @jax.jit
    def loss(x, wkv, wgate, ape):
        return jnp.sum(probe * deepseek_v4(x, wkv, wgate, ape, ratio=ratio, rope_dim=2))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))(x, wkv, wgate, ape)
    args = [x, wkv, wgate, ape]
    for i, g in enumerate(grads):
        assert np.all(np.isfinite(g))
        direction = jnp.asarray(np.random.default_rng(10 + i).standard_normal(g.shape))
        h = 1e-6
        plus = list(args)
        minus = list(args)
        plus[i] = args[i] + h * direction
        minus[i] = args[i] - h * direction
        fd = (loss(*plus) - loss(*minus)) / (2 * h)
        np.testing.assert_allclose(jnp.sum(g * direction), fd, rtol=1e-6, atol=1e-8)


def test_bad_token_count_names_ratio_and_T():
    x, wkv, wgate, ape = make_inputs(8, n_blocks=2)
    with pytest.raises(ValueError, match=r"T = 15.*ratio = 8"):
        deepseek_v4(x[:15], wkv, wgate, ape, ratio=8)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(wkv=np.zeros((DIM, HEAD_DIM + 1))), "wkv"),
        (dict(wgate=np.zeros((DIM, HEAD_DIM))), "wgate"),
        (dict(ape=np.zeros((3, HEAD_DIM * 2))), "ape"),
        (dict(rope_dim=3), "rope_dim"),
        (dict(rope_dim=HEAD_DIM + 2), "rope_dim"),
    ],
)
def test_bad_shapes_raise(change, message):
    x, wkv, wgate, ape = make_inputs(4, n_blocks=2)
    kwargs = dict(x=x, wkv=wkv, wgate=wgate, ape=ape, ratio=4) | change
    with pytest.raises(ValueError, match=message):
        deepseek_v4(**kwargs)


def test_window_pool_ratio_form_equals_softmax_then_sum():
    """`sum e kv / sum e` (the fast form) against softmax then sum, -inf masks included."""
    from weakspots.idealized.deepseek_v4 import _window_pool

    rng = np.random.default_rng(5)
    score = rng.standard_normal((3, 8, HEAD_DIM)) * 4.0
    score[0, :4] = -np.inf  # block 0's masked previous-block slots
    kv = rng.standard_normal((3, 8, HEAD_DIM))
    kv[0, :4] = 0.0
    probe = jnp.asarray(rng.standard_normal((3, HEAD_DIM)))

    def softmax_form(score, kv):
        return jnp.sum(jax.nn.softmax(score, axis=1) * kv, axis=1)

    @jax.jit  # one compilation for both forms
    def both(score, kv):
        def loss(form, score, kv):
            return jnp.sum(probe * jnp.tanh(form(score, kv)))

        return [
            (
                form(score, kv),
                jax.grad(lambda s, v, f=form: loss(f, s, v), argnums=(0, 1))(score, kv),
            )
            for form in (_window_pool, softmax_form)
        ]

    fast, plain = both(jnp.asarray(score), jnp.asarray(kv))
    for f, p in zip(jax.tree.leaves(fast), jax.tree.leaves(plain), strict=True):
        assert np.all(np.isfinite(f))
        np.testing.assert_allclose(f, p, rtol=0, atol=ATOL)

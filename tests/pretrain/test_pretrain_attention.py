"""The attention kinds against explicit numpy references: per-window pooling, visibility, GQA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.pretrain import attention as A
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.toy.config import ConfigError

RTOL, ATOL = 2e-4, 2e-5  # float32 model against a float64 reference

SMALL = dict(vocab=11, d_model=16, heads=4, kv_heads=2, head_dim=8, mlp_hidden=16, layers=1)


def config(**changes) -> PretrainConfig:
    return PretrainConfig(**{**SMALL, "seq_len": 24, "window": 4, "stride": 4,
                             "local_window": 3, "attention": "compressed", **changes})  # fmt: skip


def layer(cfg: PretrainConfig, seed: int = 0) -> A.AbstractAttentionKind:
    module = A.lookup(cfg.attention)(cfg, rngs=nnx.Rngs(seed))
    # Give the gate biases and norm scales values other than their initial 0 and 1.
    for path, value in nnx.to_flat_state(nnx.state(module, nnx.Param)):
        if path[-1] in ("gate_bias", "scale"):
            key = jax.random.key(hash(path) % 1000)
            value.set_value(value.get_value() + 0.3 * jax.random.normal(key, value.shape))
    return module


def inputs(cfg: PretrainConfig, seed: int = 1) -> np.ndarray:
    return np.asarray(jax.random.normal(jax.random.key(seed), (2, cfg.seq_len, cfg.d_model)),
                      np.float32)  # fmt: skip


def p(x) -> np.ndarray:
    return np.asarray(x[...], np.float64)


def rms(y, scale):
    return y / np.sqrt(np.mean(y**2, axis=-1, keepdims=True) + A.NORM_EPS) * scale


def rope(y, position, rope_dim, theta):
    """Rotate-half RoPE of one row `(..., hd)` at `position`, pair by pair."""
    out = np.array(y, dtype=np.float64)
    half = rope_dim // 2
    for c in range(half):
        angle = position * theta ** (-2 * c / rope_dim)
        a, b = y[..., c], y[..., c + half]
        out[..., c] = a * np.cos(angle) - b * np.sin(angle)
        out[..., c + half] = b * np.cos(angle) + a * np.sin(angle)
    return out


def pooled(branch: A.WindowPooling, h: np.ndarray, cfg: PretrainConfig) -> np.ndarray:
    """`K_j = sum_i alpha_{j,i} C_i h_{jS+i}`, window by window, offset by offset: `(C, G, hd)`."""
    g, hd = cfg.kv_heads, cfg.head_dim
    out = np.zeros((cfg.entries, g, hd))
    for j in range(cfg.entries):
        rows = [h[j * cfg.stride + i] for i in range(cfg.window)]
        payload = np.stack([rows[i] @ p(branch.payload)[i] for i in range(cfg.window)])
        payload = payload.reshape(cfg.window, g, hd)
        if branch.post_norm is not None:
            payload = rms(payload, p(branch.post_norm.scale))
        if cfg.gate == "uniform":
            alpha = np.full((cfg.window, g, 1), 1 / cfg.window)
        else:
            logits = np.stack([rows[i] @ p(branch.gate)[i] for i in range(cfg.window)])
            if branch.gate_bias is not None:
                logits = logits + p(branch.gate_bias)
            alpha = np.exp(logits - logits.max(axis=0)) / np.exp(logits - logits.max(axis=0)).sum(0)
            alpha = alpha.reshape(cfg.window, g, -1)
        out[j] = np.sum(alpha * payload, axis=0)
    return out


def reference(module: A.AbstractAttentionKind, x: np.ndarray) -> np.ndarray:
    """The layer on one sequence `(T, D)`, query by query, slot by slot, in float64."""
    cfg = module.config
    T, H, G, hd, rd = cfg.seq_len, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.rotary_dim
    x = np.asarray(x, np.float64)

    def normed(y, norm):
        return y if norm is None else rms(y, p(norm.scale))

    q = normed((x @ p(module.q_proj.kernel)).reshape(T, H, hd), module.q_norm)
    q = np.stack([rope(q[t], t, rd, cfg.rope_theta) for t in range(T)])
    k = normed((x @ p(module.exact.k_proj.kernel)).reshape(T, G, hd), module.k_norm)
    k = np.stack([rope(k[u], u, rd, cfg.rope_theta) for u in range(T)])
    v = k if module.exact.v_proj is None else (x @ p(module.exact.v_proj.kernel)).reshape(T, G, hd)
    slots = []  # (key, value, visible(t))
    if cfg.attention == "full":
        slots += [(k[u], v[u], lambda t, u=u: u <= t) for u in range(T)]
    else:
        ek = normed(pooled(module.key_pooling, x, cfg), module.k_norm)
        ek = np.stack([rope(ek[j], j * cfg.stride, rd, cfg.rope_theta) for j in range(cfg.entries)])
        ev = ek if module.value_pooling is None else pooled(module.value_pooling, x, cfg)
        complete = lambda t, j: j * cfg.stride + cfg.window - 1 <= t  # noqa: E731
        slots += [(ek[j], ev[j], lambda t, j=j: complete(t, j)) for j in range(cfg.entries)]

        def exact(t, u):
            if cfg.local == "window":
                return t - u < cfg.local_window
            covered = [
                j * cfg.stride + cfg.window - 1 for j in range(cfg.entries) if complete(t, j)
            ]
            return u > max(covered, default=-1)

        slots += [(k[u], v[u], lambda t, u=u: u <= t and exact(t, u)) for u in range(T)]
    out = np.zeros((T, H, hd))
    for t in range(T):
        seen = [(key, value) for key, value, visible in slots if visible(t)]
        for h in range(H):
            g = h // (H // G)
            scores = np.array([q[t, h] @ key[g] for key, _ in seen]) / np.sqrt(hd)
            w = np.exp(scores - scores.max())
            w /= w.sum()
            out[t, h] = sum(wi * value[g] for wi, (_, value) in zip(w, seen, strict=True))
    return out.reshape(T, H * hd) @ p(module.o_proj.kernel)


VARIANTS = {
    "full": dict(attention="full"),
    "full_1kv": dict(attention="full", kv_heads=1),
    "w4s4": dict(),
    "w4s2_overlap": dict(stride=2),
    "vector_gates": dict(gate="vector", stride=3),
    "uniform": dict(gate="uniform"),
    "no_gate_bias": dict(gate_bias=False),
    "tied_kv": dict(tied_kv=True),
    "no_qk_norm_partial_rope": dict(qk_norm=False, rope_dim=4),
    "no_rope": dict(rope_dim=0),
    "post_norm": dict(post_norm=True),
    "tail": dict(local="tail", stride=2, window=5),
    "tail_w4": dict(local="tail"),
    "1kv": dict(kv_heads=1),
}


DEFAULT_VARIANTS = ("full_1kv", "w4s2_overlap", "vector_gates", "tail", "tied_kv")


@pytest.mark.parametrize(
    "variant",
    [
        v if v in DEFAULT_VARIANTS else pytest.param(v, marks=pytest.mark.slow)
        for v in sorted(VARIANTS)
    ],
)
def test_layer_equals_numpy_reference(variant):
    cfg = config(**VARIANTS[variant])
    module = layer(cfg)
    x = inputs(cfg)
    got = np.asarray(module(jnp.asarray(x)))
    for b in range(x.shape[0]):
        np.testing.assert_allclose(got[b], reference(module, x[b]), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    ("gate", "stride"),
    [("scalar", 4), ("vector", 3), pytest.param("uniform", 4, marks=pytest.mark.slow),
     pytest.param("scalar", 3, marks=pytest.mark.slow)],
)  # fmt: skip
def test_entries_equal_per_window_pooling(gate, stride):
    cfg = config(gate=gate, stride=stride, post_norm=gate == "vector")
    module = layer(cfg)
    x = inputs(cfg)
    keys, values = module.entries(jnp.asarray(x))
    ek = pooled(module.key_pooling, np.asarray(x[0], np.float64), cfg)
    ek = rms(ek, p(module.k_norm.scale))
    ek = np.stack(
        [rope(ek[j], j * stride, cfg.rotary_dim, cfg.rope_theta) for j in range(cfg.entries)]
    )
    np.testing.assert_allclose(np.asarray(keys[0]), ek, rtol=RTOL, atol=ATOL)
    ev = pooled(module.value_pooling, np.asarray(x[0], np.float64), cfg)
    np.testing.assert_allclose(np.asarray(values[0]), ev, rtol=RTOL, atol=ATOL)


def test_uniform_averaging_is_the_mean_of_payloads():
    cfg = config(gate="uniform")
    module = layer(cfg)
    x = jnp.asarray(inputs(cfg))
    windows = A.windows_of(x, cfg)
    payloads = jnp.einsum("bcwd,wde->bcwe", windows, module.value_pooling.payload[...])
    mean = jnp.mean(payloads, axis=2).reshape(*payloads.shape[:2], cfg.kv_heads, cfg.head_dim)
    np.testing.assert_allclose(module.value_pooling(windows), mean, rtol=1e-5, atol=1e-6)


def test_one_kv_head_equals_repeated_kv():
    key = jax.random.split(jax.random.key(3), 3)
    q = jax.random.normal(key[0], (2, 10, 4, 8), jnp.float32)
    k = jax.random.normal(key[1], (2, 10, 1, 8), jnp.float32)
    v = jax.random.normal(key[2], (2, 10, 1, 8), jnp.float32)
    mask = A.causal_visibility(10)
    shared = A.grouped_attention(q, [(k, v, mask)])
    repeated = A.grouped_attention(q, [(jnp.repeat(k, 4, 2), jnp.repeat(v, 4, 2), mask)])
    np.testing.assert_allclose(shared, repeated, rtol=1e-6, atol=1e-6)


def test_window_one_stride_one_tail_is_full_attention():
    """W = S = 1, uniform gates, payload maps = the token projections, local = tail: every
    token is its own entry, rotated to its own position, and no exact token is read twice."""
    full_cfg = config(attention="full")
    comp_cfg = config(window=1, stride=1, gate="uniform", local="tail")
    full, comp = layer(full_cfg), layer(comp_cfg, seed=5)
    for name in ("q_proj", "o_proj"):
        getattr(comp, name).kernel.set_value(getattr(full, name).kernel[...])
    for name in ("q_norm", "k_norm"):
        getattr(comp, name).scale.set_value(getattr(full, name).scale[...])
    comp.key_pooling.payload.set_value(full.exact.k_proj.kernel[...][None])
    comp.value_pooling.payload.set_value(full.exact.v_proj.kernel[...][None])
    x = jnp.asarray(inputs(full_cfg))
    np.testing.assert_allclose(comp(x), full(x), rtol=1e-5, atol=1e-6)
    assert not np.any(np.asarray(A.exact_visibility(comp_cfg)))  # every token is an entry


@pytest.mark.parametrize("variant", ["full", "w4s2_overlap", "tail", "vector_gates", "tied_kv"])
def test_no_information_from_the_future(variant):
    """Perturbing the input at t' changes no output before t' (and does change one at t')."""
    cfg = config(**VARIANTS[variant])
    module = layer(cfg)
    x = inputs(cfg)
    base = np.asarray(module(jnp.asarray(x)))
    for later in range(cfg.seq_len):
        moved = x.copy()
        moved[:, later] += 1.5
        out = np.asarray(module(jnp.asarray(moved)))
        np.testing.assert_array_equal(out[:, :later], base[:, :later])
        assert np.abs(out[:, later] - base[:, later]).max() > 1e-4


def test_visibility_rules():
    cfg = config(window=5, stride=2, local="tail")
    vis = np.asarray(A.entry_visibility(cfg))
    for t in range(cfg.seq_len):
        for j in range(cfg.entries):
            assert vis[t, j] == (2 * j + 4 <= t)
    assert cfg.entries == (24 - 5) // 2 + 1
    last = np.asarray(A.last_entry_token(cfg))
    assert last[3] == -1 and last[4] == 4 and last[5] == 4 and last[6] == 6


def test_kinds_and_facts():
    assert A.kind_names() == ("full", "compressed")
    assert A.lookup("compressed").facts(config(stride=2))["overlap"] is True
    assert A.lookup("full").reads == ("tokens",)
    with pytest.raises(ConfigError, match="--kv-heads"):
        config(kv_heads=3)
    with pytest.raises(ConfigError, match="--stride"):
        config(stride=5)


@pytest.mark.parametrize("variant", ["full", "w4s2_overlap", "tail"])
def test_any_length_reads_as_a_prefix(variant):
    """A sequence shorter or longer than `seq_len` runs; a prefix's outputs are those of the
    longer sequence at the same positions."""
    cfg = config(**VARIANTS[variant])
    module = layer(cfg)
    x = jnp.asarray(inputs(cfg.replace(seq_len=30)))
    longer, shorter = module(x), module(x[:, :13])
    np.testing.assert_allclose(shorter, longer[:, :13], rtol=1e-5, atol=1e-6)

"""The compressed kind's exact tokens, read block by block (`attention.Band`), against the
dense `T x T` product they replaced, and `forward_flops` against the jaxpr's matmuls."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixtures import jaxpr_dot_flops
from flax import nnx

from weakspots.idealized.pretrain import attention as A
from weakspots.idealized.pretrain.config import PretrainConfig

RTOL, ATOL = 1e-5, 1e-6  # float32, two summation orders

SMALL = dict(vocab=11, d_model=16, heads=4, kv_heads=2, head_dim=8, mlp_hidden=16, layers=1,
             attention="compressed", window=4, stride=4, local_window=5)  # fmt: skip

CASES = {  # T not a multiple of the band, T below it, overlap, the tail, one KV head
    "window_T23": dict(seq_len=23),
    "window_T4_below_band": dict(seq_len=4, local_window=6),
    "window_T5_equal_band": dict(seq_len=5),
    "overlap_T19": dict(seq_len=19, stride=2, local_window=7),
    "tail_T21": dict(seq_len=21, local="tail", window=5, stride=2),
    "tail_T6": dict(seq_len=6, local="tail"),
    "1kv_vector_T17": dict(seq_len=17, kv_heads=1, gate="vector", local_window=16),
}


DEFAULT_CASES = ("window_T23", "window_T4_below_band", "overlap_T19", "tail_T6")


def cases():
    """Every case; those beyond `DEFAULT_CASES` marked slow (they still run in CI)."""
    return [
        c if c in DEFAULT_CASES else pytest.param(c, marks=pytest.mark.slow) for c in sorted(CASES)
    ]


def layer_and_input(case: str):
    cfg = PretrainConfig(**{**SMALL, **CASES[case]})
    module = A.CompressedAttention(cfg, rngs=nnx.Rngs(3))
    x = jax.random.normal(jax.random.key(4), (2, cfg.seq_len, cfg.d_model), jnp.float32)
    return cfg, module, x


def dense_heads(module: A.CompressedAttention, x):
    """The layer's heads as computed before the band: every exact token scored, then masked."""
    cfg, length = module.config, x.shape[1]
    k, v = module.exact(x)
    k = module.normed_keys(k, jnp.arange(length))
    v = k if v is None else v
    ek, ev = module.entries(x)
    sources = [(ek, ev, A.entry_visibility(cfg, length)), (k, v, A.exact_visibility(cfg, length))]
    return A.grouped_attention(module.queries(x), sources)


@pytest.mark.parametrize("case", sorted(CASES))
def test_band_reads_the_tokens_the_dense_mask_reads(case):
    """Slot m of query t holds token `(t // w - 1) w + m`; the visible slots are exactly the
    tokens `exact_visibility` marks, each once."""
    cfg, _, _ = layer_and_input(case)
    w, T = A.exact_span(cfg), cfg.seq_len
    band, dense = np.asarray(A.band_visibility(cfg)), np.asarray(A.exact_visibility(cfg))
    for t in range(T):
        read = sorted((t // w - 1) * w + m for m in range(2 * w) if band[t, m])
        assert read == list(np.flatnonzero(dense[t])), t


@pytest.mark.parametrize("case", cases())
def test_band_equals_dense_product(case):
    cfg, module, x = layer_and_input(case)
    np.testing.assert_allclose(module.heads(x), dense_heads(module, x), rtol=RTOL, atol=ATOL)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["window_T23", "tail_T21"])
def test_band_gradients_equal_dense(case):
    cfg, module, x = layer_and_input(case)
    graph, params = nnx.split(module)
    probe = jax.random.normal(jax.random.key(5), (*x.shape[:2], cfg.heads, cfg.head_dim))

    def loss(heads_of, params, x):
        return jnp.sum(heads_of(nnx.merge(graph, params), x) * probe)

    banded = jax.grad(lambda p, x: loss(lambda m, y: m.heads(y), p, x), argnums=(0, 1))(params, x)
    dense = jax.grad(lambda p, x: loss(dense_heads, p, x), argnums=(0, 1))(params, x)
    for got, want in zip(jax.tree.leaves(banded), jax.tree.leaves(dense), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "changes",
    [dict(attention="full", seq_len=23), dict(seq_len=23), dict(seq_len=21, local="tail",
     window=5, stride=2), dict(seq_len=17, gate="vector", tied_kv=True), dict(seq_len=16,
     gate="uniform")],
)  # fmt: skip
def test_forward_flops_count_the_matmuls_computed(changes):
    cfg = PretrainConfig(**{**SMALL, **changes})
    module = A.lookup(cfg.attention)(cfg, rngs=nnx.Rngs(0))
    x = jnp.zeros((1, cfg.seq_len, cfg.d_model), jnp.float32)
    counted = jaxpr_dot_flops(lambda y: module(y), x)
    assert A.lookup(cfg.attention).forward_flops(cfg) == counted

"""`weakspots.interop.hf`: the project's V4 layer, loaded with the weights of transformers'
`DeepseekV4Attention`, returns what that module's forward returns (random weights, tiny
configs: CSA and HCA layers, T not a multiple of the ratio, top-k below the visible
entries, several head counts), within 1e-4 of the output's scale."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="fidelity tests need the [hf] extra (torch)")
pytest.importorskip("transformers.models.deepseek_v4", reason="needs transformers >= 5.24 ([hf])")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from flax import nnx  # noqa: E402
from transformers import DeepseekV4Config  # noqa: E402
from transformers.masking_utils import create_sliding_window_causal_mask  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf  # noqa: E402

from weakspots.idealized.decoder.attention import compressed_visibility  # noqa: E402
from weakspots.interop.hf import attention_from_hf, layer_from_hf  # noqa: E402

LAYER_TYPES = ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"]
TOLERANCE = 1e-4  # of the output's scale (max |output|); float32 on both sides


def config(heads: int, topk: int, *, window: int = 5, hca: int = 8) -> DeepseekV4Config:
    cfg = DeepseekV4Config(
        vocab_size=16,
        hidden_size=32,
        num_attention_heads=heads,
        head_dim=16,
        q_lora_rank=8,
        o_groups=2,
        o_lora_rank=8,
        index_n_heads=4,
        index_head_dim=8,
        index_topk=topk,
        sliding_window=window,
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": hca},
        num_hidden_layers=3,
        layer_types=LAYER_TYPES,
        partial_rotary_factor=0.5,
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=8,
    )
    cfg._attn_implementation = "eager"
    return cfg


def hf_forward(cfg: DeepseekV4Config, layer_idx: int, length: int, seed: int):
    """A random-weight HF attention layer, its output on random hidden states, and its weights.

    The inputs are what `DeepseekV4Model.forward` hands each layer: both rotary tables,
    positions 0..T-1 and its sliding-window causal mask.
    """
    torch.manual_seed(seed)
    attn = hf.DeepseekV4Attention(cfg, layer_idx).eval()
    with torch.no_grad():
        for param in attn.parameters():
            param.normal_(0.0, 0.3)
        x = torch.randn(1, length, cfg.hidden_size)
        positions = torch.arange(length)[None]
        rotary = hf.DeepseekV4RotaryEmbedding(cfg)
        tables = {k: rotary(x, positions, layer_type=k) for k in ("main", "compress")}
        mask = create_sliding_window_causal_mask(
            config=cfg, inputs_embeds=x, attention_mask=None, cache=None, position_ids=positions
        )
        out, _ = attn(x, position_embeddings=tables, position_ids=positions, attention_mask=mask)
    state = {k: v.numpy() for k, v in attn.state_dict().items()}
    return x[0].numpy(), out[0].numpy(), state


CASES = [  # (layer type index, heads, T, index_topk)
    (1, 2, 19, 2),
    (1, 4, 30, 3),
    (1, 8, 23, 1),
    (2, 4, 21, 2),
    (2, 2, 35, 2),
    (0, 4, 19, 2),
]


@pytest.mark.parametrize(("layer_idx", "heads", "length", "topk"), CASES)
def test_agrees_with_transformers(layer_idx, heads, length, topk):
    cfg = config(heads, topk)
    x, expected, state = hf_forward(cfg, layer_idx, length, seed=heads * 100 + length)
    got = attention_from_hf(cfg.to_dict(), state, layer_idx)(x)
    scale = np.abs(expected).max()
    assert got.shape == expected.shape == (length, cfg.hidden_size)
    assert np.abs(got - expected).max() <= TOLERANCE * scale


@pytest.mark.parametrize(("heads", "length", "topk"), [(2, 19, 2), (4, 30, 3)])
def test_top_k_is_exercised(heads, length, topk):
    """Preconditions of the CSA cases: some query sees more entries than it keeps, no score
    near-tie at the cut can flip the choice, and the choice changes HF's output by much more
    than the tolerance (so the agreement above checks the indexer)."""
    cfg = config(heads, topk)
    x, expected, state = hf_forward(cfg, 1, length, seed=heads * 100 + length)
    visible = np.asarray(compressed_visibility(length, 4))
    assert visible.sum(-1).max() > topk
    graph, params = nnx.split(layer_from_hf(cfg.to_dict(), state, 1))

    @jax.jit
    def index_scores(params, x):
        layer = nnx.merge(graph, params)
        return layer.indexer(x, layer.q_a_norm(layer.q_a(x)))

    scores = np.asarray(index_scores(params, jnp.asarray(x)[None]))[0]
    for t in np.flatnonzero(visible.sum(-1) > topk):
        ranked = np.sort(scores[t][visible[t]])[::-1]
        assert ranked[topk - 1] - ranked[topk] > 1e-4 * np.abs(ranked).max()
    _, dense, _ = hf_forward(config(heads, 64), 1, length, seed=heads * 100 + length)
    assert np.abs(dense - expected).max() > 100 * TOLERANCE * np.abs(expected).max()

"""The full-attention backbone against HF transformers' Qwen3 with the same weights."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.model import Backbone, forward_flops

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from weakspots.benchmarks import pretrain_step  # noqa: E402

CONFIG = PretrainConfig(vocab=37, d_model=32, layers=2, heads=4, kv_heads=2, head_dim=16,
                        mlp_hidden=48, seq_len=20, rope_theta=10000.0)  # fmt: skip


def hf_model(config: PretrainConfig):
    return pretrain_step.hf_model(config).eval()


def copy_weights(model: Backbone, hf) -> None:
    """Our Linear kernels are `(in, out)`, torch's weights `(out, in)`; names match HF's."""
    ours = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    for name, tensor in hf.named_parameters():
        parts = name.split(".")
        if parts[0] == "model":
            parts = parts[1:]
        leaf = {"weight": "kernel"}.get(parts[-1], parts[-1])
        if parts[-2].endswith("norm") or parts[-2].endswith("layernorm"):
            leaf = "scale"
        if parts[0] == "embed_tokens":
            leaf = "embedding"
        path = tuple(int(s) if s.isdigit() else s for s in parts[:-1]) + (leaf,)
        if path not in ours and path[2] == "self_attn" and path[3] in ("k_proj", "v_proj"):
            path = path[:3] + ("exact",) + path[3:]
        value = tensor.detach().numpy()
        value = value.T if leaf == "kernel" else value
        ours[path].set_value(jnp.asarray(value, jnp.float32))


def test_full_attention_backbone_equals_hf_qwen3():
    torch.manual_seed(0)
    hf = hf_model(CONFIG)
    with torch.no_grad():  # non-trivial norm scales, so a missed norm would show
        for name, tensor in hf.named_parameters():
            if "norm" in name:
                tensor.add_(0.3 * torch.randn_like(tensor))
    model = Backbone(CONFIG, rngs=nnx.Rngs(0))
    copy_weights(model, hf)
    tokens = np.array(jax.random.randint(jax.random.key(1), (2, CONFIG.seq_len), 0, CONFIG.vocab))
    ours = np.asarray(model(jnp.asarray(tokens, jnp.int32)))
    with torch.no_grad():
        theirs = hf(torch.as_tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_forward_flops_counts_the_matmuls():
    """`2 m n k` per product, summed by hand for the full kind."""
    c = CONFIG
    t, d, h, g, hd, f = c.seq_len, c.d_model, c.heads, c.kv_heads, c.head_dim, c.mlp_hidden
    layer = 2 * t * d * (2 * h * hd + 2 * g * hd) + 2 * 2 * t * t * h * hd + 3 * 2 * t * d * f
    assert forward_flops(c) == c.layers * layer + 2 * t * d * c.vocab


def test_bench_step_starts_from_hf_loss():
    """The bench's two trainers start from the same weights: equal losses at step 0."""
    from weakspots.benchmarks import pretrain_step

    result = pretrain_step.run(pretrain_step.TINY)
    assert result["loss_step0_rel_diff"] < 1e-5
    assert set(result["targets"]) == {"pretrain_vs_hf_step_speedup", "pretrain_flop_utilisation"}
    assert result["pretrain_vs_hf_step_speedup"] > 0 and result["pretrain_flop_utilisation"] > 0

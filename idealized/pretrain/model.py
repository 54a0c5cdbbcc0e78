"""The Qwen3-shaped backbone: embeddings, pre-norm blocks (attention kind, SwiGLU), final norm, head.

`Backbone(config, rngs=...)` maps `(B, T)` token ids to `(B, T, vocab)` next-token logits.
Block: `x + attention(input_layernorm(x))`, then `x + mlp(post_attention_layernorm(x))`,
with the attention of kind `config.attention` (`idealized.pretrain.attention`). Names follow
HF's `Qwen3ForCausalLM`, so its weights map one to one (`tests/pretrain`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from weakspots.idealized.pretrain.attention import linear, lookup, normal, rms_norm
from weakspots.idealized.pretrain.config import PretrainConfig


class SwiGLU(nnx.Module):
    """`down(silu(gate(x)) * up(x))`."""

    def __init__(self, d_model: int, hidden: int, *, rngs: nnx.Rngs):
        self.gate_proj = linear(d_model, hidden, rngs=rngs)
        self.up_proj = linear(d_model, hidden, rngs=rngs)
        self.down_proj = linear(hidden, d_model, rngs=rngs)

    def __call__(self, x):
        return self.down_proj(jax.nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nnx.Module):
    def __init__(self, config: PretrainConfig, *, rngs: nnx.Rngs):
        self.input_layernorm = rms_norm(config.d_model, rngs=rngs)
        self.self_attn = lookup(config.attention)(config, rngs=rngs)
        self.post_attention_layernorm = rms_norm(config.d_model, rngs=rngs)
        self.mlp = SwiGLU(config.d_model, config.mlp_hidden, rngs=rngs)

    def __call__(self, x, head_override=None):
        x = x + self.self_attn(self.input_layernorm(x), head_override)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nnx.Module):
    """`config.layers` blocks; `(B, T)` token ids to `(B, T, vocab)` logits (`vocab` resolved)."""

    def __init__(self, config: PretrainConfig, *, rngs: nnx.Rngs):
        if config.vocab < 1:
            raise ValueError("resolve the config's vocab (the tokenizer's size) before building")
        self.config = config
        self.embed_tokens = nnx.Embed(
            config.vocab, config.d_model, embedding_init=normal(), rngs=rngs
        )
        self.layers = nnx.List([Block(config, rngs=rngs) for _ in range(config.layers)])
        self.norm = rms_norm(config.d_model, rngs=rngs)
        self.lm_head = linear(config.d_model, config.vocab, rngs=rngs)

    def __call__(self, tokens: Int[Array, "B T"], head_override=None) -> Float[Array, "B T V"]:
        """`head_override = (mask (L, H), values (L, H, hd) or (L, B, H, hd))`: at the last
        position, layer l's query heads where `mask[l]` holds output `values[l]` instead
        (`attention.override_last`); None, the default, changes nothing."""
        x = self.embed_tokens(tokens)
        for layer, block in enumerate(self.layers):
            override = None
            if head_override is not None:
                override = (head_override[0][layer], head_override[1][layer])
            x = block(x, override)
        return self.lm_head(self.norm(x))

    def attention_inputs(self, tokens: Int[Array, "B T"]) -> Float[Array, "L B T D"]:
        """Every block's attention input, `input_layernorm(x)` (gates and heads read it)."""
        x = self.embed_tokens(tokens)
        inputs = []
        for block in self.layers:
            inputs.append(block.input_layernorm(x))
            x = block(x)
        return jnp.stack(inputs)


def merge(config: PretrainConfig, params: nnx.State) -> Backbone:
    """A live model from one run's parameter state (`nnx.split(model)[1]`)."""
    abstract = nnx.eval_shape(lambda: Backbone(config.static, rngs=nnx.Rngs(0)))
    return nnx.merge(nnx.split(abstract)[0], params)


def forward_flops(config: PretrainConfig) -> float:
    """Matmul FLOPs of one sequence's forward pass (attention as its kind computes it)."""
    d, t = config.d_model, config.seq_len
    mlp = 3 * 2.0 * t * d * config.mlp_hidden
    per_layer = lookup(config.attention).forward_flops(config) + mlp
    return config.layers * per_layer + 2.0 * t * d * config.vocab


def train_flops_per_step(config: PretrainConfig) -> float:
    """Model FLOPs of one training step of one run: forward and backward, 3x the forward."""
    return 3.0 * forward_flops(config) * config.batch

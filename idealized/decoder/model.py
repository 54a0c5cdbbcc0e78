"""The decoder family: token embeddings, pre-norm blocks of the registered layer kinds' attention.

`Decoder(config, rngs=...)` builds one model from a `DecoderConfig`; `Decoder(tokens)` maps
`(B, T)` token ids to `(B, T, vocab)` next-token logits. Each block is
`x + attention(norm(x))`, then `x + mlp(norm(x))` when the config has an MLP. Layers are
`decoder.blocks[i].attention` (what the layer's kind builds, `idealized.decoder.layers`: an
`idealized.decoder.attention.Attention`, or for DeepSeek-V4's kinds `swa`, `csa`, `hca` an
`idealized.decoder.v4_attention.V4Attention`): model surgery replaces
a compressor or zeroes a parameter there, and `trace` reads what every layer sowed.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Float, Int

from weakspots.idealized.decoder.attention import Attention
from weakspots.idealized.decoder.config import DecoderConfig
from weakspots.idealized.decoder.layers.registry import lookup
from weakspots.idealized.decoder.sow import sow
from weakspots.idealized.decoder.v4_attention import V4Attention


class MLP(nnx.Module):
    """`down(gelu(up(x)))` with hidden width `hidden`."""

    def __init__(self, d_model: int, hidden: int, *, rngs: nnx.Rngs):
        self.up = nnx.Linear(d_model, hidden, rngs=rngs)
        self.down = nnx.Linear(hidden, d_model, rngs=rngs)

    def __call__(self, x):
        return self.down(jax.nn.gelu(self.up(x)))


def make_attention(config: DecoderConfig, kind: str, *, rngs: nnx.Rngs) -> Attention | V4Attention:
    """The attention of one layer of `kind`, as the registered kind builds it
    (`idealized.decoder.layers`: `dense`, `sliding`, `compressed`, V4's `swa`, `csa`, `hca`)."""
    return lookup(kind).attention(config, rngs=rngs)


class Block(nnx.Module):
    def __init__(self, config: DecoderConfig, kind: str, *, rngs: nnx.Rngs):
        self.kind = kind
        self.attention_norm = nnx.RMSNorm(config.d_model, rngs=rngs)
        self.attention = make_attention(config, kind, rngs=rngs)
        if config.mlp:
            self.mlp_norm = nnx.RMSNorm(config.d_model, rngs=rngs)
            self.mlp = MLP(config.d_model, config.mlp * config.d_model, rngs=rngs)
        else:
            self.mlp_norm = self.mlp = None

    def __call__(self, x):
        x = x + self.attention(self.attention_norm(x))
        if self.mlp is not None:
            x = x + self.mlp(self.mlp_norm(x))
        sow(self, "residual", lambda: x)
        return x


class Decoder(nnx.Module):
    """A decoder of `config.layers` pre-norm blocks; `(B, T)` token ids to `(B, T, vocab)` logits."""

    def __init__(self, config: DecoderConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embed = nnx.Embed(config.vocab, config.d_model, rngs=rngs)
        self.blocks = nnx.List([Block(config, kind, rngs=rngs) for kind in config.layer_kinds])
        self.norm = nnx.RMSNorm(config.d_model, rngs=rngs)
        self.unembed = nnx.Linear(config.d_model, config.vocab, use_bias=False, rngs=rngs)

    def __call__(self, tokens: Int[Array, "B T"], *, start: int = 0) -> Float[Array, "B T-start V"]:
        """Next-token logits of positions `start:` (every layer still runs on all `T` tokens)."""
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.unembed(self.norm(x[:, start:]))

    def pooling_weights(self) -> list[Float[Array, "H s"] | None]:
        """Per layer, each head's pooling weight per phase (None where the layer has none)."""
        return [block.attention.pooling_weights() for block in self.blocks]


def trace(model: Decoder, tokens: Int[Array, "B T"]) -> tuple[Float[Array, "B T V"], nnx.State]:
    """Logits and every intermediate the layers sow (`nnx.Intermediate`), keyed by module path.

    Per block: `residual` (B, T, D); per attention layer: `attention` (B, H, T, K) over its
    K visible slots (compressed entries first, then local tokens), and, for compressed
    layers, `compressed_keys` / `compressed_values` (B, C, H, hd; keys before RoPE); for
    layers with an indexer (csa, compressed with `indexer_topk > 0`) `selected` (B, T, C
    bool: the entries each query's top-k keeps).
    """
    return nnx.capture(model, nnx.Intermediate)(tokens)


def init_decoder(config: DecoderConfig, key) -> Decoder:
    """A fresh decoder from a PRNG key (a traced key works: vmap it for an ensemble)."""
    return Decoder(config, rngs=nnx.Rngs(params=key))


def count_params(state: nnx.State) -> int:
    return sum(int(jnp.size(x)) for x in jax.tree.leaves(state))

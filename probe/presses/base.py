"""The project's own presses: KV-cache compression at prefill, as kvpress applies its own.

A press is a frozen dataclass. `with press(model): model.model(context_ids, ...)` hooks
every attention layer for the one forward pass that fills the cache (the prefill): after
it, each layer's cache is cut to the tokens `keep` names, per KV head. Later forward passes
(the question, the answer) are not touched. This is kvpress's `BasePress.__call__`
contract, written here without kvpress so the project's presses run on either
transformers line (kvpress pins < 5.3; `[hf]` needs >= 5.24).

The hook reads the layer's cache from the forward's keyword arguments (`past_key_values`
up to transformers 5.2, `cache` later) and the layer's keys as the cache holds them (after
RoPE, at their absolute positions). Presses that score keys against queries get the
post-RoPE queries of the prefill's last `window` tokens (`queries`): the projection, the
model's q-norm where it has one, and its rotary embedding, as Llama-family layers compute
them (kvpress's `get_prerope_query_states` makes the same assumption).
"""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class AbstractPress(abc.ABC):
    """A prefill-time KV-cache press: `keep` chooses, per KV head, the tokens that stay."""

    name: ClassVar[str]
    needs_queries: ClassVar[bool] = False
    window: ClassVar[int] = 16  # queries of the last `window` prefill tokens (needs_queries)

    @abc.abstractmethod
    def keep(self, keys, queries):
        """Indices of the tokens kept, `(batch, kv_heads, n)` int64 ascending, the same `n` for
        every head. `keys`: `(batch, kv_heads, T, head_dim)`, the layer's cache after the
        prefill; `queries`: `(batch, heads, window, head_dim)` post-RoPE, or None when the
        press does not need them."""

    @contextlib.contextmanager
    def __call__(self, model):
        layers = _decoder_layers(model)
        hooks = [
            layer.self_attn.register_forward_hook(self._hook, with_kwargs=True) for layer in layers
        ]
        try:
            yield
        finally:
            for hook in hooks:
                hook.remove()

    def _hook(self, module, args, kwargs, output):
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        if cache is None or hidden is None:
            raise RuntimeError(f"{self.name}: the attention layer was called without a cache")
        layer = cache.layers[module.layer_idx]
        keys, values = layer.keys, layer.values
        if keys.shape[2] != hidden.shape[1]:
            return output  # not the prefill: the cache held tokens before this pass
        queries = None
        if self.needs_queries:
            queries = _queries(module, hidden[:, -self.window :], kwargs, self.window)
        index = self.keep(keys, queries)
        gather = index[..., None].expand(-1, -1, -1, keys.shape[-1])
        layer.keys = keys.gather(2, gather).contiguous()
        layer.values = values.gather(2, gather).contiguous()
        return output


def _decoder_layers(model):
    inner = model.model if hasattr(model, "model") else model
    inner = getattr(inner, "language_model", inner)
    return inner.layers


def _rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _queries(module, hidden, kwargs, window: int):
    """Post-RoPE queries `(batch, heads, window, head_dim)` of a Llama-family attention layer."""
    if not hasattr(module, "q_proj"):
        raise RuntimeError(
            f"{type(module).__name__} has no q_proj: this press needs Llama-like layers"
        )
    batch, length, _ = hidden.shape
    head_dim = module.head_dim
    query = module.q_proj(hidden).view(batch, length, -1, head_dim).transpose(1, 2)
    if hasattr(module, "q_norm"):
        query = module.q_norm(query)
    cos, sin = kwargs["position_embeddings"]
    cos, sin = cos[:, -window:, None].transpose(1, 2), sin[:, -window:, None].transpose(1, 2)
    return query * cos + _rotate_half(query) * sin

"""Chunked KV compression applied to any Hugging Face causal LM at inference.

`apply(model, Compression(...))` registers an attention function with transformers'
`AttentionInterface` (and the matching mask builder with `AttentionMaskInterface`) and
switches the model to it with `set_attn_implementation`: the model's own weights,
projections, RoPE and cache are untouched; only how a query reads the keys changes.

A query at position t reads

* exactly, the keys and values of the tokens in its local window `t - L < j <= t`;
* every older token only through chunked entries: window c covers tokens
  `[c*S, c*S + W)` (W tokens every S); its entry is visible from t when the window is
  complete (`c*S + W - 1 <= t`) and starts before the local window (`c*S <= t - L`).
  Entries and exact tokens share one softmax (the paper's "compressed history plus a
  local window"). With `L >= W` every token older than the local window sits in a
  visible entry; with `L < W` the ones in windows not yet visible are not read at all.

An entry pools each KV head's keys and, separately, its values over the window, with an
operator of the project's registry (`idealized.operators`), implemented here in torch:

* `mean_pool`: the mean;
* `max_pool`: the channelwise maximum (the registry's decoder form: identity projection);
* `softmax_pool`: `softmax(a)` weights per head and offset (logits `a`, `(layers, H, W)`):
  random `N(0, 1)` drawn from `seed`, or given;
* `deepseek_v4`: V4's gated per-channel pooling, `softmax_i(x_i @ Z + ape_i) * (x_i @ C)`
  per channel, with `C` the identity unless given and `Z ~ N(0, 1/d)`, `ape ~ N(0, 1)`
  random (or given). Its RMSNorm and re-rotation to the window start are left out: the
  model's keys already carry RoPE at their own positions, and their norm is the model's.

Positions come from the cache length (`key` holds every token so far; the queries are
the last `Tq`), so sequences must not be padded: the probe sends one prompt at a time.
Given weights: an `.npz` with `pooling_logits` (softmax_pool) or `wgate`, `ape` and
optionally `wkv` (deepseek_v4), each with a leading layer axis.
"""

from __future__ import annotations

import dataclasses
import pathlib
from dataclasses import dataclass

import numpy as np

from weakspots.errors import ConfigError

OPERATORS = ("mean_pool", "max_pool", "softmax_pool", "deepseek_v4")
ATTENTION_NAME = "weakspots_chunked"
WEIGHTED = {"softmax_pool": ("pooling_logits",), "deepseek_v4": ("wgate", "ape", "wkv")}


@dataclass(frozen=True)
class Compression:
    """Chunked compression: `operator` over windows of `window` tokens every `stride`
    tokens, beyond a `local_window` of exact recent tokens. `seed` draws random operator
    weights; `weights` names an `.npz` of given ones."""

    operator: str = "mean_pool"
    window: int = 4
    stride: int | None = None
    local_window: int = 16
    seed: int = 0
    weights: str | None = None

    def __post_init__(self):
        # the registry imports jax: only a probe that compresses pays for it
        from weakspots.idealized.operators.registry import operator_names

        if self.stride is None:
            object.__setattr__(self, "stride", self.window)
        if self.operator not in OPERATORS or self.operator not in operator_names():
            raise ConfigError("compress", f"one of {', '.join(OPERATORS)}, got {self.operator!r}")
        for name, value in (("window", self.window), ("compress_stride", self.stride),
                            ("local_window", self.local_window)):  # fmt: skip
            if not isinstance(value, int) or value < 1:
                raise ConfigError(name, f"an integer >= 1, got {value!r}")
        if self.stride > self.window:
            raise ConfigError(
                "compress_stride", f"at most the window ({self.window}): got {self.stride}"
            )
        if self.weights is not None:
            if self.operator not in WEIGHTED:
                raise ConfigError("compress_weights", f"{self.operator} has no weights to give")
            if not pathlib.Path(self.weights).expanduser().is_file():
                raise ConfigError("compress_weights", f"no such file: {self.weights}")

    @property
    def name(self) -> str:
        """The attention implementation's registered name for this compression."""
        return (
            f"{ATTENTION_NAME}_{self.operator}_W{self.window}_S{self.stride}_L{self.local_window}"
            f"_seed{self.seed}" + ("" if self.weights is None else f"_{abs(hash(self.weights))}")
        )

    def asdict(self) -> dict:
        return dataclasses.asdict(self)


class _Weights:
    """Each layer's operator weights, drawn on first use (or read from the given file)."""

    def __init__(self, compression: Compression):
        self.compression = compression
        self.given = None
        if compression.weights is not None:
            with np.load(pathlib.Path(compression.weights).expanduser()) as data:
                self.given = {k: np.asarray(data[k], np.float32) for k in data.files}
        self.cache: dict[tuple, dict] = {}

    def __call__(self, layer: int, heads: int, dim: int, device, dtype) -> dict:
        import torch

        key = (layer, heads, dim, str(device), dtype)
        if key not in self.cache:
            c = self.compression
            generator = torch.Generator().manual_seed(c.seed * 100_003 + layer)
            W = c.window
            if c.operator == "softmax_pool":
                drawn = {"pooling_logits": torch.randn(heads, W, generator=generator)}
            elif c.operator == "deepseek_v4":
                drawn = {
                    "wgate": torch.randn(heads, dim, dim, generator=generator) / dim**0.5,
                    "ape": torch.randn(heads, W, dim, generator=generator),
                    "wkv": torch.eye(dim).expand(heads, dim, dim).clone(),
                }
            else:
                drawn = {}
            if self.given is not None:
                for name in WEIGHTED[c.operator]:
                    if name in self.given:
                        value = torch.from_numpy(self.given[name][layer])
                        if value.shape != drawn[name].shape:
                            raise ValueError(
                                f"--compress-weights: {name} of layer {layer} is "
                                f"{tuple(value.shape)}, the model needs {tuple(drawn[name].shape)}"
                            )
                        drawn[name] = value
            self.cache[key] = {k: v.to(device=device, dtype=dtype) for k, v in drawn.items()}
        return self.cache[key]


def windows(x, window: int, stride: int):
    """`(B, H, T, D)` to the complete windows `(B, H, C, W, D)`: W tokens every S."""
    B, H, T, D = x.shape
    if T < window:
        return x.new_zeros((B, H, 0, window, D))
    return x.unfold(2, window, stride).transpose(-1, -2)


def pool(operator: str, x, params: dict):
    """One entry per window: `(B, H, C, W, D)` to `(B, H, C, D)` with `operator`."""
    import torch

    if operator == "mean_pool":
        return x.mean(dim=3)
    if operator == "max_pool":
        return x.amax(dim=3)
    if operator == "softmax_pool":
        weights = torch.softmax(params["pooling_logits"].float(), dim=-1).to(x.dtype)  # (H, W)
        return torch.einsum("hw,bhcwd->bhcd", weights, x)
    if operator == "deepseek_v4":
        score = torch.einsum("bhcwd,hde->bhcwe", x, params["wgate"]) + params["ape"][None, :, None]
        alpha = torch.softmax(score.float(), dim=3).to(x.dtype)
        payload = torch.einsum("bhcwd,hde->bhcwe", x, params["wkv"])
        return (alpha * payload).sum(dim=3)
    raise ValueError(f"unknown operator {operator!r}")


def visibility(compression: Compression, query_positions, entries: int, length: int):
    """Boolean masks `(Tq, C)` of the visible entries and `(Tq, T)` of the exact tokens."""
    import torch

    q = query_positions[:, None]
    starts = torch.arange(entries) * compression.stride
    entry_ok = (starts[None] + compression.window - 1 <= q) & (
        starts[None] <= q - compression.local_window
    )
    k = torch.arange(length)[None]
    exact_ok = (k <= q) & (k > q - compression.local_window)
    return entry_ok, exact_ok


def chunked_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, *,
                      compression: Compression, weights: _Weights, **kwargs):  # fmt: skip
    """The attention function: queries `(B, Hq, Tq, D)` read entries and the local window.

    Keys a boolean mask hides from the last query (left padding, a batch's pads between
    a shared prefix and a row) are not tokens of that row: positions count real keys only.
    """
    import torch

    del dropout, kwargs  # inference only
    B, Hq, Tq, D = query.shape
    T = key.shape[2]
    layer = int(getattr(module, "layer_idx", 0) or 0)
    params = weights(layer, key.shape[1], D, key.device, key.dtype)
    if attention_mask is None or attention_mask.dtype != torch.bool:
        return _one(compression, params, query, key, value, torch.arange(T - Tq, T), scaling)
    real = attention_mask[:, 0, -1, :].to("cpu")  # (B, T): the last query sees every real key
    out = query.new_zeros((B, Tq, Hq, D))
    for b in range(B):
        index = real[b].nonzero().flatten()
        rank = torch.cumsum(real[b].long(), 0) - 1  # each key index's position among real keys
        positions = rank[T - Tq :].clamp(min=0)
        out[b] = _one(compression, params, query[b : b + 1], key[b : b + 1, :, index.to(key.device)],
                      value[b : b + 1, :, index.to(key.device)], positions, scaling)[0]  # fmt: skip
    return out, None


def _one(compression: Compression, params: dict, query, key, value, positions, scaling):
    """One unpadded sequence: queries at `positions` (of the `T` keys)."""
    import torch

    Hq, Hkv, T = query.shape[1], key.shape[1], key.shape[2]
    c = compression
    entry_keys = pool(c.operator, windows(key, c.window, c.stride), params)
    entry_values = pool(c.operator, windows(value, c.window, c.stride), params)
    C = entry_keys.shape[2]
    keys = torch.cat([entry_keys, key], dim=2).repeat_interleave(Hq // Hkv, dim=1)
    values = torch.cat([entry_values, value], dim=2).repeat_interleave(Hq // Hkv, dim=1)
    entry_ok, exact_ok = visibility(c, positions, C, T)
    allowed = torch.cat([entry_ok, exact_ok], dim=1).to(query.device)
    scores = torch.matmul(query, keys.transpose(2, 3)).float() * scaling
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(values.dtype)
    return torch.matmul(probs, values).transpose(1, 2).contiguous(), None


def register(compression: Compression) -> str:
    """Register the attention function (and its mask) for `compression`; returns its name,
    the value of `attn_implementation`."""
    import functools

    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    function = functools.partial(
        chunked_attention, compression=compression, weights=_Weights(compression)
    )
    AttentionInterface.register(compression.name, function)
    AttentionMaskInterface.register(compression.name, sdpa_mask)
    return compression.name


def apply(model, compression: Compression):
    """Make `model` attend through `compression` (returns the model; weights unchanged)."""
    model.set_attn_implementation(register(compression))
    return model


__all__ = [
    "OPERATORS",
    "Compression",
    "apply",
    "chunked_attention",
    "pool",
    "register",
    "visibility",
    "windows",
]

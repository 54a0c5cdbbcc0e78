"""Attention kinds of the pretraining backbone: full causal attention and the paper's compressor.

A kind is a final `nnx.Module` subclass of `AbstractAttentionKind`, registered by name
(`register`, `lookup`, `kind_names`); its class attributes and `facts(config)` say what it
reads and `forward_flops(config)` what it computes. Shapes: B sequences, T tokens, D width,
H query heads, G KV heads (H / G queries share one), hd head width, C complete windows,
W window, S stride.

`full`: Qwen3's attention. `q = q_norm(x Wq)`, `k = k_norm(x Wk)`, `v = x Wv`, RoPE on q and
k at their positions, query t reads every token `u <= t`.

`compressed` (the paper, §1 and §3 of `PAPER.md`): window j covers tokens
`jS .. jS + W - 1`, `C = (T - W) // S + 1` of them in a sequence. Per offset i its own gate
`s_{j,i} = Z_i h_{jS+i} + b_i` (scalar: one score per KV head; vector: one per channel;
uniform: `alpha = 1/W`, no parameter), `alpha = softmax_i s`, and its own payload map:
`K_j = sum_i alpha_{j,i} C_i h_{jS+i}` (h: the layer's normed input). Values have their
own gates and payload maps (or, with `tied_kv`, are the normed, rotated keys). Keys are
k-normed (`qk_norm`) and rotated to the window's first position `jS`. `post_norm`
applies an RMSNorm to each payload `C_i h` before pooling. Causality: query t reads entry
j only when the window is complete, `jS + W - 1 <= t`. Exact recent tokens: `local =
window` reads tokens `t - local_window + 1 .. t` (they may also sit in a visible entry,
as in the paper's models: no token is removed from either branch), `local = tail` reads
only tokens after the last token of the last visible entry (all of `0 .. t` before the
first window completes). One softmax runs over the visible entries and exact tokens. The
exact tokens are read as a band (`Band`): every query scores only the `2 w` tokens of its
block of `w = exact_span` and the block before (`T x 2w` products, not `T x T`), masked to
the tokens above.
"""

from __future__ import annotations

import abc
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx
from jaxtyping import Array, Bool, Float

from weakspots.idealized.pretrain.config import ATTENTION_KINDS, PretrainConfig
from weakspots.idealized.rope import rope_frequencies

Tokens = Float[Array, "B T D"]
Heads = Float[Array, "B T G hd"]
Entries = Float[Array, "B C G hd"]
MASKED = -1e30  # finite "minus infinity": a masked score adds exactly 0 to the softmax
NORM_EPS = 1e-6  # Qwen3's RMSNorm epsilon
INIT_STD = 0.02  # Qwen3's initializer_range


def normal(std: float = INIT_STD):
    return nnx.initializers.normal(std)


def linear(d_in: int, d_out: int, *, rngs: nnx.Rngs) -> nnx.Linear:
    return nnx.Linear(d_in, d_out, use_bias=False, kernel_init=normal(), rngs=rngs)


def rms_norm(width: int, *, rngs: nnx.Rngs) -> nnx.RMSNorm:
    return nnx.RMSNorm(width, epsilon=NORM_EPS, rngs=rngs)


def rotate(y: Float[Array, "B N G hd"], positions, rope_dim: int, theta: float):
    """RoPE as Qwen3 writes it (rotate-half pairs `c` and `c + rope_dim/2`) on the first
    `rope_dim` channels of every head, row n at `positions[n]`."""
    if rope_dim == 0:
        return y
    freqs = rope_frequencies(rope_dim, theta, dtype=jnp.float32, xp=jnp)
    angles = jnp.asarray(positions, jnp.float32)[:, None] * freqs[None, :]
    angles = jnp.concatenate([angles, angles], axis=-1)[None, :, None, :]
    cos, sin = jnp.cos(angles).astype(y.dtype), jnp.sin(angles).astype(y.dtype)
    turned, rest = y[..., :rope_dim], y[..., rope_dim:]
    half = rope_dim // 2
    rotated_half = jnp.concatenate([-turned[..., half:], turned[..., :half]], axis=-1)
    return jnp.concatenate([turned * cos + rotated_half * sin, rest], axis=-1)


def causal_visibility(length: int) -> Bool[Array, "T T"]:
    """`mask[t, u] = u <= t`."""
    t = jnp.arange(length)[:, None]
    return jnp.arange(length)[None, :] <= t


def entry_count(config: PretrainConfig, length: int | None = None) -> int:
    """Complete windows in `length` tokens (default `seq_len`): `(T - W) // S + 1`, or 0."""
    length = config.seq_len if length is None else length
    return max(0, (length - config.window) // config.stride + 1)


def window_starts(config: PretrainConfig, length: int | None = None) -> Array:
    """First token of each complete window, `jS`, `(C,)`."""
    return jnp.arange(entry_count(config, length)) * config.stride


def _positions(config: PretrainConfig, length: int | None) -> Array:
    return jnp.arange(config.seq_len if length is None else length)


def entry_visibility(config: PretrainConfig, length: int | None = None) -> Bool[Array, "T C"]:
    """`mask[t, j] = jS + W - 1 <= t`: a query reads only complete windows."""
    t = _positions(config, length)[:, None]
    return window_starts(config, length)[None, :] + config.window - 1 <= t


def last_entry_token(config: PretrainConfig, length: int | None = None) -> Array:
    """Per query t, the last token of its last visible entry (-1 when none), `(T,)`."""
    t = _positions(config, length)
    j = (t - config.window + 1) // config.stride  # floor; negative when no window is complete
    last = jnp.minimum(j, entry_count(config, length) - 1) * config.stride + config.window - 1
    return jnp.where(t >= config.window - 1, last, -1)


def _reads_exactly(config: PretrainConfig, t: Array, u: Array, length: int | None) -> Array:
    """Whether query t reads token u exactly (`t`, `u` broadcastable integer arrays)."""
    if config.local == "window":
        recent = t - u < config.local_window
    else:
        recent = u > last_entry_token(config, length)[t]
    return (u <= t) & (u >= 0) & recent


def exact_visibility(config: PretrainConfig, length: int | None = None) -> Bool[Array, "T T"]:
    """The exact tokens query t reads: `t - u < local_window` (`local = window`), or
    `u > last_entry_token(t)` (`local = tail`), always with `u <= t`."""
    t = _positions(config, length)[:, None]
    return _reads_exactly(config, t, _positions(config, length)[None, :], length)


def exact_span(config: PretrainConfig) -> int:
    """How far back an exact token can lie: `t - u < exact_span` for every token query t
    reads. `local = window`: `local_window`. `local = tail`: `window` (before the first
    window completes t < W - 1; after, the last visible entry ends less than S <= W
    tokens before t)."""
    return config.local_window if config.local == "window" else config.window


def band_visibility(config: PretrainConfig, length: int | None = None) -> Bool[Array, "T M"]:
    """`exact_visibility` on the band `Band` computes: slot m of query t holds token
    `u = (t // w - 1) w + m`, `w = exact_span`, `M = 2 w`."""
    width = exact_span(config)
    t = _positions(config, length)[:, None]
    u = (t // width - 1) * width + jnp.arange(2 * width)[None, :]
    return _reads_exactly(config, t, u, length)


HeadOverride = tuple[Bool[Array, " H"], Float[Array, "*B H hd"]]


def override_last(heads: Float[Array, "B T H hd"], override: HeadOverride | None):
    """`heads` with, at the last position, the heads where `mask` holds set to `values`
    (`override = (mask, values)`); None: `heads` itself."""
    if override is None:
        return heads
    mask, values = override
    last = jnp.where(jnp.asarray(mask)[:, None], values, heads[:, -1])
    return heads.at[:, -1].set(last.astype(heads.dtype))


class Keys(NamedTuple):
    """Keys and values every query may read, `mask[t, n]`: whether query t reads slot n."""

    keys: Float[Array, "B N G hd"]
    values: Float[Array, "B N G hd"]
    mask: Bool[Array, "T N"]

    def scores(self, q: Float[Array, "B T G R hd"]) -> Float[Array, "B G R T N"]:
        scores = jnp.einsum("btgrd,bngd->bgrtn", q, self.keys)
        return jnp.where(self.mask[None, None, None], scores, MASKED)

    def mix(self, weights: Float[Array, "B G R T N"]) -> Float[Array, "B T G R hd"]:
        return jnp.einsum("bgrtn,bngd->btgrd", weights, self.values)


def _pad_rows(y: Array, axis: int, before: int, after: int) -> Array:
    pad = [(0, 0)] * y.ndim
    pad[axis] = (before, after)
    return jnp.pad(y, pad)


def _block_pairs(y: Float[Array, "B T G hd"], width: int) -> Float[Array, "B K M G hd"]:
    """Tokens of blocks `k - 1` and `k` of `width` each, side by side (`M = 2 width`; the
    block before the first is zeros, the last block padded with zeros)."""
    batch, length = y.shape[:2]
    count = -(-length // width)
    y = _pad_rows(y, 1, width, count * width - length)
    blocks = y.reshape(batch, count + 1, width, *y.shape[2:])
    return jnp.concatenate([blocks[:, :-1], blocks[:, 1:]], axis=2)


class Band(NamedTuple):
    """Keys and values of the `width` tokens before each query, computed block by block:
    the queries of block k (tokens `kw .. kw + w - 1`) read the `2w` tokens of blocks
    `k - 1` and `k`, `mask[t, m]` (`band_visibility`) which of them; the work is `T x 2w`
    scores, not `T x T`."""

    keys: Float[Array, "B T G hd"]
    values: Float[Array, "B T G hd"]
    mask: Bool[Array, "T M"]
    width: int

    def scores(self, q: Float[Array, "B T G R hd"]) -> Float[Array, "B G R T M"]:
        batch, length = q.shape[:2]
        count = -(-length // self.width)
        blocks = _pad_rows(q, 1, 0, count * self.width - length)
        blocks = blocks.reshape(batch, count, self.width, *q.shape[2:])
        scores = jnp.einsum("bkigrd,bkmgd->bgrkim", blocks, _block_pairs(self.keys, self.width))
        scores = scores.reshape(*scores.shape[:3], count * self.width, 2 * self.width)
        return jnp.where(self.mask[None, None, None], scores[:, :, :, :length], MASKED)

    def mix(self, weights: Float[Array, "B G R T M"]) -> Float[Array, "B T G R hd"]:
        length = weights.shape[3]
        count = -(-length // self.width)
        weights = _pad_rows(weights, 3, 0, count * self.width - length)
        weights = weights.reshape(*weights.shape[:3], count, self.width, 2 * self.width)
        out = jnp.einsum("bgrkim,bkmgd->bkigrd", weights, _block_pairs(self.values, self.width))
        return out.reshape(out.shape[0], count * self.width, *out.shape[3:])[:, :length]


def grouped_attention(
    q: Float[Array, "B T H hd"],
    sources: list[Keys | Band | tuple[Array, Array, Bool[Array, "T N"]]],
) -> Float[Array, "B T H hd"]:
    """One softmax per query over every source's visible keys (grouped queries: head h
    reads KV head `h // (H / G)`); returns the weighted values. A plain `(keys, values,
    mask)` tuple is read as `Keys`."""
    batch, length, heads, width = q.shape
    sources = [s if isinstance(s, Keys | Band) else Keys(*s) for s in sources]
    groups = sources[0].keys.shape[2]
    q = q.reshape(batch, length, groups, heads // groups, width) / jnp.sqrt(width).astype(q.dtype)
    scores = [source.scores(q) for source in sources]
    sizes = [s.shape[-1] for s in scores]
    weights = jax.nn.softmax(jnp.concatenate(scores, axis=-1), axis=-1)
    out, start = 0.0, 0
    for source, size in zip(sources, sizes, strict=True):
        out = out + source.mix(weights[..., start : start + size])
        start += size
    return out.reshape(batch, length, heads, width)


class AbstractAttentionKind(nnx.Module):
    """One attention layer of the backbone: `(B, T, D)` normed input to `(B, T, D)`.

    Facts every kind states: `reads` (`tokens`: every earlier token; `entries`: compressed
    entries of complete windows; `local`: exact recent tokens), and `facts(config)` (reads,
    window, stride, overlap) and `forward_flops(config)` (matmul FLOPs of one sequence).
    Shared parts: `q_proj`, `o_proj`, `q_norm`, `k_norm` (Qwen3's names).
    """

    name: ClassVar[str]
    reads: ClassVar[tuple[str, ...]]

    def __init__(self, config: PretrainConfig, *, rngs: nnx.Rngs):
        self.config = config
        d, h, hd = config.d_model, config.heads, config.head_dim
        self.q_proj = linear(d, h * hd, rngs=rngs)
        self.o_proj = linear(h * hd, d, rngs=rngs)
        self.q_norm = rms_norm(hd, rngs=rngs) if config.qk_norm else None
        self.k_norm = rms_norm(hd, rngs=rngs) if config.qk_norm else None

    @classmethod
    def facts(cls, config: PretrainConfig) -> dict:
        return {"reads": cls.reads, "window": None, "stride": None, "overlap": False}

    @classmethod
    @abc.abstractmethod
    def forward_flops(cls, config: PretrainConfig) -> float:
        """Matmul FLOPs of the layer's forward pass on one sequence of `seq_len` tokens."""

    def queries(self, x: Tokens) -> Float[Array, "B T H hd"]:
        c = self.config
        q = self.q_proj(x).reshape(*x.shape[:2], c.heads, c.head_dim)
        q = self.q_norm(q) if self.q_norm is not None else q
        return rotate(q, jnp.arange(x.shape[1]), c.rotary_dim, c.rope_theta)

    def normed_keys(self, k: Float[Array, "B N G hd"], positions) -> Float[Array, "B N G hd"]:
        k = self.k_norm(k) if self.k_norm is not None else k
        return rotate(k, positions, self.config.rotary_dim, self.config.rope_theta)

    @abc.abstractmethod
    def heads(self, x: Tokens) -> Float[Array, "B T H hd"]:
        """Every query head's attention output, before `o_proj`."""

    def __call__(self, x: Tokens, head_override: HeadOverride | None = None) -> Tokens:
        """`o_proj` of the heads; `head_override = (mask (H,), values (H, hd) or (B, H, hd))`
        replaces, at the last position only, the heads where `mask` holds by `values`
        (mean-replacement knockout, `sims.pretrain.mechanism`); None changes nothing."""
        return self.output(override_last(self.heads(x), head_override))

    def output(self, heads: Float[Array, "B T H hd"]) -> Tokens:
        return self.o_proj(heads.reshape(*heads.shape[:2], -1))

    @staticmethod
    def projection_flops(config: PretrainConfig, kv_projections: int) -> float:
        """`q`, `o` and `kv_projections` KV projections of every token."""
        d, h, g, hd, t = (
            config.d_model,
            config.heads,
            config.kv_heads,
            config.head_dim,
            config.seq_len,
        )
        return 2.0 * t * d * (2 * h * hd + kv_projections * g * hd)


class ExactTokens(nnx.Module):
    """The exact tokens' keys and values, `x Wk` and `x Wv` (values tied to the keys: no `v_proj`)."""

    def __init__(self, config: PretrainConfig, *, tied: bool, rngs: nnx.Rngs):
        width = config.kv_heads * config.head_dim
        self.shape = (config.kv_heads, config.head_dim)
        self.k_proj = linear(config.d_model, width, rngs=rngs)
        self.v_proj = None if tied else linear(config.d_model, width, rngs=rngs)

    def __call__(self, x: Tokens) -> tuple[Heads, Heads | None]:
        k = self.k_proj(x).reshape(*x.shape[:2], *self.shape)
        v = None if self.v_proj is None else self.v_proj(x).reshape(*x.shape[:2], *self.shape)
        return k, v


class FullAttention(AbstractAttentionKind):
    """Causal attention over every earlier token (Qwen3's layer; the paper's baseline)."""

    name = "full"
    reads = ("tokens",)

    def __init__(self, config: PretrainConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.exact = ExactTokens(config, tied=False, rngs=rngs)

    @classmethod
    def forward_flops(cls, config):
        scores = config.seq_len * config.seq_len  # the whole T x T product is computed
        return cls.projection_flops(config, 2) + 4.0 * scores * config.heads * config.head_dim

    def heads(self, x: Tokens) -> Float[Array, "B T H hd"]:
        positions = jnp.arange(x.shape[1])
        k, v = self.exact(x)
        k = self.normed_keys(k, positions)
        mask = causal_visibility(x.shape[1])
        return grouped_attention(self.queries(x), [Keys(k, v, mask)])


class WindowPooling(nnx.Module):
    """One branch (keys or values) of the paper's compressor: per-offset gates and payload maps.

    Parameters: `payload` `(W, D, G hd)` (C_i), `gate` `(W, D, G)` scalar or `(W, D, G hd)`
    vector (Z_i), `gate_bias` `(W, G)` or `(W, G hd)` (b_i); uniform averaging has no gate.
    """

    def __init__(self, config: PretrainConfig, *, rngs: nnx.Rngs):
        w, d, g, hd = config.window, config.d_model, config.kv_heads, config.head_dim
        self.config = config
        self.payload = nnx.Param(normal()(rngs.params(), (w, d, g * hd), jnp.float32))
        scores = {"scalar": g, "vector": g * hd, "uniform": 0}[config.gate]
        self.gate = (
            nnx.Param(normal()(rngs.params(), (w, d, scores), jnp.float32)) if scores else None
        )
        self.gate_bias = (
            nnx.Param(jnp.zeros((w, scores), jnp.float32)) if scores and config.gate_bias else None
        )
        self.post_norm = rms_norm(hd, rngs=rngs) if config.post_norm else None

    def pooling_weights(self, windows: Float[Array, "B C W D"]) -> Float[Array, "B C W E"]:
        """`alpha_{j,i}`, softmax over offsets i; E = G (scalar, uniform) or G hd (vector)."""
        if self.gate is None:
            shape = (*windows.shape[:3], self.config.kv_heads)
            return jnp.full(shape, 1.0 / self.config.window, windows.dtype)
        logits = jnp.einsum("bcwd,wde->bcwe", windows, self.gate[...])
        if self.gate_bias is not None:
            logits = logits + self.gate_bias[...][None, None]
        return jax.nn.softmax(logits, axis=2)

    def __call__(self, windows: Float[Array, "B C W D"]) -> Entries:
        c = self.config
        batch, count = windows.shape[:2]
        payload = jnp.einsum("bcwd,wde->bcwe", windows, self.payload[...])
        payload = payload.reshape(batch, count, c.window, c.kv_heads, c.head_dim)
        if self.post_norm is not None:
            payload = self.post_norm(payload)
        alpha = self.pooling_weights(windows)
        alpha = alpha.reshape(batch, count, c.window, c.kv_heads, -1)  # last axis: 1 or hd
        return jnp.sum(alpha * payload, axis=2)


def windows_of(x: Tokens, config: PretrainConfig) -> Float[Array, "B C W D"]:
    """`windows[:, j, i] = x[:, jS + i]`: the tokens of every complete window."""
    index = window_starts(config, x.shape[1])[:, None] + jnp.arange(config.window)[None, :]
    return x[:, index]


class CompressedAttention(AbstractAttentionKind):
    """The paper's chunked compression: entries of complete windows plus exact recent tokens."""

    name = "compressed"
    reads = ("entries", "local")

    def __init__(self, config: PretrainConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.exact = ExactTokens(config, tied=config.tied_kv, rngs=rngs)
        self.key_pooling = WindowPooling(config, rngs=rngs)
        self.value_pooling = None if config.tied_kv else WindowPooling(config, rngs=rngs)

    @classmethod
    def facts(cls, config):
        return {
            "reads": cls.reads,
            "window": config.window,
            "stride": config.stride,
            "overlap": config.stride < config.window,
            "local": config.local,
            "local_window": config.local_window if config.local == "window" else None,
        }

    @classmethod
    def forward_flops(cls, config):
        branches = 1 if config.tied_kv else 2
        g, hd, d = config.kv_heads, config.head_dim, config.d_model
        gate = {"scalar": g, "vector": g * hd, "uniform": 0}[config.gate]
        pooled = config.entries * config.window
        pooling = branches * 2.0 * pooled * d * (g * hd + gate)
        span = exact_span(config)
        band = -(-config.seq_len // span) * span * 2 * span  # padded blocks of 2 span keys
        attention = 4.0 * (config.seq_len * config.entries + band) * config.heads * hd
        return cls.projection_flops(config, branches) + pooling + attention

    def entries(self, x: Tokens) -> tuple[Entries, Entries]:
        """Compressed keys (normed, rotated to `jS`) and values, `(B, C, G, hd)` each."""
        windows = windows_of(x, self.config)
        keys = self.normed_keys(self.key_pooling(windows), window_starts(self.config, x.shape[1]))
        values = keys if self.value_pooling is None else self.value_pooling(windows)
        return keys, values

    def heads(self, x: Tokens) -> Float[Array, "B T H hd"]:
        k, v = self.exact(x)
        k = self.normed_keys(k, jnp.arange(x.shape[1]))
        v = k if v is None else v
        ek, ev = self.entries(x)
        sources = [
            Keys(ek, ev, entry_visibility(self.config, x.shape[1])),
            Band(k, v, band_visibility(self.config, x.shape[1]), exact_span(self.config)),
        ]
        return grouped_attention(self.queries(x), sources)


_REGISTRY: dict[str, type[AbstractAttentionKind]] = {}


def register(kind: type[AbstractAttentionKind]) -> None:
    """Make `kind` available by its `name` (config validation reads `ATTENTION_KINDS`)."""
    if kind.name not in ATTENTION_KINDS:
        raise ValueError(f"add {kind.name!r} to idealized.pretrain.config.ATTENTION_KINDS")
    _REGISTRY[kind.name] = kind


def lookup(name: str) -> type[AbstractAttentionKind]:
    return _REGISTRY[name]


def kind_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


register(FullAttention)
register(CompressedAttention)

"""DeepSeek-V4's attention from transformers' weights, run as the project's own V4 layer.

`attention_from_hf(config, state, layer_idx)` takes a `DeepseekV4Config.to_dict()` and the
numpy arrays of one `DeepseekV4Attention.state_dict()` (transformers >= 5.24,
`models/deepseek_v4`), loads them into `idealized.decoder.v4_attention.V4Attention` and returns
`f(x)`: hidden states `(T, hidden_size)` at positions `0 .. T-1`, no cache, to what the
HF module's forward returns, `(T, hidden_size)`. Needs neither torch nor transformers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized.decoder.v4_attention import V4Attention

HF_KINDS = {
    "sliding_attention": "sliding",
    "compressed_sparse_attention": "csa",
    "heavily_compressed_attention": "hca",
}
"""transformers' layer types -> `V4Attention` kinds."""


def _rope(config: Mapping, label: str) -> float:
    params = (config.get("rope_parameters") or {}).get(label)
    if params is None:
        return float(config["rope_theta" if label == "main" else "compress_rope_theta"])
    if params.get("rope_type", "default") != "default":
        raise NotImplementedError(f"rope_type {params['rope_type']!r}: only default RoPE is mapped")
    return float(params["rope_theta"])


def layer_from_hf(config: Mapping, state: Mapping[str, np.ndarray], layer_idx: int) -> V4Attention:
    """The `V4Attention` of layer `layer_idx` with the HF module's weights (`state`)."""
    layer_type = config["layer_types"][layer_idx]
    kind = HF_KINDS[layer_type]
    head_dim, heads = int(config["head_dim"]), int(config["num_attention_heads"])
    rope_dim = int(head_dim * float(config["partial_rotary_factor"]))
    ratio = int(config["compress_rates"][layer_type]) if kind != "sliding" else 1
    build = lambda: V4Attention(  # noqa: E731
        int(config["hidden_size"]),
        heads,
        head_dim,
        kind=kind,
        ratio=ratio,
        local_window=int(config["sliding_window"]),
        rope_dim=rope_dim,
        rope_theta=_rope(config, "main" if kind == "sliding" else "compress"),
        shared_kv=True,
        qk_norm=True,
        sink=True,
        index_topk=int(config["index_topk"]),
        index_heads=int(config["index_n_heads"]),
        index_dim=int(config["index_head_dim"]),
        q_rank=int(config["q_lora_rank"]),
        o_groups=int(config["o_groups"]),
        o_rank=int(config["o_lora_rank"]),
        rngs=nnx.Rngs(0),
    )
    layer = nnx.eval_shape(build)  # every parameter is set below
    w = {k: np.asarray(v, np.float32) for k, v in state.items()}
    put = lambda var, value: var.set_value(jnp.asarray(value, jnp.float32))  # noqa: E731
    put(layer.q_a.kernel, w["q_a_proj.weight"].T)
    put(layer.q_a_norm.weight, w["q_a_norm.weight"])
    put(layer.q_b.kernel, w["q_b_proj.weight"].T)
    put(layer.kv.kernel, w["kv_proj.weight"].T)
    put(layer.kv_norm.weight, w["kv_norm.weight"][None])
    put(layer.sinks, w["sinks"])
    groups, rank = int(config["o_groups"]), int(config["o_lora_rank"])
    o_a = w["o_a_proj.weight"].reshape(groups, rank, -1).transpose(0, 2, 1)
    put(layer.o_a, o_a)
    put(layer.o_b.kernel, w["o_b_proj.weight"].T)
    if layer.compressor is not None:
        _compressor(layer.compressor, w, "compressor.", put)
    if layer.indexer is not None:
        _compressor(layer.indexer.compressor, w, "compressor.indexer.", put)
        put(layer.indexer.query.kernel, w["compressor.indexer.q_b_proj.weight"].T)
        put(layer.indexer.head_weights.kernel, w["compressor.indexer.scorer.weights_proj.weight"].T)
    return layer


def _compressor(compressor, w, prefix, put):
    put(compressor.wkv, w[prefix + "kv_proj.weight"].T[None])
    put(compressor.wgate, w[prefix + "gate_proj.weight"].T[None])
    put(compressor.ape, w[prefix + "position_bias"][None])
    put(compressor.norm.weight, w[prefix + "kv_norm.weight"][None])


def attention_from_hf(
    config: Mapping, state: Mapping[str, np.ndarray], layer_idx: int
) -> Callable[[np.ndarray], np.ndarray]:
    """`f(x)`: `(T, hidden_size)` float32 hidden states to HF `DeepseekV4Attention`'s output.

    Args:
        config: `DeepseekV4Config.to_dict()`.
        state: the layer's `self_attn` `state_dict()` as numpy arrays (keys as HF names them).
        layer_idx: which layer of `config["layer_types"]` the weights belong to.
    """
    graph, params = nnx.split(layer_from_hf(config, state, layer_idx))

    @jax.jit
    def forward(params, x):
        return nnx.merge(graph, params)(x[None])[0]

    return lambda x: np.asarray(forward(params, jnp.asarray(x, jnp.float32)))

"""One pretraining step of the full-attention backbone, the project's against HF's Qwen3, in one run.

A step is the forward pass, the backward pass and an AdamW update (global-norm clipping
first) on one batch of next-token prediction, at the sweep's width (`sims.experiments.pretrain.sweep`,
size `h200`: d 256, 4 layers, 8 query heads of 32, SwiGLU 768, the corpus's vocabulary):

* `jax`: `sims.pretrain.train.step` jitted (one seed), from HF's weights;
* `hf_eager`: transformers' `Qwen3ForCausalLM` of the same shape (eager attention) with
  `torch.nn.utils.clip_grad_norm_` and `torch.optim.AdamW`, as a PyTorch user trains it.

Before timing, both sides' losses at step 0 (same weights, same batch) are compared
(`loss_step0_rel_diff`). Calls run in interleaved rounds (one of each, and the peak matmul
call, per round); `pretrain_vs_hf_step_speedup` is the median over rounds of HF's step time
over ours. `pretrain_flop_utilisation`: our step's model FLOPs
(`idealized.pretrain.model.train_flops_per_step`, matmuls as computed, the causal mask's
zeros counted) per second over the machine's float32 matmul rate measured in the same
rounds (`benchmarks.lm_throughput.matmul_rate`, square matrices of `PEAK_MATMUL`).

    python -m weakspots.benchmarks.pretrain_step [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.benchmarks.lm_throughput import PEAK_MATMUL, matmul_rate
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.model import Backbone, train_flops_per_step

TARGETS = {"pretrain_vs_hf_step_speedup": 2.0, "pretrain_flop_utilisation": 0.4}


@dataclasses.dataclass(frozen=True)
class PretrainBenchSettings:
    d_model: int = 256
    layers: int = 4
    heads: int = 8
    kv_heads: int = 1
    head_dim: int = 32
    mlp_hidden: int = 768
    vocab: int = 2972  # the corpus tokenizer's size
    seq_len: int = 384
    batch: int = 8
    steps: int = 2  # steps per timed call
    repeats: int = 5  # interleaved rounds
    matmuls: int = 8  # peak-rate matmuls per round
    lr: float = 1e-3

    def config(self) -> PretrainConfig:
        fields = {f.name for f in dataclasses.fields(PretrainConfig)}
        shared = {k: v for k, v in dataclasses.asdict(self).items() if k in fields}
        return PretrainConfig(**shared, attention="full", rope_theta=10000.0, seeds=1)


FULL = PretrainBenchSettings()
QUICK = PretrainBenchSettings(batch=4, repeats=3)
TINY = PretrainBenchSettings(d_model=32, layers=1, heads=4, kv_heads=2, head_dim=8,
                             mlp_hidden=32, vocab=40, seq_len=24, batch=2, steps=1, repeats=2,
                             matmuls=1)  # fmt: skip


def available() -> str | None:
    """None when torch and transformers' Qwen3 import, else why not (one line)."""
    try:
        import torch  # noqa: F401
        from transformers import Qwen3ForCausalLM  # noqa: F401
    except ImportError as error:
        return f"needs the [hf] extra (torch, transformers): {error}"
    return None


def hf_model(config: PretrainConfig):
    """transformers' `Qwen3ForCausalLM` of the backbone's shape (eager attention, fp32)."""
    import transformers

    hf_config = transformers.Qwen3Config(
        vocab_size=config.vocab, hidden_size=config.d_model, intermediate_size=config.mlp_hidden,
        num_hidden_layers=config.layers, num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads, head_dim=config.head_dim,
        max_position_embeddings=config.seq_len, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": config.rope_theta},
        tie_word_embeddings=False, attention_dropout=0.0,
    )  # fmt: skip
    hf_config._attn_implementation = "eager"
    return transformers.Qwen3ForCausalLM(hf_config)


def load_hf_weights(model: Backbone, hf) -> None:
    """HF's parameters into ours (names match; `Linear` kernels are HF's weights transposed)."""
    ours = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    for name, tensor in hf.named_parameters():
        parts = name.split(".")[1:] if name.startswith("model.") else name.split(".")
        leaf = "kernel"
        if parts[-2].endswith("norm"):
            leaf = "scale"
        elif parts[0] == "embed_tokens":
            leaf = "embedding"
        path = tuple(int(s) if s.isdigit() else s for s in parts[:-1])
        if len(path) > 3 and path[2] == "self_attn" and path[3] in ("k_proj", "v_proj"):
            path = path[:3] + ("exact",) + path[3:]
        value = tensor.detach().numpy()
        ours[path + (leaf,)].set_value(jnp.asarray(value.T if leaf == "kernel" else value))


def jax_trainer(config: PretrainConfig, hf, tokens: np.ndarray, lr: float) -> Callable:
    from weakspots.sims.pretrain import train

    model = Backbone(config, rngs=nnx.Rngs(0))
    load_hf_weights(model, hf)
    hyper = jax.tree.map(lambda x: x[0], train.Hyper.of(config.replace(lr=lr, warmup=0)))
    state = train.TrainState(
        nnx.split(model)[1],
        train.optimizer(hyper, hyper.lr).init(nnx.split(model)[1]),
        jnp.zeros((), jnp.int32),
    )
    step = jax.jit(lambda s, t: train.step(config, s, hyper, t), donate_argnums=0)
    batch = jnp.asarray(tokens)
    holder = [state]

    def call():
        holder[0], loss = step(holder[0], batch)
        return loss

    return call


def hf_trainer(hf, tokens: np.ndarray, lr: float, clip: float) -> Callable:
    import torch

    optimizer = torch.optim.AdamW(hf.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    inputs = torch.as_tensor(np.array(tokens[:, :-1], dtype=np.int64))
    targets = torch.as_tensor(np.array(tokens[:, 1:], dtype=np.int64))

    def call():
        optimizer.zero_grad(set_to_none=True)
        logits = hf(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))  # fmt: skip
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), clip)
        optimizer.step()
        return loss.detach()

    return call


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def run(
    settings: PretrainBenchSettings = FULL, log: Callable[[str], None] = lambda _: None
) -> dict:
    """Every measurement, in one process; a JSON-ready dict (module docstring)."""
    import torch

    config = settings.config()
    torch.manual_seed(0)
    hf = hf_model(config)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, config.vocab, (settings.batch, settings.seq_len + 1)).astype(np.int32)
    log("pretrain vs hf: first steps")
    ours = jax_trainer(config, hf, tokens, settings.lr)
    theirs = hf_trainer(hf, tokens, settings.lr, config.clip)
    loss_jax, loss_hf = float(ours()), float(theirs())  # step 0, same weights, same batch
    peak = matmul_rate(PEAK_MATMUL, settings.matmuls)

    def repeat(fn):
        def call():
            out = None
            for _ in range(settings.steps):
                out = fn()
            return out

        return call

    calls = {"jax": repeat(ours), "hf_eager": repeat(theirs), "matmul": peak}
    log(f"pretrain vs hf: {settings.repeats} interleaved rounds of {settings.steps} steps")
    times = {name: [] for name in calls}
    for _ in range(settings.repeats):
        for name, fn in calls.items():
            times[name].append(_timed(fn))
    wall = {name: np.array(t) for name, t in times.items()}
    step_flops = train_flops_per_step(config)
    peak_rates = settings.matmuls * 2.0 * PEAK_MATMUL**3 / wall["matmul"]
    utilisation = settings.steps * step_flops / wall["jax"] / peak_rates
    result = {
        "pretrain_vs_hf_step_speedup": float(np.median(wall["hf_eager"] / wall["jax"])),
        "pretrain_flop_utilisation": float(np.median(utilisation)),
        "step_seconds": {
            k: float(np.median(v)) / settings.steps for k, v in wall.items() if k != "matmul"
        },  # fmt: skip
        "peak_matmul_gflops": float(np.median(peak_rates)) / 1e9,
        "model_gflops_per_step": step_flops / 1e9,
        "loss_step0": {"jax": loss_jax, "hf_eager": loss_hf},
        "loss_step0_rel_diff": abs(loss_jax - loss_hf) / abs(loss_hf),
        "settings": dataclasses.asdict(settings),
        "threads": {"torch": torch.get_num_threads(), "cpus": os.cpu_count()},
        "load_average": os.getloadavg()[0],
    }
    values = {k: result[k] for k in TARGETS}
    result["targets"] = {
        name: {"value": values[name], "target": t, "met": values[name] >= t}
        for name, t in TARGETS.items()
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m weakspots.benchmarks.pretrain_step")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    reason = available()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 1
    result = run(QUICK if args.quick else FULL, lambda m: print(m, file=sys.stderr))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

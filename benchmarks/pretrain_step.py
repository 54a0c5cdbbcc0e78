"""Pretraining steps of the full-attention backbone, the project's against HF's Qwen3, in one run.

A step is the forward pass, the backward pass and an AdamW update (global-norm clipping
first) on one batch of next-token prediction, for every seed of a run. `CHOSEN` is the
shape the CPU recipes train (issue 57): d 128, 2 layers, 4 query heads of 32, 1 KV head,
SwiGLU 384, batch 4 x 128, 2 seeds, the corpus's vocabulary (2,972; `--vocab 628` for the
`--open-words 64` one); `SWEEP` the sweep's width (`sims.experiments.pretrain.sweep`, size
`h200`: d 256, 4 layers, 8 heads, SwiGLU 768, batch 8 x 384, one seed).

* `jax`: `sims.pretrain.train.advance_many`, the trainer's own compiled block (every seed
  vmapped, `steps` steps in `lax.scan`), every seed from HF's weights;
* `hf_eager`: transformers' `Qwen3ForCausalLM` of the same shape (eager attention) with
  `torch.nn.utils.clip_grad_norm_` and `torch.optim.AdamW`, as a PyTorch user trains it:
  one model per seed, stepped in turn.

Before timing, both sides' losses at step 0 (same weights, same batch) are compared
(`loss_step0_rel_diff`). Calls run in interleaved rounds (one of each, and the peak matmul
call, per round); `pretrain_vs_hf_step_speedup` is the median over rounds of HF's time
over ours (wall clock; `cpu_time_ratios` the same on process CPU time, which a shared
machine's waits do not inflate). `pretrain_flop_utilisation`: our steps' model FLOPs
(`idealized.pretrain.model.train_flops_per_step`, matmuls as computed, the causal mask's
zeros counted) per second over the machine's float32 matmul rate measured in the same
rounds (`benchmarks.lm_throughput.matmul_rate`, square matrices of `PEAK_MATMUL`).

    python -m weakspots.benchmarks.pretrain_step [--quick] [--shape chosen|sweep] [--vocab N]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from flax import nnx

from weakspots.benchmarks.lm_throughput import PEAK_MATMUL, matmul_rate
from weakspots.benchmarks.timing import interleaved, ratios
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.model import Backbone, train_flops_per_step

TARGETS = {"pretrain_vs_hf_step_speedup": 2.0, "pretrain_flop_utilisation": 0.4}


@dataclasses.dataclass(frozen=True)
class PretrainBenchSettings:
    d_model: int = 128
    layers: int = 2
    heads: int = 4
    kv_heads: int = 1
    head_dim: int = 32
    mlp_hidden: int = 384
    vocab: int = 2972  # the corpus tokenizer's size
    seq_len: int = 128
    batch: int = 4
    seeds: int = 2
    steps: int = 10  # steps per timed call
    repeats: int = 7  # interleaved rounds
    matmuls: int = 8  # peak-rate matmuls per round
    lr: float = 1e-3

    def config(self) -> PretrainConfig:
        fields = {f.name for f in dataclasses.fields(PretrainConfig)}
        shared = {k: v for k, v in dataclasses.asdict(self).items() if k in fields}
        return PretrainConfig(**shared, attention="full", rope_theta=10000.0)


CHOSEN = PretrainBenchSettings()
FULL = CHOSEN
QUICK = PretrainBenchSettings(steps=4, repeats=3, matmuls=4)
SWEEP = PretrainBenchSettings(d_model=256, layers=4, heads=8, mlp_hidden=768, seq_len=384,
                              batch=8, seeds=1, steps=2, repeats=5)  # fmt: skip
SHAPES = {"chosen": CHOSEN, "sweep": SWEEP}
TINY = PretrainBenchSettings(d_model=32, layers=1, heads=4, kv_heads=2, head_dim=8,
                             mlp_hidden=32, vocab=40, seq_len=24, batch=2, seeds=2, steps=1,
                             repeats=2, matmuls=1)  # fmt: skip


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


def jax_trainer(config: PretrainConfig, hf, tokens: np.ndarray, steps: int, lr: float):
    """`(call, first_losses)`: `call()` runs `steps` steps of every seed (the trainer's
    `advance_many`), every seed starting from HF's weights; `first_losses()` the losses of
    one call, `(seeds, steps)`."""
    from weakspots.sims.pretrain import train

    model = Backbone(config.static, rngs=nnx.Rngs(0))
    load_hf_weights(model, hf)
    hyper = train.Hyper.of(config.replace(lr=lr, warmup=0))
    params = jax.tree.map(lambda x: jnp.stack([x] * config.seeds), nnx.split(model)[1])
    states = train.TrainState(
        params,
        jax.vmap(lambda p, h: train.optimizer(h, h.lr).init(p))(params, hyper),
        jnp.zeros((config.seeds,), jnp.int32),
    )
    block = jnp.asarray(np.broadcast_to(tokens, (config.seeds, steps, *tokens.shape)))
    holder = [states]

    def call():
        holder[0], losses = train.advance_many(config.static, holder[0], hyper, block)
        return losses

    return call


def hf_trainer(models: list, tokens: np.ndarray, steps: int, lr: float, clip: float) -> Callable:
    """`call()`: `steps` steps of every model in turn (one model per seed); returns the
    losses `(seeds, steps)`."""
    import torch

    optimizers = [
        torch.optim.AdamW(hf.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
        for hf in models
    ]
    inputs = torch.as_tensor(np.array(tokens[:, :-1], dtype=np.int64))
    targets = torch.as_tensor(np.array(tokens[:, 1:], dtype=np.int64))

    def step(hf, optimizer):
        optimizer.zero_grad(set_to_none=True)
        logits = hf(inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 targets.reshape(-1))  # fmt: skip
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), clip)
        optimizer.step()
        return loss.detach()

    def call():
        return torch.stack(
            [
                torch.stack([step(hf, opt) for _ in range(steps)])
                for hf, opt in zip(models, optimizers, strict=True)
            ]
        )

    return call


def run(
    settings: PretrainBenchSettings = FULL, log: Callable[[str], None] = lambda _: None
) -> dict:
    """Every measurement, in one process; a JSON-ready dict (module docstring)."""
    import copy

    import torch

    load_at_start = os.getloadavg()[0]
    config = settings.config()
    torch.manual_seed(0)
    hf = hf_model(config)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, config.vocab, (settings.batch, settings.seq_len + 1)).astype(np.int32)
    log("pretrain vs hf: first steps")
    ours = jax_trainer(config, hf, tokens, settings.steps, settings.lr)
    models = [hf] + [copy.deepcopy(hf) for _ in range(config.seeds - 1)]
    theirs = hf_trainer(models, tokens, settings.steps, settings.lr, config.clip)
    # the first call of each, from the same weights on the same batch
    losses_jax, losses_hf = np.asarray(ours()), theirs().numpy()
    loss_jax, loss_hf = float(losses_jax[0, 0]), float(losses_hf[0, 0])
    peak = matmul_rate(PEAK_MATMUL, settings.matmuls)
    calls = {"jax": ours, "hf_eager": theirs, "matmul": peak}
    log(f"pretrain vs hf: {settings.repeats} interleaved rounds of {settings.steps} steps")
    times = interleaved(calls, settings.repeats)
    seed_steps = config.seeds * settings.steps
    work = {"jax": seed_steps, "hf_eager": seed_steps}
    step_flops = train_flops_per_step(config)
    peak_flops = settings.matmuls * 2.0 * PEAK_MATMUL**3

    def utilisation(clock: str) -> float:  # per round: our FLOP rate / the matmul rate
        rates = [
            (seed_steps * step_flops / getattr(a, clock)) / (peak_flops / getattr(m, clock))
            for a, m in zip(times["jax"], times["matmul"], strict=True)
        ]
        return float(np.median(rates))

    speedup = ratios(times, work, "jax", "hf_eager")
    result = {
        "pretrain_vs_hf_step_speedup": speedup["wall"],
        "pretrain_flop_utilisation": utilisation("wall"),
        "cpu_time_ratios": {
            "pretrain_vs_hf_step_speedup": speedup["cpu"],
            "pretrain_flop_utilisation": utilisation("cpu"),
        },  # fmt: skip
        "seed_step_seconds": {  # one step of one seed, median over rounds
            k: float(np.median([t.wall for t in times[k]])) / seed_steps for k in work
        },
        "peak_matmul_gflops": peak_flops / np.median([t.wall for t in times["matmul"]]) / 1e9,
        "model_gflops_per_seed_step": step_flops / 1e9,
        "tokens_per_second": {
            k: settings.batch * settings.seq_len / v for k, v in _seed_step(times, work).items()
        },
        "loss_step0": {"jax": loss_jax, "hf_eager": loss_hf},
        "loss_step0_rel_diff": abs(loss_jax - loss_hf) / abs(loss_hf),
        "loss_last_first_call_rel_diff": float(
            np.max(np.abs(losses_jax[:, -1] - losses_hf[:, -1]) / np.abs(losses_hf[:, -1]))
        ),
        "settings": dataclasses.asdict(settings),
        "threads": {"torch": torch.get_num_threads(), "cpus": os.cpu_count()},
        "versions": {
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "torch": torch.__version__,
            "cpu": _cpu_model(),
        },  # fmt: skip
        "load_average": [load_at_start, os.getloadavg()[0]],
    }
    values = {k: result[k] for k in TARGETS}
    result["targets"] = {
        name: {"value": values[name], "target": t, "met": values[name] >= t}
        for name, t in TARGETS.items()
    }
    return result


def dense_exact_heads(layer, x):
    """The compressed layer's heads with every exact token scored, then masked (`T x T`):
    how the layer computed them before `attention.Band`."""
    from weakspots.idealized.pretrain import attention

    config, length = layer.config, x.shape[1]
    k, v = layer.exact(x)
    k = layer.normed_keys(k, jnp.arange(length))
    v = k if v is None else v
    ek, ev = layer.entries(x)
    sources = [
        attention.Keys(ek, ev, attention.entry_visibility(config, length)),
        attention.Keys(k, v, attention.exact_visibility(config, length)),
    ]
    return attention.grouped_attention(layer.queries(x), sources)


def band_speedup(settings: PretrainBenchSettings = CHOSEN, repeats: int = 7, **design) -> dict:
    """One compressed layer's forward and backward (`seeds x batch` sequences at the
    settings' shape; default design W8/S8, local window 16), the band against the dense
    product, interleaved rounds; the outputs' largest difference beside the ratio."""
    from weakspots.idealized.pretrain import attention

    design = {"window": 8, "stride": 8, **design}
    config = settings.config().replace(attention="compressed", **design)
    layer = attention.CompressedAttention(config, rngs=nnx.Rngs(0))
    graph, params = nnx.split(layer)
    shape = (settings.seeds * settings.batch, settings.seq_len, settings.d_model)
    x = jax.random.normal(jax.random.key(1), shape, jnp.float32)

    def grad_of(heads):
        loss = lambda p, x: jnp.sum(heads(nnx.merge(graph, p), x) ** 2)  # noqa: E731
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))

    band = grad_of(lambda m, y: m.heads(y))
    dense = grad_of(dense_exact_heads)
    gap = float(jnp.max(jnp.abs(layer.heads(x) - dense_exact_heads(layer, x))))
    calls = {"band": lambda: band(params, x), "dense": lambda: dense(params, x)}
    for call in calls.values():
        jax.block_until_ready(call())
    times = interleaved(calls, repeats)
    return {
        "design": design,
        "band_vs_dense_speedup": ratios(times, {"band": 1, "dense": 1}, "band", "dense"),
        "max_abs_difference": gap,
        "load_average": os.getloadavg()[0],
    }


def _seed_step(times, work) -> dict[str, float]:
    return {k: float(np.median([t.wall for t in times[k]])) / work[k] for k in work}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            names = [
                line.split(":", 1)[1].strip() for line in info if line.startswith("model name")
            ]
    except OSError:
        return "unknown"
    return names[0] if names else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m weakspots.benchmarks.pretrain_step")
    parser.add_argument("--quick", action="store_true", help="fewer steps and rounds")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="chosen",
                        help="chosen: the CPU recipes' d 128 shape (default); sweep: d 256")  # fmt: skip
    parser.add_argument("--vocab", type=int, default=None,
                        help="vocabulary size (default 2972, the corpus tokenizer's)")  # fmt: skip
    parser.add_argument("--band", action="store_true",
                        help="time the compressed layer's band against its dense product only")  # fmt: skip
    args = parser.parse_args(argv)
    if args.band:
        print(json.dumps({"w8s8": band_speedup(), "w4s4": band_speedup(window=4, stride=4)}))
        return 0
    reason = available()
    if reason is not None:
        print(reason, file=sys.stderr)
        return 1
    settings = SHAPES[args.shape]
    if args.quick:
        settings = dataclasses.replace(settings, steps=QUICK.steps, repeats=QUICK.repeats)
    if args.vocab is not None:
        if args.vocab < 2:
            parser.error(f"--vocab must be >= 2, got {args.vocab}")
        settings = dataclasses.replace(settings, vocab=args.vocab)
    result = run(settings, lambda m: print(m, file=sys.stderr))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One V4 attention layer's training step, the project's against transformers', in one run.

A training step (forward, backward, AdamW update) of DeepSeek-V4's attention, a CSA layer
(overlapping compressor, Lightning Indexer, top-k) and an HCA layer, on the same shapes,
weights and batch:

* `jax`: `idealized.decoder.v4_attention.V4Attention` loaded with the HF layer's weights
  (`interop.hf.layer_from_hf`), loss, gradient and `optax.adamw` in one jitted step;
* `hf_eager`: transformers' `DeepseekV4Attention` (eager attention) with
  `torch.optim.AdamW`, as a PyTorch user trains it;
* `hf_compile`: the same with the layer's forward under `torch.compile` (backward through
  AOTAutograd, the optimizer eager); a failure is caught and reported in `hf_compile_error`.

The loss is the mean squared difference between the layer's output and a fixed random
target. Every call times `steps` steps of both layers (CSA then HCA); the calls run in
interleaved rounds (one of each per round), and a ratio is the median over rounds of the
ratio within a round: `lm_vs_hf_step_speedup` = HF eager step time / JAX step time
(`lm_vs_hf_compile_step_speedup` for the compiled HF step). Before timing, the two sides
are checked to compute the same thing: the loss at step 0, from the same weights
(`loss_step0_rel_diff`), and after one AdamW step (`loss_step1_rel_diff`, beside
`loss_step1_change`, how far the step moved the loss; the learning rate is small enough
that the step flips no top-k choice).

Needs torch and transformers >= 5.24 (the `[hf]` extra). Run as a script to print the JSON:

    python -m weakspots.benchmarks.v4_vs_hf [--quick]
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
import optax
from flax import nnx

from weakspots.idealized.decoder.layers.base import ALL
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind

KINDS = ("compressed_sparse_attention", "heavily_compressed_attention")
TARGETS = {"lm_vs_hf_step_speedup": 3.0}


@dataclasses.dataclass(frozen=True)
class V4BenchSettings:
    """The layer's shapes (transformers' `DeepseekV4Config` names) and how much is timed."""

    hidden: int = 512
    heads: int = 8
    head_dim: int = 64
    q_rank: int = 128
    o_groups: int = 2
    o_rank: int = 64
    index_heads: int = 4
    index_dim: int = 32
    index_topk: int = 32
    window: int = 64
    csa_ratio: int = 4
    hca_ratio: int = 32
    rope_fraction: float = 0.25
    length: int = 1024
    batch: int = 1
    steps: int = 2  # training steps of each layer per timed call
    repeats: int = 5  # interleaved rounds
    compile: bool = True  # also time torch.compile
    lr: float = 1e-4  # small enough that one step flips no top-k choice (the step-1 check)
    weight_decay: float = 0.01
    seed: int = 0


FULL = V4BenchSettings()
QUICK = V4BenchSettings(length=512, repeats=3, compile=False)  # torch.compile only at full: its first call alone outlasts a quick bench
TINY = V4BenchSettings(
    hidden=32, heads=2, head_dim=16, q_rank=8, o_rank=8, index_dim=8, index_topk=2,
    window=5, hca_ratio=8, rope_fraction=0.5, length=35, batch=2, steps=1, repeats=2,
    compile=False,
)  # fmt: skip


def available() -> str | None:
    """None when torch and transformers' DeepSeek-V4 import, else why not (one line)."""
    try:
        import torch  # noqa: F401
        from transformers.models.deepseek_v4 import modeling_deepseek_v4  # noqa: F401
    except ImportError as error:
        return f"needs the [hf] extra (torch, transformers >= 5.24): {error}"
    return None


def hf_config(settings: V4BenchSettings):
    """transformers' `DeepseekV4Config` of a two-layer (CSA, HCA) model at these shapes."""
    from transformers import DeepseekV4Config

    s = settings
    config = DeepseekV4Config(
        vocab_size=16,
        hidden_size=s.hidden,
        num_attention_heads=s.heads,
        head_dim=s.head_dim,
        q_lora_rank=s.q_rank,
        o_groups=s.o_groups,
        o_lora_rank=s.o_rank,
        index_n_heads=s.index_heads,
        index_head_dim=s.index_dim,
        index_topk=s.index_topk,
        sliding_window=s.window,
        compress_rates={KINDS[0]: s.csa_ratio, KINDS[1]: s.hca_ratio},
        num_hidden_layers=len(KINDS),
        layer_types=list(KINDS),
        partial_rotary_factor=s.rope_fraction,
        n_routed_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=8,
    )
    config._attn_implementation = "eager"
    return config


def _init(module, seed: int) -> None:
    """Random weights at a trainable scale: matrices `N(0, 1 / fan_in)`, norm weights
    `1 + N(0, 0.1^2)`, sinks and position biases `N(0, 0.3^2)`."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                param.copy_(1.0 + 0.1 * noise)
            elif param.ndim == 2 and name.endswith("weight"):
                param.copy_(noise / float(np.sqrt(param.shape[1])))
            else:
                param.copy_(0.3 * noise)


@dataclasses.dataclass
class Problem:
    """Both layers' weights (HF state dicts as numpy), the batch and the target."""

    config: object
    states: list[dict[str, np.ndarray]]
    x: np.ndarray  # (B, T, D)
    target: np.ndarray  # (B, T, D)


def problem(settings: V4BenchSettings) -> Problem:
    """Random weights for each layer kind, a random batch and target (seeded)."""
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf

    config = hf_config(settings)
    states = []
    for index in range(len(KINDS)):
        layer = hf.DeepseekV4Attention(config, index)
        _init(layer, settings.seed * 100 + index)
        states.append({k: v.detach().numpy().copy() for k, v in layer.state_dict().items()})
    rng = np.random.default_rng(settings.seed)
    shape = (settings.batch, settings.length, settings.hidden)
    return Problem(
        config,
        states,
        rng.standard_normal(shape).astype(np.float32),
        rng.standard_normal(shape).astype(np.float32),
    )


# ---- FLOP counts ------------------------------------------------------------------------


def _banded(length: int, window: int) -> int:
    """Query rows x key slots of the banded local branch (`attention.local_scores`)."""
    size = min(window, length)
    return -(-length // size) * size * 2 * size


def v4_layer_flops(
    kind: str,
    *,
    length: int,
    d_model: int,
    heads: int,
    head_dim: int,
    kv_heads: int = 1,
    ratio: int = 4,
    local_window: int = 0,
    q_rank: int = 0,
    o_groups: int = 0,
    o_rank: int = 0,
    index_topk: int = 0,
    index_heads: int = 4,
    index_dim: int = 16,
    separate_values: bool = False,
) -> dict[str, float]:
    """Forward FLOPs of one `V4Attention` on one sequence, by part (`V4Attention`'s names).

    `matmul`: the projections (query path, KV, compressor's value and gate, output) and
    attention, `2 head_dim` per score and per weighted value for every head, against all
    `T // ratio` compressed entries (the layer scores them all, then masks) and the banded
    local keys (`sliding`: `local_window` is the window). `indexer` (csa, `index_topk > 0`):
    its compressor's projections, queries, head weights, the `index_heads x index_dim` dot
    of every query with every entry and the weighted sum over heads. `top_k`: one
    comparison per (query, entry) score. Pooling, norms and RoPE are not counted.
    `indexer_projections`: the part of `indexer` that projects the (detached) input.
    `separate_values` (not V4's): the value projection and compressor too.
    """
    T, D, H, hd = length, d_model, heads, head_dim
    flops = 2 * T * (D * q_rank + q_rank * H * hd) if q_rank else 2 * T * D * H * hd
    copies = 2 if separate_values else 1  # keys (= values in V4), and values of their own
    flops += copies * 2 * T * D * kv_heads * hd
    entries = 0
    if kind != "sliding":
        entries = T // ratio
        coff = 2 if kind == "csa" else 1
        flops += copies * 2 * 2 * T * D * kv_heads * coff * hd
    scored = T * entries + (_banded(T, local_window) if local_window else 0)
    flops += 2 * 2 * hd * H * scored
    if o_groups:
        flops += 2 * T * (H * hd * o_rank + o_groups * o_rank * D)
    else:
        flops += 2 * T * H * hd * D
    projections = scoring = top_k = 0.0
    if kind == "csa" and index_topk:
        projections = 2 * 2 * T * D * 2 * index_dim  # its overlapping compressor, one head
        projections += 2 * T * (q_rank or D) * index_heads * index_dim  # queries
        projections += 2 * T * D * index_heads  # head weights
        scoring = 2 * T * entries * index_heads * index_dim + 2 * T * entries * index_heads
        top_k = T * entries
    return {
        "matmul": float(flops),
        "indexer": float(projections + scoring),
        "indexer_projections": float(projections),
        "top_k": float(top_k),
    }


def decoder_flops_per_step(config) -> float:
    """FLOPs of one training step of an `LMConfig` decoder of V4 layers (`swa`, `csa`,
    `hca`), by count, as `sims.decoder.train.model_flops_per_step` counts other decoders: per
    layer `v4_layer_flops` and the MLP, plus the unembedding of the query section, forward
    and backward (3x the forward). The indexer, whose input is detached but whose KL the
    trainer differentiates: forward once, its projections' weight gradients (1x) and its
    scores' two gradients (2x); top-k once."""
    d, T = config.d_model, config.seq_len
    forward = 2.0 * d * config.task.vocab * (T - config.task.context_len)
    once = 0.0
    for name in config.layer_kinds:
        kind = layer_kind(name)
        if not kind.v4:
            raise ValueError(f"layer kind {name!r}: use sims.decoder.train.model_flops_per_step")
        dense = kind.reads(config) == ALL
        window = kind.local_reach(config) if kind.sliding else T if dense else config.local_window
        parts = v4_layer_flops(
            "sliding" if kind.sliding or dense else name,
            length=T,
            d_model=d,
            heads=config.heads,
            head_dim=d // config.heads,
            kv_heads=1 if config.shared_kv else config.heads,
            ratio=kind.ratio(config),
            local_window=window,
            q_rank=config.q_rank,
            o_groups=config.o_groups,
            o_rank=config.o_rank,
            index_topk=config.indexer_topk,
            index_heads=config.index_heads,
            index_dim=config.index_dim,
            separate_values=config.separate_values,
        )
        forward += parts["matmul"] + 2 * 2 * config.mlp * d * d * T
        # the indexer's KL is differentiated (even at weight 0): its projections' weight
        # gradients (1x) and through its scores (2x); its input is detached
        once += parts["indexer"] + parts["top_k"] + parts["indexer_projections"]
        once += 2 * (parts["indexer"] - parts["indexer_projections"])
    return (3.0 * forward + once) * config.batch


# ---- the project's side ----------------------------------------------------------------


def jax_trainer(problem: Problem, settings: V4BenchSettings):
    """`step()`: advances both layers one AdamW step, returns their losses before it.
    Parameters and optimizer states live in the closure, as a training loop keeps them."""
    from weakspots.interop.hf import layer_from_hf

    config = problem.config.to_dict()
    optimizer = optax.adamw(settings.lr, b1=0.9, b2=0.999, eps=1e-8,
                            weight_decay=settings.weight_decay)  # fmt: skip
    x, target = jnp.asarray(problem.x), jnp.asarray(problem.target)
    layers = []
    for index, state in enumerate(problem.states):
        graph, params = nnx.split(layer_from_hf(config, state, index))
        layers.append([graph, params, optimizer.init(params)])

    def loss_of(graph):
        def loss(params, x, target):
            out = nnx.merge(graph, params)(x)
            return jnp.mean((out - target) ** 2)

        return loss

    steps = []
    for graph, _, _ in layers:
        loss = loss_of(graph)

        @jax.jit
        def step(params, opt_state, x, target, loss=loss):
            value, grads = jax.value_and_grad(loss)(params, x, target)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, value

        steps.append(step)

    def advance():
        values = []
        for held, step in zip(layers, steps, strict=True):
            held[1], held[2], value = step(held[1], held[2], x, target)
            values.append(value)
        return values

    return advance


# ---- transformers' side ----------------------------------------------------------------


def hf_trainer(problem: Problem, settings: V4BenchSettings, *, compile: bool = False):
    """As `jax_trainer`, for transformers' `DeepseekV4Attention` and `torch.optim.AdamW`
    (with `compile`, the layer's forward and loss under `torch.compile`)."""
    import torch
    from transformers.masking_utils import create_sliding_window_causal_mask
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf

    config = problem.config
    x, target = torch.from_numpy(problem.x), torch.from_numpy(problem.target)
    positions = torch.arange(x.shape[1])[None].expand(x.shape[0], -1)
    rotary = hf.DeepseekV4RotaryEmbedding(config)
    tables = {k: rotary(x, positions, layer_type=k) for k in ("main", "compress")}
    mask = create_sliding_window_causal_mask(
        config=config, inputs_embeds=x, attention_mask=None, cache=None, position_ids=positions
    )
    held = []
    for index, state in enumerate(problem.states):
        layer = hf.DeepseekV4Attention(config, index)
        layer.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
        layer.train()
        optimizer = torch.optim.AdamW(
            layer.parameters(), lr=settings.lr, betas=(0.9, 0.999), eps=1e-8,
            weight_decay=settings.weight_decay,
        )  # fmt: skip

        def loss(layer=layer):
            out, _ = layer(x, position_embeddings=tables, position_ids=positions,
                           attention_mask=mask)  # fmt: skip
            return torch.mean((out - target) ** 2)

        held.append((torch.compile(loss) if compile else loss, optimizer))

    def advance():
        values = []
        for loss, optimizer in held:
            optimizer.zero_grad(set_to_none=True)
            value = loss()
            value.backward()
            optimizer.step()
            values.append(value.detach())
        return values

    return advance


# ---- the comparison ----------------------------------------------------------------------


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return time.perf_counter() - wall, time.process_time() - cpu


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def sanity(jax_losses: list[list[float]], hf_losses: list[list[float]]) -> dict:
    """Both sides' losses at steps 0 and 1 (`[step][layer]`), compared: the largest relative
    difference at each step, and the smallest relative change of a loss over the step."""
    zero = [_relative(a, b) for a, b in zip(jax_losses[0], hf_losses[0], strict=True)]
    one = [_relative(a, b) for a, b in zip(jax_losses[1], hf_losses[1], strict=True)]
    moved = [_relative(a, b) for a, b in zip(hf_losses[1], hf_losses[0], strict=True)]
    return {
        "losses": {"jax": jax_losses, "hf": hf_losses},
        "loss_step0_rel_diff": max(zero),
        "loss_step1_rel_diff": max(one),
        "loss_step1_change": min(moved),
    }


def run(settings: V4BenchSettings = FULL, log: Callable[[str], None] = lambda _: None) -> dict:
    """Every measurement, in one process; a JSON-ready dict (module docstring)."""
    import torch

    load_at_start = os.getloadavg()[0]
    data = problem(settings)
    result = {}

    def repeat(step):
        def call():
            out = None
            for _ in range(settings.steps):
                out = step()
            return out

        return call

    calls, compile_seconds, losses = {}, {}, {}
    for name, make in (("jax", jax_trainer), ("hf_eager", hf_trainer)):
        log(f"v4 vs hf: {name} first steps")
        step = make(data, settings)
        start = time.perf_counter()
        losses[name] = [[float(v) for v in step()]]  # step 0, from the same weights
        compile_seconds[name] = time.perf_counter() - start
        losses[name].append([float(v) for v in step()])  # step 1
        calls[name] = repeat(step)
    result["sanity"] = sanity(losses["jax"], losses["hf_eager"])
    result["hf_compile_error"] = None
    if settings.compile:
        log("v4 vs hf: torch.compile first step")
        try:
            step = hf_trainer(data, settings, compile=True)
            start = time.perf_counter()
            first = [float(v) for v in step()]
            compile_seconds["hf_compile"] = time.perf_counter() - start
            step()  # a second call: a recompilation fails here, not in the timed rounds
            result["sanity"]["hf_compile_loss_step0_rel_diff"] = max(
                _relative(a, b) for a, b in zip(first, losses["hf_eager"][0], strict=True)
            )
            calls["hf_compile"] = repeat(step)
        except Exception as error:  # noqa: BLE001  (any failure of the compiler is reported)
            line = (str(error).strip().splitlines() or [""])[0][:300]
            result["hf_compile_error"] = f"{type(error).__name__}: {line}"
    else:
        result["hf_compile_error"] = "not tried (settings.compile is off)"

    log(f"v4 vs hf: {settings.repeats} interleaved rounds of {settings.steps} steps")
    times = {name: [] for name in calls}
    for _ in range(settings.repeats):
        for name, fn in calls.items():
            times[name].append(_timed(fn))
    wall = {name: np.array([t[0] for t in ts]) for name, ts in times.items()}
    cpu = {name: np.array([t[1] for t in ts]) for name, ts in times.items()}
    step_count = settings.steps
    result.update(
        {
            "lm_vs_hf_step_speedup": float(np.median(wall["hf_eager"] / wall["jax"])),
            "lm_vs_hf_compile_step_speedup": (
                float(np.median(wall["hf_compile"] / wall["jax"])) if "hf_compile" in wall else None
            ),
            "cpu_time_ratios": {
                name: float(np.median(cpu[name] / cpu["jax"])) for name in cpu if name != "jax"
            },
            "median_step_seconds": {  # both layers, one step each
                name: float(np.median(w)) / step_count for name, w in wall.items()
            },
            "cpu_seconds_per_wall_second": {
                name: float(np.median(cpu[name] / wall[name])) for name in wall
            },
            "first_call_seconds": compile_seconds,
            "threads": {"torch": torch.get_num_threads(), "cpus": os.cpu_count()},
            "settings": dataclasses.asdict(settings),
            "versions": {"torch": torch.__version__, "jax": jax.__version__,
                         "transformers": _transformers_version()},  # fmt: skip
            "platform": jax.default_backend(),
            "load_average": [load_at_start, os.getloadavg()[0]],
        }
    )
    result["targets"] = {
        name: {"value": result[name], "target": t, "met": bool(result[name] >= t)}
        for name, t in TARGETS.items()
    }
    result["targets"]["lm_vs_hf_step_speedup"]["met"] &= result["sanity"][
        "loss_step0_rel_diff"
    ] <= 1e-4
    return result


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T=512, 3 rounds")
    parser.add_argument("--tiny", action="store_true", help="the test's sizes")
    args = parser.parse_args()
    reason = available()
    if reason is not None:
        print(f"v4_vs_hf: {reason}", file=sys.stderr)
        sys.exit(2)
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"v4_vs_hf [{time.perf_counter() - start:5.1f}s]: {message}", file=sys.stderr,
              flush=True)  # fmt: skip

    settings = TINY if args.tiny else QUICK if args.quick else FULL
    print(json.dumps(run(settings, log), indent=1))


if __name__ == "__main__":
    main()

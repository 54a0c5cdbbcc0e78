"""Decoder training throughput, as ratios measured in one run.

* `lm_speedup_vs_loop` (measured, no target): training tokens per second of `sims.decoder.train`
  advancing a batch of R seeds at once (one compiled, vmapped program, `eval_every` steps
  in `lax.scan`) over the same R seeds trained one at a time from a Python loop (a jitted
  single-run step per call, the trainer a user writes first). Both do the same work: the steps, and
  the held-out loss and accuracy that end each block of `eval_every` steps.
* `lm_flop_utilisation`: a full V4 decoder's batched trainer (`V4_DESIGN`: sliding, CSA
  with Lightning Indexer and top-k, HCA, CSA), its model FLOPs per second
  (`benchmarks.v4_vs_hf.decoder_flops_per_step`: matmuls, the indexer and top-k counted,
  forward and backward, plus the held-out forward pass) over the machine's float32 matmul
  rate, measured in the same run on square matrices (`PEAK_MATMUL` a side) with the same
  threads. The default decoder's, counted by `sims.decoder.train.model_flops_per_step`, is
  `default_decoder_flop_utilisation`; the same V4 decoder 8 times as wide (d = 512,
  `wide_v4_config`), whose step is mostly matmuls, `wide_v4_flop_utilisation`.

Beside the two ratios, to say where the time goes (measured in the same rounds): the
matmul rate at the model's own shapes (`model_shape_matmul_rates`: the projections,
`(B T) x D @ D x D`; dense attention, `T x hd @ hd x T` batched over `B H`; the banded
local branch, `W x hd @ hd x 2W` batched over `B H T/W`) against the square one; the
single-seed loop's own utilisation; the CPU seconds each call used per wall second (2
means both cores busy); and the share of the model FLOPs spent on the held-out evaluation
that ends each block.

Each timed call runs in interleaved rounds (batch, loop, matmul in turn) so that load
from other jobs falls on all three; a ratio is the median over rounds of the ratio within
a round. Run as a script to print the JSON:

    python -m weakspots.benchmarks.lm_throughput [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.benchmarks import v4_vs_hf
from weakspots.idealized.decoder.config import V4_DESIGN, LMConfig
from weakspots.idealized.precision import float64_module
from weakspots.sims.decoder import train as lm_train

TARGETS = {"lm_flop_utilisation": 0.5}  # lm_speedup_vs_loop is measured, with no target
PEAK_MATMUL = 1024  # side of the square float32 matmul that measures the machine's rate


@dataclasses.dataclass(frozen=True)
class LMBenchSettings:
    runs: int = 4  # seeds trained at once, and one by one
    steps: int = 20  # training steps per seed per timed round (one scan block)
    repeats: int = 3  # interleaved rounds
    matmuls: int = 8  # peak-rate matmuls per round


FULL = LMBenchSettings()
QUICK = LMBenchSettings(steps=10, repeats=2, matmuls=4)


def bench_config(settings: LMBenchSettings) -> LMConfig:
    """The default decoder (T=128, d=64, 2 layers: sliding then mean-pooled s=4)."""
    return LMConfig(steps=settings.steps, eval_every=settings.steps)


def v4_config(settings: LMBenchSettings) -> LMConfig:
    """The V4 decoder of `--design v4` (`V4_DESIGN`: swa, csa with indexer, hca, csa)."""
    return LMConfig(**V4_DESIGN, steps=settings.steps, eval_every=settings.steps)


WIDE_SCALE = 8  # the V4 decoder with every width (d, q and o ranks, index dim) 8x: d = 512
WIDE_FIELDS = ("seq_len", "d_model", "heads", "q_rank", "o_rank", "index_dim", "batch", "steps")


def wide_v4_config(settings: LMBenchSettings) -> LMConfig:
    """`v4_config` with its widths `WIDE_SCALE`x (d 512, 4 heads of 128, q rank 256, o rank
    128, index dim 128), one quarter of the steps: where the step's matmuls, not its small
    kernels, take the time."""
    widths = ("d_model", "q_rank", "o_rank", "index_dim")
    steps = max(1, settings.steps // 4)
    return LMConfig(
        **{**V4_DESIGN, **{k: WIDE_SCALE * getattr(LMConfig(**V4_DESIGN), k) for k in widths}},
        steps=steps,
        eval_every=steps,
    )


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return time.perf_counter() - wall, time.process_time() - cpu


def batched_block(config: LMConfig, runs: int) -> Callable[[], object]:
    """A call advancing `runs` seeds of `config` by one block (`eval_every` steps and the
    held-out evaluation) as the batched trainer does; compiled and run once before returning."""
    hyper = lm_train.LMHyper.stack([config.replace(seed=s) for s in range(runs)])
    held_out = lm_train.held_out_batch(config)
    holder = {"states": lm_train._init_many(config, hyper)}

    def call():
        holder["states"], losses, _ = lm_train._advance_many(
            config, holder["states"], hyper, held_out
        )
        return losses

    jax.block_until_ready(call())
    return call


def matmul_rate(side: int, count: int) -> Callable[[], object]:
    """A call doing `count` dependent `side x side` float32 matmuls (FLOPs: `2 side^3` each)."""
    a = jax.random.normal(jax.random.key(0), (side, side), jnp.float32) / float(np.sqrt(side))

    @jax.jit
    def chain(x):
        return jax.lax.fori_loop(0, count, lambda _, y: y @ a, x)

    x0 = jnp.eye(side, dtype=jnp.float32)
    chain(x0).block_until_ready()
    return partial(chain, x0)


def batched_matmul_rate(
    batch: int, rows: int, inner: int, cols: int, count: int
) -> Callable[[], object]:
    """A call doing `count` dependent pairs of batched matmuls at attention's shapes: scores
    `(rows x inner) @ (inner x cols)` then mix `(rows x cols) @ (cols x inner)`, `batch` of
    each (FLOPs: `4 batch rows inner cols` per pair). `batch = 1`, `cols = inner` is a
    projection's `rows x inner @ inner x inner`, applied twice."""
    keys = jax.random.split(jax.random.key(1), 2)
    k = jax.random.normal(keys[0], (batch, cols, inner), jnp.float32) / float(np.sqrt(inner))
    v = jax.random.normal(keys[1], (batch, cols, inner), jnp.float32) / float(np.sqrt(cols))

    @jax.jit
    def chain(x):
        def pair(_, y):
            scores = jnp.einsum("bri,bci->brc", y, k)
            return jnp.einsum("brc,bci->bri", scores, v)

        return jax.lax.fori_loop(0, count, pair, x)

    x0 = jax.random.normal(jax.random.key(2), (batch, rows, inner), jnp.float32)
    chain(x0).block_until_ready()
    return partial(chain, x0)


def model_matmul_shapes(config) -> dict[str, tuple[int, int, int, int]]:
    """`(batch, rows, inner, cols)` of the decoder's matmuls, named (see the module docstring)."""
    hd, heads, T = config.d_model // config.heads, config.heads, config.seq_len
    W = min(config.window, T)
    return {
        "projection": (1, config.batch * T, config.d_model, config.d_model),
        "attention_dense": (config.batch * heads, T, hd, T),
        "attention_banded": (config.batch * heads * -(-T // W), W, hd, 2 * W),
    }


def run(settings: LMBenchSettings = FULL, log: Callable[[str], None] = lambda _: None) -> dict:
    """Every measurement, in one process; a JSON-ready dict with the two ratios."""
    config = bench_config(settings).static
    seeds = [config.replace(seed=s) for s in range(settings.runs)]
    hyper = lm_train.LMHyper.stack(seeds)
    held_out = lm_train.held_out_batch(config)

    log("lm batch: compiling")
    start = time.perf_counter()
    states = lm_train._init_many(config, hyper)
    states, _, _ = lm_train._advance_many(config, states, hyper, held_out)
    jax.block_until_ready(states)
    batch_compile = time.perf_counter() - start
    holder = {"states": states}

    def batched():
        holder["states"], losses, _ = lm_train._advance_many(
            config, holder["states"], hyper, held_out
        )
        return losses

    log("lm loop: compiling")
    one_step = jax.jit(partial(lm_train.step, config))
    one_record = jax.jit(partial(lm_train._record, config))
    singles = [jax.tree.map(lambda x, r=r: x[r], states) for r in range(settings.runs)]
    single_hyper = [jax.tree.map(lambda x, r=r: x[r], hyper) for r in range(settings.runs)]
    jax.block_until_ready(one_step(singles[0], single_hyper[0]))
    jax.block_until_ready(one_record(singles[0].params, held_out))

    def looped():
        out = None
        for r in range(settings.runs):
            state = singles[r]
            for _ in range(settings.steps):
                state, _ = one_step(state, single_hyper[r])
            singles[r] = state
            out = one_record(state.params, held_out)  # the block's held-out loss and accuracy
        return out

    log("lm v4 batch: compiling")
    v4 = v4_config(settings).static
    v4_batched = batched_block(v4, settings.runs)
    log("lm wide v4: compiling")
    wide = wide_v4_config(settings).static
    wide_batched = batched_block(wide, 1)

    log("matmul peak: compiling")
    matmul = matmul_rate(PEAK_MATMUL, settings.matmuls)

    shapes = model_matmul_shapes(config)
    shape_flops = {}
    calls = {
        "batch": batched,
        "loop": looped,
        "v4_batch": v4_batched,
        "wide_v4": wide_batched,
        "matmul": matmul,
    }
    for name, (b, rows, inner, cols) in shapes.items():
        count = max(1, round(settings.matmuls * PEAK_MATMUL**3 / (2 * b * rows * inner * cols)))
        calls[name] = batched_matmul_rate(b, rows, inner, cols, count)
        shape_flops[name] = count * 4.0 * b * rows * inner * cols

    log(f"timing: {settings.repeats} interleaved rounds")
    times = {name: [] for name in calls}
    for _ in range(settings.repeats):
        for name, fn in calls.items():
            times[name].append(_timed(fn))
    tokens = settings.runs * settings.steps * lm_train.tokens_per_step(config)
    held_out_steps = config.eval_batch / config.batch / 3  # one forward pass, in training steps
    flops = (
        settings.runs * (settings.steps + held_out_steps) * lm_train.model_flops_per_step(config)
    )
    v4_held_out_steps = v4.eval_batch / v4.batch / 3
    v4_flops = (
        settings.runs * (settings.steps + v4_held_out_steps) * v4_vs_hf.decoder_flops_per_step(v4)
    )
    wide_flops = (wide.steps + wide.eval_batch / wide.batch / 3) * v4_vs_hf.decoder_flops_per_step(
        wide
    )
    matmul_flops = settings.matmuls * 2.0 * PEAK_MATMUL**3
    wall = {name: np.array([t[0] for t in ts]) for name, ts in times.items()}
    cpu = {name: np.array([t[1] for t in ts]) for name, ts in times.items()}
    speedup = float(np.median(wall["loop"] / wall["batch"]))
    default_utilisation = float(
        np.median((flops / wall["batch"]) / (matmul_flops / wall["matmul"]))
    )
    utilisation = float(np.median((v4_flops / wall["v4_batch"]) / (matmul_flops / wall["matmul"])))
    wide_utilisation = float(
        np.median((wide_flops / wall["wide_v4"]) / (matmul_flops / wall["matmul"]))
    )
    peak = matmul_flops / wall["matmul"]
    cost = one_step.lower(singles[0], single_hyper[0]).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    result = {
        "lm_speedup_vs_loop": speedup,
        "lm_flop_utilisation": utilisation,
        "cpu_time_ratios": {
            "lm_speedup_vs_loop": float(np.median(cpu["loop"] / cpu["batch"])),
            "lm_flop_utilisation": float(
                np.median((v4_flops / cpu["v4_batch"]) / (matmul_flops / cpu["matmul"]))
            ),
        },
        "default_decoder_flop_utilisation": default_utilisation,
        "wide_v4_flop_utilisation": wide_utilisation,
        "wide_v4_config": {k: getattr(wide, k) for k in WIDE_FIELDS},
        "wide_v4_model_flops_per_step": v4_vs_hf.decoder_flops_per_step(wide),
        "v4_model_flops_per_step": v4_vs_hf.decoder_flops_per_step(v4),
        "v4_config": {
            k: getattr(v4, k)
            for k in ("seq_len", "d_model", "heads", "layout", "stride", "hca_stride",
                      "indexer_topk", "batch")
        },  # fmt: skip
        "tokens_per_second": {
            "batch": float(tokens / np.median(wall["batch"])),
            "loop": float(tokens / np.median(wall["loop"])),
        },
        "loop_flop_utilisation": float(np.median((flops / wall["loop"]) / peak)),
        "model_shape_matmul_rates": {
            name: {
                "shape": dict(zip(("batch", "rows", "inner", "cols"), shapes[name], strict=True)),
                "flops_per_second": float(np.median(shape_flops[name] / wall[name])),
                "against_peak": float(np.median(shape_flops[name] / wall[name] / peak)),
            }
            for name in shapes
        },
        "cpu_seconds_per_wall_second": {
            name: float(np.median(cpu[name] / wall[name]))
            for name in ("batch", "loop", "v4_batch", "wide_v4", "matmul")
        },
        "held_out_flops_share": held_out_steps / (settings.steps + held_out_steps),
        "model_flops_per_step": lm_train.model_flops_per_step(config),
        "xla_flops_per_step": float(cost.get("flops", float("nan"))) if cost else None,
        "matmul_flops_per_second": float(matmul_flops / np.median(wall["matmul"])),
        "batch_compile_seconds": batch_compile,
        "settings": dataclasses.asdict(settings),
        "config": {
            k: getattr(config, k)
            for k in ("seq_len", "d_model", "heads", "layers", "stride", "operator", "batch")
        },
        "platform": jax.default_backend(),
    }
    result["targets"] = {
        name: {"value": result[name], "target": t, "met": bool(result[name] >= t)}
        for name, t in TARGETS.items()
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()

    def log(message: str) -> None:
        print(
            f"lm_throughput [{time.perf_counter() - start:5.1f}s]: {message}",
            file=sys.stderr,
            flush=True,
        )

    print(json.dumps(run(QUICK if args.quick else FULL, log), indent=1))


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    main()

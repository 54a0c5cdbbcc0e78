"""Peak memory of one decoder training step against the model's own activations, by T.

For the V4 decoder of `--design v4` (`V4_DESIGN`: sliding, CSA with indexer, HCA, CSA) at
sequence lengths T, one training step (`sims.decoder.train.step`: batch sampled, forward,
backward, AdamW) is compiled, not run, and XLA's `memory_analysis()` gives its peak:
arguments + outputs + temporaries - aliased bytes. Beside it, `activations_bytes` counts
from shapes what the model itself produces per step (`activation_bytes`), and
`peak_over_activations` is the ratio. From the measured peaks' growth (a least-squares
quadratic in T: dense compressed scores grow as T^2 / stride), `largest_t_24gib` is the
largest T whose predicted peak fits in 24 GiB.

    python -m weakspots.benchmarks.lm_memory [--lengths 512,1024,2048,4096] [--batch B]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial

import jax
import numpy as np

from weakspots.idealized.decoder.config import V4_DESIGN, LMConfig
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.sims.decoder import train as lm_train

LENGTHS = (512, 1024, 2048, 4096)
BUDGET = 24 * 2**30  # bytes: a 24 GiB machine


def config_at(length: int, batch: int | None = None) -> LMConfig:
    """`V4_DESIGN` at sequence length `length` (and `batch` sequences per step if given)."""
    extra = {"batch": batch} if batch else {}
    return LMConfig(**V4_DESIGN, seq_len=length, **extra).static


def _banded_slots(length: int, window: int) -> int:
    """Key slots of one query in the banded local branch (`attention.local_scores`)."""
    return 2 * min(window, length)


def activation_bytes(config: LMConfig) -> int:
    """float32 bytes of the tensors one forward pass of a decoder of V4 layers produces, from shapes.

    Per token: the embedding, and per layer its input norm, queries (`H hd`), low-rank
    query (`q_rank`), K = V (one head per KV head), attention output (`H hd`), grouped
    output (`o_groups o_rank`), residual, MLP hidden (`mlp D`); per layer the compressed
    entries; per head and query the scores and probabilities over the compressed entries,
    the banded local keys and the sink; per query the indexer's per-head and summed
    scores; the logits of the query section.
    """
    B, T, D, H = config.batch, config.seq_len, config.d_model, config.heads
    hd = D // H
    kv = 1 if config.shared_kv else H
    total = B * T * D  # embedding
    for name in config.layer_kinds:
        kind = layer_kind(name)
        per_token = 2 * D + 2 * H * hd + config.q_rank + kv * hd
        per_token += config.o_groups * config.o_rank + config.mlp * D
        entries, width = 0, 0
        if kind.sliding:
            slots = _banded_slots(T, kind.local_reach(config))
        else:
            entries = T // kind.ratio(config)
            width = (2 if kind.overlap(config) else 1) * kv * hd
            slots = entries + (_banded_slots(T, config.local_window) if config.local_window else 0)
        total += B * T * per_token + B * entries * width
        total += 2 * B * H * T * (slots + 1)  # scores and probabilities
        if kind.indexer and config.indexer_topk:
            total += B * T * entries * (config.index_heads + 1)
    total += B * (T - config.task.context_len) * config.task.vocab
    return 4 * total


def peak_bytes(config: LMConfig) -> dict:
    """XLA's memory analysis of one compiled training step (compiled, not run)."""
    hyper = lm_train.LMHyper.stack([config])
    hyper = jax.tree.map(lambda x: x[0], hyper)
    state = jax.eval_shape(partial(lm_train.init, config), hyper)
    compiled = jax.jit(partial(lm_train.step, config)).lower(state, hyper).compile()
    stats = compiled.memory_analysis()
    peak = (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )
    return {
        "peak_bytes": int(peak),
        "temp_bytes": int(stats.temp_size_in_bytes),
        "argument_bytes": int(stats.argument_size_in_bytes),
    }


def largest_length(lengths, peaks, budget: float = BUDGET) -> int:
    """The largest T (a multiple of 128) whose peak, by a
    least-squares quadratic through the measured `(T, peak)` points, is within `budget`."""
    t = np.asarray(lengths, float)
    coeffs = np.polyfit(t, np.asarray(peaks, float), min(2, len(t) - 1))
    step = 128
    length = int(t.max())
    while np.polyval(coeffs, length + step) <= budget:
        length += step
        if length > 1 << 22:
            break
    while length > step and np.polyval(coeffs, length) > budget:
        length -= step
    return length


def run(lengths=LENGTHS, batch: int | None = None, log=lambda _: None) -> dict:
    """Every length's peak and activation count, and the largest T for 24 GiB."""
    rows = []
    for length in lengths:
        config = config_at(length, batch)
        log(f"T={length}: compiling")
        start = time.perf_counter()
        row = {"seq_len": length, "batch": config.batch, **peak_bytes(config)}
        row["compile_seconds"] = time.perf_counter() - start
        row["activations_bytes"] = activation_bytes(config)
        row["peak_over_activations"] = row["peak_bytes"] / row["activations_bytes"]
        rows.append(row)
    return {
        "design": "v4",
        "layout": ",".join(config_at(lengths[0], batch).layer_kinds),
        "rows": rows,
        "largest_t_24gib": largest_length(lengths, [r["peak_bytes"] for r in rows]),
        "platform": jax.default_backend(),
        "load_average": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--batch", type=int, default=None)
    args = parser.parse_args()
    try:
        lengths = [int(v) for v in args.lengths.split(",")]
        if not lengths or min(lengths) < 1:
            raise ValueError
    except ValueError:
        print("--lengths: comma-separated positive integers", file=sys.stderr)
        sys.exit(2)
    start = time.perf_counter()

    def log(message):
        print(f"lm_memory [{time.perf_counter() - start:5.1f}s]: {message}", file=sys.stderr,
              flush=True)  # fmt: skip

    print(json.dumps(run(lengths, args.batch, log), indent=1))


if __name__ == "__main__":
    main()

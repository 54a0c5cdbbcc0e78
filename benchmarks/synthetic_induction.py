"""Does the pretraining backbone learn induction at all at a recipe? (a check on repeated tokens)

Trains `sims.pretrain.train.pretrain` on rows that are a random sequence of tokens (ids
3..V-1) followed by the same sequence again, the easiest induction task there is: before
induction the loss sits at log V on every token; a model that copies from context predicts
the whole second half. Every `--every` steps it scores top-1 on the second half of held-out
rows (from position 70 of 128, well inside the repeat). One seed per variant; a variant is
the base recipe (`BASE`: the emergence recipes' backbone at lr 3e-3, batch 4) with some
fields changed:

    python -m weakspots.benchmarks.synthetic_induction --json out.json
    python -m weakspots.benchmarks.synthetic_induction --variants base lr=0.001 --steps 1000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.sims.pretrain import checkpoint
from weakspots.sims.pretrain.train import logits_fn, pretrain

VOCAB = 512
BASE = dict(vocab=VOCAB, d_model=128, layers=2, heads=4, head_dim=32, mlp_hidden=384,
            seq_len=128, batch=4, lr=3e-3, log_every=100, checkpoint_every=500,
            val_batches=1)  # fmt: skip
VARIANTS = ("base", "rope_theta=10000", "qk_norm=0", "batch=16", "lr=0.001")
SCORED_FROM = 70  # score positions from here on: inside the repeated half


def repeats(seed: int, batch: int, length: int, start: int):
    """Rows of a random sequence then the same sequence again, `(batch, length + 1)`."""
    step = start
    while True:
        rng = np.random.default_rng([seed, step])
        half = rng.integers(3, VOCAB, (batch, (length + 1) // 2 + 1))
        yield np.concatenate([half, half], axis=1)[:, : length + 1].astype(np.int32)
        step += 1


def variant_config(variant: str, steps: int) -> PretrainConfig:
    fields = dict(BASE, steps=steps)
    if variant != "base":
        for item in variant.split(","):
            name, value = item.split("=")
            default = getattr(PretrainConfig(), name)
            fields[name] = value == "1" if isinstance(default, bool) else type(default)(value)
    return PretrainConfig(**fields)


def run(variant: str, steps: int, every: int) -> dict:
    config = variant_config(variant, steps)
    config = config.replace(log_every=min(config.log_every, every), checkpoint_every=every)
    held = next(repeats(99, 16, config.seq_len, 0))
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for stop in range(every, steps + 1, every):
            history = pretrain(config, out_dir=out, data=repeats, stop_after=stop)
            seed_config, params = checkpoint.load(checkpoint.seed_checkpoints(out)[0])
            predicted = np.argmax(logits_fn(seed_config, params)(held[:, :-1]), -1)
            copy = float(np.mean(predicted[:, SCORED_FROM:] == held[:, SCORED_FROM + 1 :]))
            rows.append({"step": stop, "loss": history.loss[-1][0], "copy_accuracy": copy})
            print(json.dumps({"variant": variant, **rows[-1]}), flush=True)
    return {"variant": variant, "config": config.asdict(), "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    began = time.time()
    results = [run(v, args.steps, args.every) for v in args.variants]
    if args.json:
        Path(args.json).write_text(
            json.dumps({"results": results, "seconds": time.time() - began}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

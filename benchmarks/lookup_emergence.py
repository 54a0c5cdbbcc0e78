"""When does a pretrained model copy names, and when does it do the lookup? (one measurement)

Pretrains one design on the corpus (`idealized.pretrain.corpus`) and, every `--every` steps,
scores (a) in-corpus copying: top-1 on a name that follows its animal when the same pair came
earlier in the document (held-out documents of seed 999), (b) the lookup
(`sims.pretrain.lookup`, prefix padding) and what the model predicts there instead. Meant for
a GPU (docs/performance.md, "The pretraining corpus ..."); on a CPU, `weakspots lm pretrain
--emergence-every K` measures the same during training (`sims.pretrain.emergence`):

    python -m weakspots.benchmarks.lookup_emergence --steps 6000 --every 2000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np

from weakspots.idealized.pretrain import corpus
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.tokenizer import Tokenizer
from weakspots.sims.pretrain import checkpoint, emergence, lookup, train

MODEL = dict(d_model=256, layers=4, heads=8, head_dim=32, mlp_hidden=768, seq_len=512, batch=32)
SMOKE = dict(d_model=16, layers=1, heads=2, head_dim=8, mlp_hidden=32, seq_len=64, batch=2)


def copy_accuracy(logits_fn, held, tokenizer) -> tuple[float, float]:
    """Top-1 on names after their animal: repeated pairs (`emergence.repeated_pairs`), and
    first mentions."""
    x, y = held[:, :-1], held[:, 1:]
    pred = np.argmax(logits_fn(x), -1)
    pair = np.isin(x, tokenizer.key_ids) & np.isin(y, tokenizer.value_ids)
    repeated = emergence.repeated_pairs(held, tokenizer)
    hit = pred == y
    return float(hit[pair & repeated].mean()), float(hit[pair & ~repeated].mean())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6000)
    p.add_argument("--every", type=int, default=2000)
    p.add_argument("--attention", default="full")
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--stride", type=int, default=8)
    p.add_argument("--prompts-per-residue", type=int, default=48)
    p.add_argument("--smoke", action="store_true", help="a tiny model (a test of the script)")
    p.add_argument("--size", default=None, help="model fields as k=v,... (default: MODEL)")
    p.add_argument("--json", default=None, help="write the rows here too")
    args = p.parse_args(argv)
    tokenizer = Tokenizer.default()
    held = corpus.batch_at(tokenizer, 999, 0, 8 if args.smoke else 64, 512)
    prompts = lookup.design("prefix", prompts_per_residue=args.prompts_per_residue)
    size = dict(SMOKE, log_every=1) if args.smoke else dict(MODEL, log_every=50)
    for item in args.size.split(",") if args.size else []:
        key, value = item.split("=")
        size[key] = int(value)
    extra = dict(window=args.window, stride=args.stride) if args.attention != "full" else {}
    config = PretrainConfig(kv_heads=1, **size, steps=args.steps, warmup=100, val_batches=2,
                            checkpoint_every=args.every, attention=args.attention, **extra)  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for stop in range(args.every, args.steps + 1, args.every):
            began = time.time()
            history = train.pretrain(config, out_dir=out, stop_after=stop)
            (seed_dir,) = checkpoint.seed_checkpoints(out)
            repeated, first = copy_accuracy(train.logits_fn(*checkpoint.load(seed_dir)), held,
                                            tokenizer)  # fmt: skip
            _, scorer = lookup.checkpoint_scorer(seed_dir)
            report = lookup.report([lookup.evaluate(scorer, prompts, batch=256)])
            guesses = np.concatenate([
                np.argmax(scorer(np.stack([q.tokens for q in prompts[i : i + 256]])), -1)
                for i in range(0, len(prompts), 256)
            ])  # fmt: skip
            row = dict(
                step=stop, tokens=stop * config.batch * config.seq_len,
                loss=history.loss[-1][0], val_loss=history.val_loss[-1][0] if history.val_loss else None,
                copy_repeated_pair=repeated, copy_first_mention=first,
                lookup=report["mean_accuracy"], lookup_gap=report["gap"],
                lookup_predicts=[tokenizer.words[i] for i in np.bincount(guesses).argsort()[::-1][:5]],
                tokens_per_second=history.tokens_per_second, seconds=time.time() - began,
            )  # fmt: skip
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": config.asdict(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""`weakspots lm pretrain`: next-token pretraining of the Qwen3-shaped backbone on the corpus."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from weakspots.idealized.pretrain.config import (
    ATTENTION_KINDS,
    GATES,
    LOCAL_MODES,
    SCHEDULES,
    PretrainConfig,
)

from . import common

_DEFAULT = PretrainConfig()

HELP = {
    "vocab": "vocabulary size (0: the corpus tokenizer's)",
    "open_words": "corpus: words per open class (places, nouns, adjectives, verbs; 0: all)",
    "zipf": "corpus: Zipf exponent of open-class word draws (0: uniform)",
    "d_model": "model width D",
    "layers": "blocks",
    "heads": "query heads H",
    "kv_heads": "KV heads G (grouped queries; divides H)",
    "head_dim": "width of each head",
    "mlp_hidden": "SwiGLU hidden width",
    "rope_theta": "RoPE base",
    "attention": f"attention kind of every layer: {', '.join(ATTENTION_KINDS)}",
    "window": "compressed: tokens per window W",
    "stride": "compressed: a window starts every S tokens (S < W overlaps)",
    "gate": f"compressed: per-offset gates, {', '.join(GATES)} (uniform: alpha = 1/W)",
    "gate_bias": "compressed: a bias b_i in every offset's gate",
    "tied_kv": "compressed: values are the normed, rotated keys (no value branch)",
    "qk_norm": "RMSNorm on queries and keys (per head)",
    "rope_dim": "channels of each head RoPE turns (-1: all, 0: no RoPE)",
    "post_norm": "compressed: RMSNorm on each payload C_i h before pooling",
    "local": f"compressed: exact tokens read, {', '.join(LOCAL_MODES)} "
    "(tail: only the current incomplete window)",
    "local_window": "compressed, --local window: exact recent tokens read, the query's own included",
    "seq_len": "tokens per training sequence T",
    "batch": "sequences per step",
    "steps": "AdamW steps",
    "lr": "peak learning rate",
    "warmup": "linear warmup steps",
    "schedule": f"after warmup: {', '.join(SCHEDULES)} (cosine: to lr/10 at --steps)",
    "weight_decay": "AdamW weight decay (matrices only)",
    "clip": "global gradient-norm clipping",
    "seed": "first seed (model initialisation and the corpus stream)",
    "seeds": "seeds trained at once: seed .. seed+K-1",
    "log_every": "steps per compiled block (one loss point of the curves)",
    "checkpoint_every": "steps between checkpoints (0: at the end only); a multiple of --log-every",
    "val_batches": "held-out batches of the validation loss at each checkpoint",
    "emergence_every": "steps between emergence measurements (copy accuracy, a small lookup) "
    "in history.json (0: none); a multiple of --log-every",
}


def register(verbs) -> None:
    parser = verbs.add_parser(
        "pretrain",
        help="pretrain the Qwen3-shaped backbone (full or the paper's compressed attention)",
        description=(
            "Next-token pretraining on the project's corpus (AdamW, warmup, cosine, clipping), "
            "every seed at once. Checkpoints go to --out; rerunning the command resumes there. "
            "Evaluate with `weakspots lm lookup --checkpoint OUT/seed-S ...`."
        ),
        epilog=common.examples(
            "weakspots lm pretrain --out runs/full --steps 2000 --seeds 2",
            "weakspots lm pretrain --out runs/w8s8 --attention compressed --window 8 --stride 8",
            "weakspots lm pretrain --out runs/w8s4 --attention compressed --stride 4 --json",
        ),
    )
    for field in dataclasses.fields(PretrainConfig):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(_DEFAULT, field.name)
        if isinstance(default, bool):
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=HELP[field.name]
            )
        else:
            parser.add_argument(flag, type=type(default), default=default, help=HELP[field.name])
    parser.add_argument("--out", required=True, help="run directory (checkpoints, loss curves)")
    parser.add_argument(
        "--keep-checkpoints", action="store_true",
        help="also keep every checkpoint in OUT/checkpoints/step-N/ (lm gates --over-training)",
    )  # fmt: skip
    common.add_output_flags(parser)
    parser.set_defaults(handler=run_pretrain)


def pretrain_config(args: argparse.Namespace) -> PretrainConfig:
    names = {f.name for f in dataclasses.fields(PretrainConfig)}
    return PretrainConfig(**{k: v for k, v in vars(args).items() if k in names})


def run_pretrain(args: argparse.Namespace) -> int:
    config = pretrain_config(args)
    out = pathlib.Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise common.UsageError(f"--out: {args.out!r} is not a directory")
    from weakspots.sims.pretrain import checkpoint
    from weakspots.sims.pretrain.train import pretrain
    from weakspots.sims.progress import Progress

    with Progress("lm pretrain", "steps", enabled=common.progress_enabled(args)) as progress:
        try:
            history = pretrain(
                config, out_dir=out, progress=progress, keep_checkpoints=args.keep_checkpoints
            )
        except ValueError as error:
            if "another config" in str(error):
                raise common.UsageError(f"--out: {error}") from None
            raise
    stored = checkpoint.read_config(out)
    report = {
        "config": stored.asdict(),
        "out": str(out),
        "checkpoints": [str(d) for d in checkpoint.seed_checkpoints(out)],
        "final_loss": history.loss[-1],
        "val_loss": history.val_loss[-1] if history.val_loss else None,
        "tokens_per_second": history.tokens_per_second,
        "flops_per_second": history.flops_per_second,
        "train_seconds": history.train_seconds,
    }
    if args.json:
        common.print_json(report)
        return 0
    seeds = range(stored.seed, stored.seed + stored.seeds)
    for seed, loss, val in zip(
        seeds, report["final_loss"], report["val_loss"] or [None] * len(seeds), strict=True
    ):
        shown = f", validation {val:.4f}" if val is not None else ""
        print(f"seed {seed}: final training loss {loss:.4f}{shown}")
    print(f"{history.tokens_per_second:.3g} tokens/s; checkpoints in {out}/seed-*")
    return 0

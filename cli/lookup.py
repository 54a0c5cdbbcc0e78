"""`weakspots lm lookup`: the paper's lookup by residue on pretrained checkpoints, or its design."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from . import common


def register(verbs) -> None:
    parser = verbs.add_parser(
        "lookup",
        help="the paper's 64-record lookup by target residue on pretrained checkpoints",
        description=(
            "The paper's lookup, never trained on: 64 records (a one-token animal key "
            "directly followed by a one-token name), 8 demonstrations, a target key; top-1 "
            "over the full vocabulary, grouped by the target key's position modulo "
            "--modulus. Every prompt has the same query position and every residue group "
            "the same mean and variance of the target position; --padding prefix moves the "
            "records together, in-sequence splits the filler among the gaps between them. "
            "Evaluates --checkpoint directories (one per seed; a run directory stands for "
            "its seeds), seeds as clusters for the gap (sims.pretrain.lookup), or prints the "
            "design (--design-only)."
        ),
        epilog=common.examples(
            "weakspots lm lookup --design-only --padding prefix --json",
            "weakspots lm lookup --checkpoint runs/w8s8/seed-0 runs/w8s8/seed-1 --json",
            "weakspots lm lookup --checkpoint runs/w8s8 --padding in-sequence",
        ),
    )
    parser.add_argument(
        "--checkpoint",
        nargs="+",
        metavar="DIR",
        default=None,
        help="pretrained checkpoints (weakspots lm pretrain's seed or run dirs)",
    )
    parser.add_argument(
        "--design-only",
        action="store_true",
        help="print the prompts' positions and residues; no model",
    )
    parser.add_argument("--padding", default="prefix", help="prefix or in-sequence")
    parser.add_argument(
        "--modulus", type=int, default=24, help="residues: target positions are grouped modulo this"
    )
    parser.add_argument(
        "--prompts-per-residue",
        type=int,
        default=480,
        help="prompts in each residue group (a multiple of --modulus: exact means; the "
        "full-attention control's gap from sampling alone shrinks as 1/sqrt of it)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the prompts' records and padding")
    parser.add_argument(
        "--spread",
        type=float,
        default=48.0,
        help="standard deviation of the target position in each group (tokens)",
    )
    parser.add_argument(
        "--length",
        type=int,
        default=None,
        help="prompt length in tokens (default: the shortest that fits)",
    )
    add_size_flags(parser)
    parser.add_argument("--batch", type=int, default=64, help="prompts per forward pass")
    parser.add_argument(
        "--tokens",
        action="store_true",
        help="with --design-only --json: each prompt's token ids too",
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run_lookup)


def add_size_flags(parser: argparse.ArgumentParser) -> None:
    """`--records`, `--demonstrations`: the paper's 64 and 8, fewer for a short context."""
    parser.add_argument(
        "--records", type=int, default=64,
        help="key-value records per prompt (the paper's 64; fewer fit a shorter context)",
    )  # fmt: skip
    parser.add_argument(
        "--demonstrations", type=int, default=8,
        help="records repeated after them as demonstrations (the paper's 8)",
    )  # fmt: skip


def _design(args: argparse.Namespace):
    from weakspots.sims.pretrain import lookup

    try:
        return lookup.design(
            args.padding, modulus=args.modulus, prompts_per_residue=args.prompts_per_residue,
            seed=args.seed, length=args.length, spread=args.spread, records=args.records,
            demonstrations=args.demonstrations,
        )  # fmt: skip
    except ValueError as error:
        raise common.UsageError(str(error)) from None


def design_report(args: argparse.Namespace, prompts) -> dict:
    from weakspots.sims.pretrain import lookup

    return {
        "padding": args.padding,
        "modulus": args.modulus,
        "prompts_per_residue": args.prompts_per_residue,
        "seed": args.seed,
        "records": args.records,
        "demonstrations": args.demonstrations,
        "length": int(prompts[0].tokens.size),
        "statistics": lookup.design_statistics(prompts, args.modulus),
    }


def checkpoint_dirs(paths: list[str]) -> list[Path]:
    """Each seed's checkpoint directory: a path as given, or a run directory's seeds."""
    from weakspots.sims.pretrain import checkpoint

    dirs = []
    for path in map(Path, paths):
        if not path.is_dir():
            raise common.UsageError(f"--checkpoint: {path} is not a directory")
        dirs += checkpoint.seed_checkpoints(path) or [path]
    return dirs


def evaluate_checkpoints(dirs: list[Path], prompts, batch: int, progress=None) -> list[dict]:
    """`lookup.evaluate` of every checkpoint on the same prompts, with its config."""
    from weakspots.idealized.pretrain.tokenizer import Tokenizer
    from weakspots.sims.pretrain import lookup

    length = int(prompts[0].tokens.size)
    results = []
    for directory in dirs:
        try:
            config, logits_fn = lookup.checkpoint_scorer(directory)
        except (FileNotFoundError, ValueError) as error:
            raise common.UsageError(f"--checkpoint: {error}") from None
        vocab = Tokenizer.sized(config.open_words).vocab_size
        if config.vocab != vocab:
            raise common.UsageError(
                f"--checkpoint: {directory} has a vocabulary of {config.vocab} tokens, the "
                f"corpus's tokenizer {vocab}"
            )
        if config.seq_len < length:
            print(f"lm lookup: {directory} was trained on {config.seq_len}-token sequences, the "
                  f"prompts have {length}", file=sys.stderr)  # fmt: skip
        result = lookup.evaluate(logits_fn, prompts, batch=batch)
        result["checkpoint"] = str(directory)
        result["config"] = dataclasses.asdict(config)
        results.append(result)
        if progress is not None:
            progress(directory, result)
    return results


def run_lookup(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise common.UsageError(f"--batch: must be at least 1, got {args.batch}")
    if not args.design_only and not args.checkpoint:
        raise common.UsageError("--checkpoint: give checkpoint directories, or --design-only")
    if args.design_only and args.checkpoint:
        raise common.UsageError("--design-only: evaluates no --checkpoint; give one or the other")
    dirs = checkpoint_dirs(args.checkpoint) if args.checkpoint else []
    prompts = _design(args)
    out = design_report(args, prompts)
    if args.design_only:
        out["prompts"] = [p.as_dict(tokens=args.tokens) for p in prompts]
        if args.json:
            common.print_json(out)
        else:
            print(design_text(out))
        return 0
    from weakspots.sims.pretrain import lookup

    def progress(directory, result):
        if common.progress_enabled(args):
            print(f"lm lookup: {directory}: accuracy {result['accuracy']:.3f}", file=sys.stderr)

    results = evaluate_checkpoints(dirs, prompts, args.batch, progress)
    out |= lookup.report(results)
    out["checkpoints"] = [r["checkpoint"] for r in results]
    out["configs"] = [r["config"] for r in results]
    out["seed_accuracy"] = [r["accuracy"] for r in results]
    if args.json:
        common.print_json(out)
    else:
        print(report_text(out))
    return 0


def design_text(out: dict) -> str:
    stats = out["statistics"]
    rows = [
        [r, n, m, v]
        for r, (n, m, v) in enumerate(
            zip(stats["per_residue"], stats["mean"], stats["variance"], strict=True)
        )
    ]
    head = (
        f"lookup design: {out['padding']} padding, {stats['prompts']} prompts of "
        f"{out['length']} tokens, query position {stats['query_positions']}; target position "
        f"means within {stats['mean_range']:.2f} tokens, variances within a factor "
        f"{stats['variance_ratio']:.4f}"
    )
    return head + "\n" + common.table(["residue", "prompts", "mean", "variance"], rows)


def report_text(out: dict) -> str:
    rows = [
        [r, acc, f"[{lo:.3f}, {hi:.3f}]"]
        for r, (acc, (lo, hi)) in enumerate(
            zip(out["residue_mean"], out["residue_interval"], strict=True)
        )
    ]
    floor = out["gap_noise_floor"]
    lines = [
        f"lookup: {out['padding']} padding, {out['seeds']} seed(s), "
        f"{out['prompts_per_residue']} prompts per residue",
        common.table(["residue", "accuracy", "95% (seeds as clusters)"], rows),
        f"mean accuracy {out['mean_accuracy']:.3f} "
        f"[{out['mean_interval'][0]:.3f}, {out['mean_interval'][1]:.3f}]",
        f"gap {out['gap']:.3f} (best residue {out['best_residue']}, worst {out['worst_residue']}; "
        f"beyond both intervals: {'yes' if out['gap_beyond_intervals'] else 'no'}; "
        f"seeds' noise floor {'n/a' if floor is None else f'{floor:.3f}'})",
        f"dominant period {out['dominant_period']}",
    ]
    return "\n".join(lines)

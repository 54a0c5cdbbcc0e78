"""`weakspots lm copy`: in-context copy accuracy on the corpus by the copied key's phase."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import common


def register(verbs) -> None:
    parser = verbs.add_parser(
        "copy",
        help="copy accuracy of a pretrained run by the residue of the copied pair's earlier key",
        description=(
            "Scores a pretrained run (every seed of `weakspots lm pretrain --out DIR`) on "
            "held-out documents of its own corpus: top-1 at every name that follows its animal "
            "where the same (animal, name) pair came earlier, grouped by the earlier animal's "
            "position modulo --modulus (the key a copy by induction matches; the lookup's "
            "target key). Documents are clusters for the intervals; the p-value shuffles "
            "residues within each document. Keys before --start are left out (each document's "
            "first sentence puts its first pair at fixed positions). Also for contested copies "
            "(at least 3 names earlier). Unlike the lookup, it needs no format the corpus never "
            "shows (sims.pretrain.emergence.copy_phase)."
        ),
        epilog=common.examples(
            "weakspots lm copy --checkpoint runs/cpu2/runs/w8s8_1kv --json",
            "weakspots lm copy --checkpoint runs/full --modulus 4 --rows 1024",
        ),
    )
    parser.add_argument(
        "--checkpoint", required=True, metavar="DIR", help="a pretraining run directory"
    )
    parser.add_argument(
        "--modulus", type=int, default=8, help="residues: earlier keys grouped modulo this"
    )
    parser.add_argument(
        "--rows", type=int, default=512, help="held-out documents (a multiple of 8)"
    )
    parser.add_argument(
        "--start", type=int, default=16, help="leave out copies whose earlier key is before this"
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run_copy)


def run_copy(args: argparse.Namespace) -> int:
    if args.modulus < 2:
        raise common.UsageError(f"--modulus: must be at least 2, got {args.modulus}")
    if args.rows < 8 or args.rows % 8:
        raise common.UsageError(f"--rows: a positive multiple of 8, got {args.rows}")
    if args.start < 0:
        raise common.UsageError(f"--start: must be at least 0, got {args.start}")
    from weakspots.sims.pretrain import checkpoint, emergence

    try:
        seeds = checkpoint.seed_checkpoints(args.checkpoint)
    except (FileNotFoundError, NotADirectoryError, ValueError, TypeError):
        seeds = []
    if not Path(args.checkpoint).is_dir() or not seeds:
        raise common.UsageError(
            f"--checkpoint: {args.checkpoint} is not a pretraining run directory (its "
            "config.json and seed directories, as `weakspots lm pretrain --out` writes)"
        )
    try:
        out = emergence.copy_phase(
            args.checkpoint, modulus=args.modulus, rows=args.rows, start=args.start
        )
    except ValueError as error:
        raise common.UsageError(str(error)) from None
    if args.json:
        common.print_json(out)
    else:
        print(text(out))
    return 0


def text(out: dict) -> str:
    lines = [f"{out['run']}: {out['seeds']} seeds, keys from position {out['start']}"]
    for name in ("copy", "contested"):
        p = out[name]
        acc = " ".join(f"{a:.3f}" for a in p["residue_accuracy"])
        lo, hi = p["delta_max_interval"]
        lines.append(
            f"{name}: {p['positions']} positions in {p['rows']} documents, mean "
            f"{p['mean_accuracy']:.3f}; by residue mod {p['modulus']}: {acc}; delta_max "
            f"{p['delta_max']:.3f} [{lo:.3f}, {hi:.3f}], p {p['delta_max_p']:.3f}, worst "
            f"{p['worst_residue']}, period {p['dominant_period']}"
        )
    return "\n".join(lines)

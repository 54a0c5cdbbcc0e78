"""`weakspots lm knockout`, `lm gates`, `lm cycle`: the paper's mechanism measurements
(PAPER.md §4) on pretrained checkpoints (`sims.pretrain.mechanism`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import common
from .lookup import add_size_flags, checkpoint_dirs

DELTAS = (-3, -2, -1, 1, 2, 3)


def _design_flags(parser: argparse.ArgumentParser, per_residue: int) -> None:
    parser.add_argument(
        "--checkpoint", nargs="+", metavar="DIR", required=True,
        help="pretrained checkpoints (weakspots lm pretrain's seed or run dirs), seeds as clusters",
    )  # fmt: skip
    parser.add_argument("--padding", default="prefix", help="prefix or in-sequence")
    parser.add_argument("--modulus", type=int, default=24, help="residues of the target position")
    parser.add_argument(
        "--prompts-per-residue", type=int, default=per_residue,
        help="evaluation prompts in each residue group",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="the evaluation prompts' seed")
    parser.add_argument("--spread", type=float, default=48.0, help="target position std (tokens)")
    parser.add_argument(
        "--length", type=int, default=None, help="prompt length (default: shortest)"
    )
    add_size_flags(parser)
    parser.add_argument("--batch", type=int, default=64, help="prompts per forward pass")


def register(verbs) -> None:
    knockout = verbs.add_parser(
        "knockout",
        help="mean-replacement knockout of every KV head and layer, by residue",
        description=(
            "At the prompt's last position only, the query heads reading one KV head (or every "
            "head of one layer) output their mean over a calibration set of lookup prompts "
            "disjoint from the evaluation (another seed of the design); the lookup's accuracy "
            "change by residue, absolute and relative to the intact model, with intervals "
            "(seeds as clusters)."
        ),
        epilog=common.examples(
            "weakspots lm knockout --checkpoint runs/w8s8 --json",
            "weakspots lm knockout --checkpoint runs/full --calibration 16 --prompts-per-residue 96",
        ),
    )
    _design_flags(knockout, 48)
    knockout.add_argument(
        "--calibration", type=int, default=8,
        help="calibration prompts per residue group (a disjoint design; their heads' mean replaces)",
    )  # fmt: skip
    common.add_output_flags(knockout)
    knockout.set_defaults(handler=run_knockout)

    gates = verbs.add_parser(
        "gates",
        help="static and per-window effective offsets of every compressed gate",
        description=(
            "For every key and value gate of every compressed layer: the static effective "
            "number of offsets exp(H(E[alpha])) and the per-window E[exp(H(alpha))], alpha the "
            "softmax over the W offsets on held-out corpus text; with --over-training at every "
            "checkpoint a run kept (lm pretrain --keep-checkpoints)."
        ),
        epilog=common.examples(
            "weakspots lm gates --checkpoint runs/w8s8 --json",
            "weakspots lm gates --checkpoint runs/w8s8 --over-training --json",
        ),
    )
    gates.add_argument(
        "--checkpoint", nargs="+", metavar="DIR", required=True,
        help="seed or run dirs (with --over-training: run dirs)",
    )  # fmt: skip
    gates.add_argument("--over-training", action="store_true", help="every kept checkpoint")
    gates.add_argument("--rows", type=int, default=8, help="held-out corpus sequences read")
    gates.add_argument("--length", type=int, default=None, help="tokens per row (default: seq_len)")
    common.add_output_flags(gates)
    gates.set_defaults(handler=run_gates)

    cycle = verbs.add_parser(
        "cycle",
        help="cycle the gates' offset parameters by delta; observed against predicted (W = S)",
        description=(
            "Shift every compressed layer's gate parameters Z_i, b_i cyclically by delta (payload "
            "maps fixed), score the lookup, and compare the per-residue changes with the "
            "prediction A_delta(r) = A_0((r - delta) mod S): R^2 with and without the boundary "
            "phase S - 1, with intervals over seeds."
        ),
        epilog=common.examples("weakspots lm cycle --checkpoint runs/w8s8 --deltas -1 1 --json"),
    )
    _design_flags(cycle, 96)
    cycle.add_argument("--deltas", type=int, nargs="+", default=list(DELTAS), help="shifts")
    common.add_output_flags(cycle)
    cycle.set_defaults(handler=run_cycle)


def _progress(args, label: str):
    if not common.progress_enabled(args):
        return None

    def report(done: int, total: int) -> None:
        print(f"lm {label}: {done}/{total} evaluations", file=sys.stderr, flush=True)

    return report


def _checkpoints(args):
    from weakspots.idealized.pretrain.tokenizer import Tokenizer
    from weakspots.sims.pretrain import checkpoint

    out = []
    for directory in checkpoint_dirs(args.checkpoint):
        try:
            config, params = checkpoint.load(directory)
        except (FileNotFoundError, ValueError) as error:
            raise common.UsageError(f"--checkpoint: {error}") from None
        if config.vocab != Tokenizer.sized(config.open_words).vocab_size:
            raise common.UsageError(
                f"--checkpoint: {directory} has a vocabulary of {config.vocab} tokens, not the "
                "corpus tokenizer's"
            )
        out.append((directory, config, params))
    return out


def _prompts(args, seed_offset: bool = False, per_residue=None):
    from weakspots.sims.pretrain import lookup, mechanism

    if args.batch < 1:
        raise common.UsageError(f"--batch: must be at least 1, got {args.batch}")
    kwargs = dict(modulus=args.modulus, length=args.length, spread=args.spread,
                  records=args.records, demonstrations=args.demonstrations)  # fmt: skip
    try:
        if seed_offset:
            return mechanism.calibration_design(args.padding, per_residue, seed=args.seed, **kwargs)
        return lookup.design(
            args.padding, prompts_per_residue=args.prompts_per_residue, seed=args.seed, **kwargs
        )
    except ValueError as error:
        message = str(error)
        if seed_offset and message.startswith("--prompts-per-residue"):
            message = "--calibration" + message[len("--prompts-per-residue") :]
        raise common.UsageError(message) from None


def _run(fn, *a, **k):
    try:
        return fn(*a, **k)
    except ValueError as error:
        if str(error).startswith("--"):
            raise common.UsageError(str(error)) from None
        raise


def run_knockout(args: argparse.Namespace) -> int:
    from weakspots.sims.pretrain import mechanism

    evaluation = _prompts(args)
    calibration = _prompts(args, seed_offset=True, per_residue=args.calibration)
    loaded = _checkpoints(args)
    out = _run(
        mechanism.knockout, [(c, p) for _, c, p in loaded], evaluation, calibration,
        batch=args.batch, progress=_progress(args, "knockout"),
    )  # fmt: skip
    out["checkpoints"] = [str(d) for d, _, _ in loaded]
    out["padding"] = args.padding
    if args.json:
        common.print_json(out)
        return 0
    rows = []
    for unit, change in zip(out["units"], out["change"], strict=True):
        name = f"layer {unit['layer']}" + (
            f" KV {unit['kv_head']}" if unit["unit"] == "head" else " (all heads)"
        )
        worst = min(range(len(change)), key=change.__getitem__)
        rows.append([name, sum(change) / len(change), worst, change[worst]])
    print(f"knockout: {len(loaded)} seed(s), {out['evaluation_prompts']} prompts, "
          f"{out['calibration_prompts']} calibration prompts; intact mean accuracy "
          f"{out['intact']['mean_accuracy']:.3f}")  # fmt: skip
    print(common.table(["unit", "mean change", "worst residue", "its change"], rows))
    return 0


def run_gates(args: argparse.Namespace) -> int:
    from weakspots.sims.pretrain import checkpoint, mechanism

    if args.rows < 1:
        raise common.UsageError(f"--rows: must be at least 1, got {args.rows}")
    if args.length is not None and args.length < 1:
        raise common.UsageError(f"--length: must be at least 1, got {args.length}")
    for path in map(Path, args.checkpoint):
        if not path.is_dir():
            raise common.UsageError(f"--checkpoint: {path} is not a directory")
    results = []
    if args.over_training:
        for path in args.checkpoint:
            if (Path(path) / checkpoint.PARAMS).exists():
                raise common.UsageError(
                    f"--checkpoint: {path} is a seed; --over-training reads run dirs"
                )
            config = checkpoint.read_config(path)
            tokens = mechanism.corpus_tokens(
                args.rows, args.length or config.seq_len, config=config
            )
            out = _run(mechanism.gate_trajectory, path, tokens, _progress(args, "gates"))
            results.append({"run": str(path), **out})
    else:
        for directory, config, params in _checkpoints(args):
            tokens = mechanism.corpus_tokens(
                args.rows, args.length or config.seq_len, config=config
            )
            out = _run(mechanism.gate_concentration, params, config, tokens)
            results.append({"checkpoint": str(directory), **out})
    if args.json:
        common.print_json({"results": results})
        return 0
    for result in results:
        print(result.get("checkpoint") or result.get("run"))
        for branch, data in result["branches"].items():
            static, per_window = data["static"], data["per_window"]
            if args.over_training:  # the last kept checkpoint, first seed
                static, per_window = static[-1][0], per_window[-1][0]
            rows = [
                [layer, min(s), min(w)]
                for layer, (s, w) in enumerate(zip(static, per_window, strict=True))
            ]
            print(f"  {branch} gates (fewest effective offsets over heads):")
            print(common.table(["layer", "static", "per window"], rows))
    return 0


def run_cycle(args: argparse.Namespace) -> int:
    from weakspots.sims.pretrain import mechanism

    prompts = _prompts(args)
    loaded = _checkpoints(args)
    if 0 in args.deltas:
        raise common.UsageError("--deltas: 0 is the intact model, always scored; give shifts")
    out = _run(
        mechanism.cycling, [(c, p) for _, c, p in loaded], prompts, tuple(args.deltas),
        batch=args.batch, progress=_progress(args, "cycle"),
    )  # fmt: skip
    out["checkpoints"] = [str(d) for d, _, _ in loaded]
    out["padding"] = args.padding
    if args.json:
        common.print_json(out)
        return 0

    def shown(x):
        return "n/a" if x[0] is None else f"{x[0]:.3f}"

    rows = [
        [d, shown(e["r_squared"]), shown(e["r_squared_without_boundary"]),
         shown(e["boundary_accuracy"])]
        for d, e in out["deltas"].items()
    ]  # fmt: skip
    print(f"gate cycling: {len(loaded)} seed(s), boundary phase {out['boundary_phase']}")
    print(common.table(["delta", "R^2", "R^2 without boundary", "boundary accuracy"], rows))
    return 0

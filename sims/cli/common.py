"""Flags and output conventions shared by every verb."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from weakspots.idealized.config import LOSSES, OPERATORS, OPTIMIZERS, TrainConfig

_DEFAULT = TrainConfig()
SPARK = "▁▂▃▄▅▆▇█"


class UsageError(ValueError):
    """Bad input that no config field owns; the message names the flag."""


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """`--stride --chunks --dim --heads --gain --loss`: the flags every verb shares."""
    group = parser.add_argument_group("model")
    group.add_argument("--stride", type=int, default=_DEFAULT.stride, help="tokens per chunk s")
    group.add_argument("--chunks", type=int, default=_DEFAULT.chunks, help="chunks of context N")
    group.add_argument("--dim", type=int, default=_DEFAULT.dim, help="key dimension d")
    group.add_argument("--heads", type=int, default=_DEFAULT.heads, help="attention heads H")
    group.add_argument("--gain", type=float, default=_DEFAULT.gain, help="logit gain beta")
    group.add_argument("--loss", default=_DEFAULT.loss, help=f"one of {', '.join(LOSSES)}")
    group.add_argument("--learn-gain", action="store_true", help="learn log(gain)")


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of `weakspots train`, shared by the verbs that train (ablate, compare, ...)."""
    add_model_flags(parser)
    group = parser.add_argument_group("training")
    group.add_argument(
        "--operator", default=_DEFAULT.operator, help=f"one of {', '.join(OPERATORS)}"
    )
    group.add_argument(
        "--learn-projections", action="store_true", help="learn per-head query/key projections"
    )
    group.add_argument("--rank", type=int, default=_DEFAULT.rank, help="rank under low_rank")
    group.add_argument("--rope-dim", type=int, default=_DEFAULT.rope_dim, help="rotary channels")
    group.add_argument(
        "--rope-anchor",
        action="store_true",
        help="rotate compressed keys to their chunk's first token, queries to their own (needs --rope-dim)",
    )
    mitigation = parser.add_argument_group("mitigations")
    mitigation.add_argument(
        "--phase-entropy",
        type=float,
        default=_DEFAULT.phase_entropy,
        metavar="REG",
        help="reward entropy of the pooling weights: loss - REG * mean_h H(alpha_h)",
    )
    mitigation.add_argument(
        "--stagger", action="store_true", help="head h shifts its chunk boundaries by h*s//H"
    )
    mitigation.add_argument(
        "--overlap", action="store_true", help="pool windows of 2s tokens with stride s"
    )
    mitigation.add_argument(
        "--offset-ensemble",
        type=int,
        default=_DEFAULT.offset_ensemble,
        metavar="K",
        help="at inference, average the readout over K chunkings shifted by k*s//K",
    )
    group.add_argument(
        "--optimizer", default=_DEFAULT.optimizer, help=f"one of {', '.join(OPTIMIZERS)}"
    )
    group.add_argument("--lr", type=float, default=_DEFAULT.lr, help="learning rate")
    group.add_argument("--weight-decay", type=float, default=_DEFAULT.weight_decay)
    group.add_argument(
        "--init-scale",
        type=float,
        default=_DEFAULT.init_scale,
        help="std of initial pooling logits",
    )
    group.add_argument("--steps", type=int, default=_DEFAULT.steps)
    group.add_argument("--batch", type=int, default=_DEFAULT.batch, help="needles per step")
    group.add_argument("--eval-every", type=int, default=_DEFAULT.eval_every)
    group.add_argument(
        "--eval-samples", type=int, default=_DEFAULT.eval_samples, help="held-out needles per phase"
    )
    group.add_argument("--seed", type=int, default=_DEFAULT.seed)
    group.add_argument("--seeds", type=int, default=None, help="train K seeds: seed .. seed+K-1")


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def train_config(args: argparse.Namespace, **overrides) -> TrainConfig:
    """The TrainConfig named by the parsed flags (raises ConfigError naming a bad flag)."""
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in vars(args).items() if k in names}
    return TrainConfig(**{**values, **overrides})


def seed_list(args: argparse.Namespace) -> list[int]:
    if args.seeds is None:
        return [args.seed]
    if args.seeds < 1:
        raise UsageError(f"--seeds: must be an integer >= 1, got {args.seeds}")
    return list(range(args.seed, args.seed + args.seeds))


def print_json(obj) -> None:
    print(json.dumps(obj, default=_jsonable, allow_nan=True))


def _jsonable(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def sparkline(values, low: float = 0.0, high: float = 1.0) -> str:
    """One character per value, `▁` at `low` to `█` at `high`."""
    out = []
    for v in values:
        if not math.isfinite(v):
            out.append("?")
            continue
        frac = min(max((v - low) / (high - low), 0.0), 1.0) if high > low else 0.0
        out.append(SPARK[round(frac * (len(SPARK) - 1))])
    return "".join(out)


def table(headers: list[str], rows: list[list], floatfmt: str = ".3f") -> str:
    """A plain aligned text table."""

    def cell(v):
        if isinstance(v, float):
            return format(v, floatfmt)
        return "-" if v is None else str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def progress_enabled(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr is not None

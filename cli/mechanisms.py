"""The flags and the `predict` output of the footprint and selection models (docs/theory.md §9.4-§9.6)."""

from __future__ import annotations

import argparse
import dataclasses
import math

import numpy as np

from weakspots import theory
from weakspots.idealized import footprint, selection
from weakspots.theory.predictions import footprint_predictions, selection_predictions

from . import common, induction

MODELS = ("toy", "footprint", "selection", "induction")
MAX_LOGIT = 700.0  # exp() of the entry logits overflows float64 past ~709


def add_model_kind_flags(parser: argparse.ArgumentParser, predict: bool = True) -> None:
    """`--model --window --carry-gain --decoy-gain --topk`, and for `predict`
    `--indexer-weights` (train and flow learn the indexer's weights)."""
    group = parser.add_argument_group("model kind (docs/theory.md §9.4-§9.5)")
    group.add_argument("--model", default="toy", help=f"one of {', '.join(MODELS)}")
    group.add_argument(
        "--window", type=int, default=1, help="footprint: carry width W (tokens after the value)"
    )
    group.add_argument(
        "--carry-gain",
        type=float,
        default=1.0,
        help="footprint: g = beta*c/s, the logit per carried token under mean pooling",
    )
    group.add_argument(
        "--decoy-gain",
        type=float,
        default=0.0,
        help="footprint: g_D = beta_D/s, the key token's logit under mean pooling",
    )
    group.add_argument("--topk", type=int, default=1, help="selection: entries kept, k")
    induction.add_flags(parser, predict)
    if not predict:
        return
    group.add_argument(
        "--indexer-weights",
        default=None,
        help="selection: the indexer's pooling weights, s comma-separated numbers > 0 "
        "(normalised; default uniform)",
    )


def _finite_at_least(flag: str, value, low: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low):
        raise common.UsageError(f"{flag}: must be a finite number >= {low:g}, got {value}")


def validate(args: argparse.Namespace) -> None:
    """Checks the footprint/selection flags (UsageError naming the flag)."""
    if args.model not in MODELS:
        raise common.UsageError(f"--model: must be one of {', '.join(MODELS)}, got {args.model!r}")
    if args.stride < 1:
        raise common.UsageError(f"--stride: must be an integer >= 1, got {args.stride}")
    if args.model == "footprint":
        if args.window < 1:
            raise common.UsageError(f"--window: must be an integer >= 1, got {args.window}")
        _finite_at_least("--carry-gain", args.carry_gain, 0.0)
        _finite_at_least("--decoy-gain", args.decoy_gain, 0.0)
        if args.carry_gain * min(args.stride, args.window) + args.decoy_gain > MAX_LOGIT:
            raise common.UsageError(
                f"--carry-gain: entry logits above {MAX_LOGIT:g} overflow, got {args.carry_gain:g}"
            )
        entries = int(theory.footprint_entry_count(args.stride, args.window).max())
        if args.chunks < entries + 2:
            raise common.UsageError(
                f"--chunks: must be >= {entries + 2} (the {entries} entries holding the fact, "
                f"a decoy and a distractor), got {args.chunks}"
            )
    if args.model == "selection":
        if args.chunks < 2:
            raise common.UsageError(f"--chunks: must be an integer >= 2, got {args.chunks}")
        if not 1 <= args.topk <= args.chunks:
            raise common.UsageError(f"--topk: must be an integer in [1, --chunks], got {args.topk}")
        if args.dim is not None and args.dim < 1:
            raise common.UsageError(f"--dim: must be an integer >= 1, got {args.dim}")
        indexer_weights(args)


def indexer_weights(args: argparse.Namespace) -> np.ndarray:
    """The --indexer-weights as (s,) weights summing to 1 (uniform when absent)."""
    if args.indexer_weights is None:
        return np.full(args.stride, 1.0 / args.stride)
    try:
        values = np.array([float(v) for v in str(args.indexer_weights).split(",")])
    except ValueError:
        raise common.UsageError(
            f"--indexer-weights: must be {args.stride} comma-separated numbers, "
            f"got {args.indexer_weights!r}"
        ) from None
    if values.shape != (args.stride,) or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise common.UsageError(
            f"--indexer-weights: must be {args.stride} finite numbers > 0 (one per phase), "
            f"got {args.indexer_weights!r}"
        )
    return values / values.sum()


KIND_DEFAULTS = {"window": 1, "carry_gain": 1.0, "decoy_gain": 0.0, "topk": 1} | dict.fromkeys(
    induction.OWN_FLAGS
)
KIND_OF = {"window": "footprint", "carry_gain": "footprint", "decoy_gain": "footprint", "topk": "selection"} | dict.fromkeys(
    induction.OWN_FLAGS, "induction"
)


def _kind(args: argparse.Namespace) -> str:
    if args.model not in MODELS:
        raise common.UsageError(f"--model: must be one of {', '.join(MODELS)}, got {args.model!r}")
    for name, default in KIND_DEFAULTS.items():
        if getattr(args, name) != default and KIND_OF[name] != args.model:
            flag = "--" + name.replace("_", "-")
            raise common.UsageError(f"{flag}: applies only to --model {KIND_OF[name]}")
    return args.model


def _build(cls, args: argparse.Namespace, **overrides):
    names = {f.name for f in dataclasses.fields(cls)} - set(overrides)
    return cls(**{k: v for k, v in vars(args).items() if k in names}, **overrides)


def train_config(args: argparse.Namespace):
    """The TrainConfig (toy), FootprintTrainConfig or SelectionTrainConfig the flags name."""
    kind = _kind(args)
    if kind == "toy":
        return common.train_config(args)
    if kind == "footprint":
        return _build(footprint.FootprintTrainConfig, args)
    return _build(selection.SelectionTrainConfig, args)


def flow_config(args: argparse.Namespace, toy_config):
    """The FlowConfig (toy, `toy_config(args)`), FootprintFlowConfig or SelectionFlowConfig
    (its two rows main and indexer: `--heads` is not asked for) the flags name."""
    kind = _kind(args)
    if kind == "toy":
        return toy_config(args)
    if kind == "footprint":
        return _build(footprint.FootprintFlowConfig, args)
    if args.heads != 1:
        raise common.UsageError("--heads: the selection flow has one head and one indexer")
    return _build(selection.SelectionFlowConfig, args, heads=2)


def predict(args: argparse.Namespace) -> dict:
    """`weakspots predict --model footprint|selection`: the dict its --json prints."""
    validate(args)
    if args.model == "footprint":
        return footprint_predictions(
            args.stride, args.window, args.chunks, args.carry_gain, args.decoy_gain
        )
    return selection_predictions(args.stride, args.chunks, args.topk, args.dim, indexer_weights(args))


def text_report(args: argparse.Namespace, out: dict) -> str:
    """A table of `out`, one row per prediction."""
    rows = []
    for key, value in out.items():
        if isinstance(value, list):
            value = " ".join("-" if v is None else f"{v:.4g}" for v in value)
        elif isinstance(value, float):
            value = f"{value:.6g}"
        elif value is None:
            value = "-"
        rows.append([key, str(value)])
    title = f"{args.model}: s={args.stride} N={args.chunks}"
    return title + "\n" + common.table(["prediction", "value"], rows)

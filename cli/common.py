"""Flags and output conventions shared by every verb."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import sys
import textwrap
from pathlib import Path

from weakspots.errors import UsageError as UsageError  # the verbs raise it as common.UsageError
from weakspots.idealized.metrics import runs_interval
from weakspots.idealized.operators.base import TOY
from weakspots.idealized.operators.registry import operator_names
from weakspots.idealized.toy.config import LOSSES, OPTIMIZERS, TrainConfig

from .parser import HelpFormatter as HelpFormatter

_DEFAULT = TrainConfig()
SPARK = "▁▂▃▄▅▆▇█"
CACHE_ENV = "WEAKSPOTS_JAX_CACHE"
CACHE_OFF = ("", "0", "off", "false", "no")
CACHE_MIN_COMPILE_SECONDS = 0.2  # the trainer's small programs (init, held-out draw) count too


def per_seed_report(config, seeds: list[int], summaries: list[dict], *, many: bool) -> dict:
    """`config` (a dataclass) plus each metric of `summaries`: a value per run, a list over
    `seeds` when `many` (the `--json` of `train` and `lm train`)."""
    out = {"config": dataclasses.asdict(config)}
    if many:
        out["seeds"] = seeds
    for key in summaries[0]:
        values = [s[key] for s in summaries]
        out[key] = values if many else values[0]
    return out


def examples(*commands: str) -> str:
    """An `--help` epilog listing example command lines."""
    return "examples:\n" + "\n".join(f"  {c}" for c in commands)


# ----------------------------------------------------------------------------- flags


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    """`--stride --chunks --dim --heads --gain --loss --learn-gain`: the flags every verb shares."""
    group = parser.add_argument_group("model")
    group.add_argument("--stride", type=int, default=_DEFAULT.stride, help="tokens per chunk s")
    group.add_argument("--chunks", type=int, default=_DEFAULT.chunks, help="chunks of context N")
    group.add_argument("--dim", type=int, default=_DEFAULT.dim, help="key dimension d")
    group.add_argument("--heads", type=int, default=_DEFAULT.heads, help="attention heads H")
    group.add_argument("--gain", type=float, default=_DEFAULT.gain, help="logit gain beta")
    group.add_argument("--loss", default=_DEFAULT.loss, help=f"one of {', '.join(LOSSES)}")
    group.add_argument(
        "--learn-gain",
        action="store_true",
        help="learn the gain (as log beta) instead of fixing it",
    )


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of `weakspots train`, shared by the verbs that train (ablate, compare, ...).

    Every `TrainConfig` field is a flag of the same name (`_` written `-`), so a sweep
    spec's keys and the command line name a parameter alike.
    """
    add_model_flags(parser)
    group = parser.add_argument_group("training")
    group.add_argument(
        "--operator", default=_DEFAULT.operator, help=f"one of {', '.join(operator_names(TOY))}"
    )
    group.add_argument(
        "--learn-projections", action="store_true", help="learn per-head query/key projections"
    )
    group.add_argument("--rank", type=int, default=_DEFAULT.rank, help="rank under low_rank")
    group.add_argument(
        "--rope-dim", type=int, default=_DEFAULT.rope_dim, help="rotary channels of the keys"
    )
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
    group.add_argument(
        "--weight-decay",
        type=float,
        default=_DEFAULT.weight_decay,
        help="penalty wd/2 * (gain^2 + |W|^2) on a learned gain and projections",
    )
    group.add_argument(
        "--init-scale",
        type=float,
        default=_DEFAULT.init_scale,
        help="std of the initial pooling logits",
    )
    group.add_argument("--steps", type=int, default=_DEFAULT.steps, help="SGD/Adam steps")
    group.add_argument("--batch", type=int, default=_DEFAULT.batch, help="needles per step")
    group.add_argument(
        "--eval-every", type=int, default=_DEFAULT.eval_every, help="steps between evaluations"
    )
    group.add_argument(
        "--eval-samples", type=int, default=_DEFAULT.eval_samples, help="held-out needles per phase"
    )
    group.add_argument(
        "--eval-seed",
        type=int,
        default=_DEFAULT.eval_seed,
        help="seed of the held-out needles (shared by every run)",
    )
    group.add_argument("--seed", type=int, default=_DEFAULT.seed, help="seed of the run")
    group.add_argument(
        "--seeds",
        type=int,
        default=None,
        metavar="K",
        help="train K seeds at once: --seed .. --seed+K-1, with a summary across them",
    )


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    group.add_argument("--quiet", action="store_true", help="no progress on stderr")


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


# ----------------------------------------------------------------------------- progress, cache


def progress_enabled(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr is not None


def train_progress(args: argparse.Namespace, label: str, configs=()):
    """A progress bar in training steps for `train_many(configs)` (silent with `--quiet`)."""
    from weakspots.sims.toy.train import stderr_progress

    return stderr_progress(label, configs, enabled=progress_enabled(args))


def compilation_cache_dir() -> Path | None:
    """Where the command line keeps JAX's persistent compilation cache; None when it is off.

    `$WEAKSPOTS_JAX_CACHE` names the folder, or turns the cache off (`off`, `0` or empty);
    by default `$XDG_CACHE_HOME/weakspots/jax` (`~/.cache/weakspots/jax`).
    """
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in CACHE_OFF else Path(value).expanduser()
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "weakspots" / "jax"


def enable_compilation_cache() -> str | None:
    """Turn JAX's persistent compilation cache on (`compilation_cache_dir`); returns its folder.

    A cache folder already configured (jax's own `JAX_COMPILATION_CACHE_DIR`) is kept.
    """
    import jax

    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return configured
    path = compilation_cache_dir()
    if path is None:
        return None
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", CACHE_MIN_COMPILE_SECONDS)
    return str(path)


# ----------------------------------------------------------------------------- statistics


STAT_RANGE = {"delta_max": (0.0, 1.0), "psc": (0.0, math.inf), "psc_std": (0.0, math.inf)}


def interval(name: str, values, samples: int | None = None) -> dict:
    """Mean and 95% interval across runs of the statistic `name`, inside the range it can take.

    An accuracy measured on `samples` needles per run gets `proportion_interval`; a
    predicted accuracy (no sampling) or a bounded statistic (`STAT_RANGE`) the t interval
    cut to its range. Returns `{"mean", "ci": [lo, hi] or None, "values"}`.
    """
    values = [float(v) for v in values]
    accuracy = "accuracy" in name
    low, high = (0.0, 1.0) if accuracy else STAT_RANGE.get(name, (-math.inf, math.inf))
    mean, lo, hi = runs_interval(values, low, high, samples if accuracy else None)
    ci = None if math.isnan(lo) else [lo, hi]
    return {"mean": mean, "ci": ci, "values": values}


def across_seeds(config: TrainConfig, summaries: list[dict]) -> dict:
    """Mean and 95% interval across seeds: per phase, of mean accuracy, `delta_max` and `psc`."""
    phases = list(zip(*(s["phase_accuracy"] for s in summaries), strict=True))
    per_phase = [interval("accuracy", p, config.eval_samples) for p in phases]
    out = {
        "runs": len(summaries),
        "phase_accuracy": {
            "mean": [p["mean"] for p in per_phase],
            "ci": [p["ci"] for p in per_phase],
        },
        "mean_accuracy": interval(
            "mean_accuracy",
            [s["mean_accuracy"] for s in summaries],
            config.eval_samples * config.stride,
        ),
    }
    for key in ("delta_max", "psc"):
        out[key] = interval(key, [s[key] for s in summaries])
    for stat in out.values():
        if isinstance(stat, dict):
            stat.pop("values", None)
    return out


def format_interval(stat: dict, fmt: str = ".3f") -> str:
    """`mean [lo, hi]` (just the mean when there is no interval)."""
    if stat.get("ci") is None:
        return format(stat["mean"], fmt)
    lo, hi = stat["ci"]
    return f"{stat['mean']:{fmt}} [{lo:{fmt}}, {hi:{fmt}}]"


# ----------------------------------------------------------------------------- output


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


MIN_TEXT_WIDTH = 24  # a text column is never wrapped narrower than this (intervals stay whole)


def terminal_width() -> int:
    """Columns of the terminal (or `$COLUMNS`); 100 when the output is not a terminal."""
    return max(shutil.get_terminal_size((100, 24)).columns, 40)


def table(
    headers: list[str], rows: list[list], floatfmt: str = ".3f", width: int | None = None
) -> str:
    """An aligned text table at most `width` columns wide (default `terminal_width()`).

    Numbers are right-aligned, text left-aligned. When the table is too wide, the widest
    text columns wrap inside their cells, down to `MIN_TEXT_WIDTH`; narrower text and
    numbers never wrap (so a table of short cells may stay wider than `width`).
    """
    width = terminal_width() if width is None else width

    def cell(v):
        if isinstance(v, float):
            return format(v, floatfmt)
        return "-" if v is None else str(v)

    cells = [[cell(v) for v in row] for row in rows]
    text = [any(isinstance(row[i], str) for row in rows) for i in range(len(headers))]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    over = sum(widths) + 2 * (len(widths) - 1) - width
    while over > 0:
        shrinkable = [
            i
            for i in range(len(widths))
            if text[i] and widths[i] > max(MIN_TEXT_WIDTH, len(headers[i]))
        ]
        if not shrinkable:
            break
        widths[max(shrinkable, key=lambda j: widths[j])] -= 1  # the widest text column
        over -= 1
    lines = [_line(headers, widths, text)]
    lines.append("  ".join("-" * w for w in widths))
    for row in cells:
        wrapped = [
            textwrap.wrap(c, w, break_on_hyphens=False) or [""] if len(c) > w else [c]
            for c, w in zip(row, widths, strict=True)
        ]
        for k in range(max(len(c) for c in wrapped)):
            lines.append(_line([c[k] if k < len(c) else "" for c in wrapped], widths, text))
    return "\n".join(line.rstrip() for line in lines)


def _line(cells: list[str], widths: list[int], text: list[bool]) -> str:
    return "  ".join(
        c.ljust(w) if t else c.rjust(w) for c, w, t in zip(cells, widths, text, strict=True)
    )

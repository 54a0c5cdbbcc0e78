"""`weakspots predict`: theory's closed-form and semi-analytic predictions for one config."""

from __future__ import annotations

import argparse

from weakspots import theory
from weakspots.idealized.toy.config import TrainConfig
from weakspots.theory.predictions import check_predictions, predictions

from . import common, induction, mechanisms

# The support-size prediction integrates the reduced flow for a time ~ 1 / growth rate:
# at 2e-4 (s=8: N near 3e4 at gain 16, or gain near 1.5 at N = 64) that is about a
# minute on one CPU core; slower growth is refused rather than left running.
MIN_GROWTH_RATE = 2e-4
MAX_GAIN_PER_STRIDE = 700.0  # exp(gain / stride) in the closed forms overflows float64 past ~709
SAMPLES_MAX = 4096


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "predict",
        help="theory's predictions: threshold, growth rate, support size, accuracy, t*",
        description="Closed-form and semi-analytic predictions of theory/ for one config "
        "(no training). --dim adds the finite-d per-phase accuracy.",
        epilog=common.examples(
            "weakspots predict --chunks 64 --gain 16",
            "weakspots predict --stride 4 --chunks 40 --dim 64 --json",
        ),
    )
    common.add_model_flags(parser)
    mechanisms.add_model_kind_flags(parser)
    parser.set_defaults(dim=None)  # optional here: accuracy at d only when asked for
    parser.add_argument(
        "--init-scale",
        type=float,
        default=TrainConfig().init_scale,
        help="std of the initial pooling logits (for the time to specialise)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=128,
        help="starts sampled for the support-size distribution and law",
    )
    sgd = parser.add_argument_group("SGD (with --dim: escape from uniform pooling, t*)")
    default = TrainConfig()
    sgd.add_argument("--lr", type=float, default=default.lr, help="SGD learning rate")
    sgd.add_argument("--batch", type=int, default=default.batch, help="SGD batch size")
    sgd.add_argument("--steps", type=int, default=default.steps, help="SGD steps")
    sgd.add_argument(
        "--escape-boundary",
        action="store_true",
        help="with --dim: also bisect for N_esc, the chunks past which SGD escapes (slow)",
    )
    common.add_output_flags(parser)
    induction.record_given(parser)  # --init-scale, --lr, --batch, --steps: SGD's coverage law
    parser.set_defaults(handler=run)


def validate(args: argparse.Namespace) -> TrainConfig:
    """The config the flags name (ConfigError/UsageError naming the flag)."""
    dim = TrainConfig().dim if args.dim is None else args.dim
    config = TrainConfig(
        stride=args.stride,
        chunks=args.chunks,
        dim=dim,
        heads=args.heads,
        gain=args.gain,
        loss=args.loss,
        init_scale=args.init_scale,
        lr=args.lr,
        batch=args.batch,
        steps=args.steps,
    )
    if args.learn_gain:
        raise common.UsageError(
            "--learn-gain: predict covers a fixed gain; run `weakspots flow --learn-gain`"
        )
    if not args.init_scale > 0:
        raise common.UsageError(f"--init-scale: must be a finite number > 0, got {args.init_scale}")
    if not 1 <= args.samples <= SAMPLES_MAX:
        raise common.UsageError(
            f"--samples: must be an integer in [1, {SAMPLES_MAX}], got {args.samples}"
        )
    if args.gain > MAX_GAIN_PER_STRIDE * args.stride:
        raise common.UsageError(
            f"--gain: must be <= {MAX_GAIN_PER_STRIDE:g} * --stride = "
            f"{MAX_GAIN_PER_STRIDE * args.stride:g} for the closed forms "
            f"(exp(gain/stride) overflows past it), got {args.gain:g}"
        )
    rate = float(theory.growth_rate(args.stride, args.chunks, args.gain, args.heads, args.loss))
    if 0 < rate < MIN_GROWTH_RATE:
        raise common.UsageError(
            f"--chunks {args.chunks}, --gain {args.gain:g}: uniform pooling grows away at rate "
            f"{rate:.3g}, and predict integrates the flow for a time ~ 1/rate; it covers "
            f"rates >= {MIN_GROWTH_RATE:g}: lower --chunks or raise --gain"
        )
    return config


def run(args: argparse.Namespace) -> int:
    if args.model == "induction":
        return induction.run_predict(args)
    if args.model != "toy":
        out = mechanisms.predict(args)
        if args.json:
            common.print_json(out)
        else:
            print(mechanisms.text_report(args, out))
        return 0
    validate(args)
    out = predictions(
        args.stride,
        args.chunks,
        args.gain,
        args.heads,
        args.dim,
        args.loss,
        args.init_scale,
        args.samples,
        args.lr,
        args.batch,
        args.steps,
        args.escape_boundary,
    )
    check_predictions(out, args.chunks)
    if args.json:
        common.print_json(out)
    else:
        print(text_report(args, out))
    return 0


def text_report(args: argparse.Namespace, out: dict) -> str:
    title = f"s={args.stride} N={args.chunks} H={args.heads} gain={args.gain:g} {args.loss}"
    if args.dim is not None:
        title += f" d={args.dim}"
    rows = []
    finite = out.get("finite_d") or {}
    dim_of = out.get("dim_of", {})
    items = [
        (_label(k, args.dim, dim_of.get(k, "inf"), k in finite), v)
        for k, v in out.items()
        if k not in ("dim_of", "finite_d", "escape_boundary")
    ]
    items += [(f"{k} [d={finite['dim']}]", v) for k, v in finite.items() if k != "dim"]
    if out.get("escape_boundary") is not None:
        escape = out["escape_boundary"]
        where = f"lr {escape['lr']:g}, batch {escape['batch']}, {escape['steps']} steps"
        items += [
            (f"p_escape [d={args.dim}] ({where})", escape["p_escape"]),
            (f"escape_boundary chunks [d={args.dim}]", escape["chunks"]),
        ]
    for key, value in items:
        if key.startswith("predicted_phase_accuracy") and value is not None:
            value = common.sparkline(value) + "  " + " ".join(f"{v:.3f}" for v in value)
        elif isinstance(value, float):
            value = f"{value:.6g}"
        elif value is None:
            value = NONE_MEANS.get(key.split(" ")[0], "none")
        rows.append([key, str(value)])
    return title + "\n" + common.table(["prediction", "value"], rows)


# What a prediction of None means, in the text report (--json keeps null).
NONE_MEANS = {
    "critical_chunks": "none (no N at this gain makes uniform pooling unstable)",
    "specialization_time": "never (uniform pooling is stable)",
    "specialization_time_sgd": "never (uniform pooling is stable at d)",
    "stable_support_sizes": "not derived (one head, mse only)",
    "support_size_law": "not derived (H <= 2 only)",
    "predicted_phase_accuracy": "with --dim",
    "escape_boundary": "not computed (add --escape-boundary)",
}


def _label(key: str, dim: int | None, at, in_finite_d: bool) -> str:
    """A row's name: with --dim, the d it is at, and for a number that the finite-d part
    also gives, that this one is the d = inf support's."""
    if dim is None:
        return key
    if in_finite_d and at != "inf":
        return f"{key} [d={at}, of the d=inf support]"
    return f"{key} [d={at}]"

"""`weakspots predict`: theory's closed-form and semi-analytic predictions for one config."""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig

from . import common

COVERAGE_SETTLE = 20000.0  # theory.predicted_coverage's default settling time
# The support-size prediction integrates the reduced flow for a time ~ 1 / growth rate:
# at 2e-4 (s=8: N near 3e4 at gain 16, or gain near 1.5 at N = 64) that is about a
# minute on one CPU core; slower growth is refused rather than left running.
MIN_GROWTH_RATE = 2e-4
MAX_GAIN_PER_STRIDE = 700.0  # exp(gain / stride) in the closed forms overflows float64 past ~709
SAMPLES_MAX = 4096


class PredictionFailed(RuntimeError):
    """A prediction came out non-finite or outside its range (e.g. an accuracy of 0)."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "predict",
        help="theory's predictions: threshold, growth rate, support size, accuracy, t*",
        description="Closed-form and semi-analytic predictions of theory/ for one config "
        "(no training). --dim adds the finite-d per-phase accuracy.",
    )
    common.add_model_flags(parser)
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
        help="isotropic near-uniform starts sampled for the support-size distribution",
    )
    common.add_output_flags(parser)
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


def check_predictions(out: dict, chunks: int) -> dict:
    """Raise PredictionFailed unless every number is finite and every accuracy in (0, 1]."""
    for key, value in out.items():
        values = value if isinstance(value, list) else [value]
        numbers = [v for v in values if isinstance(v, float)]
        if any(not math.isfinite(v) for v in numbers):
            raise PredictionFailed(f"{key} is not finite: {value}")
    accuracy = out.get("predicted_phase_accuracy") or []
    if any(not 0.0 < a <= 1.0 for a in accuracy):
        raise PredictionFailed(
            f"predicted_phase_accuracy left (0, 1] ({min(accuracy):.3g}): the finite-d "
            f"quadrature over- or underflowed at this gain; try a smaller --gain"
        )
    return out


def _finite_or_none(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def predictions(stride, chunks, gain, heads=1, dim=None, loss="mse", init_scale=0.01, samples=128):
    """Every prediction of theory/ for one config, as plain JSON-able values.

    stride s, chunks N, gain beta, heads H, dim d (None: skip the finite-d accuracy),
    loss "mse" | "ce", init_scale of the pooling logits, samples: near-uniform starts for
    the support-size distribution. Infinite values (no threshold, never specialises) are
    None. For H = 1 the support size is theory.predicted_support_size's most probable k;
    for H >= 2 the phases per head of theory.predicted_coverage's most probable outcome.
    """
    lam = float(theory.growth_rate(stride, chunks, gain, heads, loss))
    uniform_stable = not lam > 0
    out = {
        "critical_chunks": _finite_or_none(theory.critical_chunks(gain, stride, heads, loss)),
        "critical_gain": float(theory.critical_gain(chunks, stride, heads, loss)),
        "growth_rate": lam,
        "uniform_stable": uniform_stable,
        "stable_support_sizes": None,
        "specialization_time": _finite_or_none(
            theory.specialization_time(stride, chunks, gain, init_scale, heads, loss)
        ),
    }
    if heads == 1:
        if loss == "mse":
            out["stable_support_sizes"] = theory.stable_support_sizes(stride, chunks, gain).tolist()
        if uniform_stable:
            sizes, probs = np.array([stride]), np.array([1.0])
        else:
            sizes, probs, _ = theory.predicted_support_size(stride, chunks, gain, samples)
        k = int(sizes[np.argmax(probs)])
        out["predicted_support_size"] = k
        out["support_size_distribution"] = {
            str(int(a)): float(p) for a, p in zip(sizes, probs, strict=True)
        }
        weights = theory.support_weights(stride, k)[None]
    else:
        # theory.predicted_coverage's samples, kept: the accuracy needs one of the states
        weights = theory.sampled_final_weights(
            stride, chunks, gain, heads, loss, samples, settle=COVERAGE_SETTLE
        )
        outcomes = [theory.coverage_summary(w, stride) for w in weights]
        dist = {key: n / samples for key, n in Counter(outcomes).most_common()}
        top = next(iter(dist))
        out["predicted_support_size"] = list(top[0])
        out["support_size_distribution"] = {
            f"{'+'.join(map(str, key[0]))} uncovered {key[1]}": p for key, p in dist.items()
        }
        out["uncovered_phases"] = top[1]
        # the final state of the first sampled start with the most probable outcome
        first = weights[outcomes.index(top)]
        weights = np.where(theory.covered(first, stride), first, 0.0)
        weights = weights / weights.sum(axis=-1, keepdims=True)
    out["predicted_phase_accuracy"] = None
    accuracy_dim = math.inf if dim is None else dim
    if heads == 1:
        accuracy = theory.phase_accuracy(weights[0], gain, chunks, accuracy_dim)
    else:
        accuracy = _heads_accuracy(weights, gain, chunks, accuracy_dim)
    if dim is not None:
        out["predicted_phase_accuracy"] = np.asarray(accuracy, float).tolist()
    out["predicted_delta_max"] = float(theory.delta_max(accuracy))
    return out


def _heads_accuracy(weights, gain, chunks, dim):
    if math.isinf(dim):
        covered = (weights > 0).any(axis=0)
        return np.where(covered, 1.0, 1.0 / chunks)
    # The head-averaged readout argmax_c mean_h P_h[c] (theory.interventions), not the best head.
    return theory.readout_accuracy(weights, gain, chunks, dim)


def run(args: argparse.Namespace) -> int:
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
    for key, value in out.items():
        if key == "predicted_phase_accuracy" and value is not None:
            value = common.sparkline(value) + "  " + " ".join(f"{v:.3f}" for v in value)
        elif isinstance(value, float):
            value = f"{value:.6g}"
        elif value is None:
            value = "-"
        rows.append([key, str(value)])
    return title + "\n" + common.table(["prediction", "value"], rows)

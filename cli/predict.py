"""`weakspots predict`: theory's closed-form and semi-analytic predictions for one config."""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np

from weakspots import theory
from weakspots.idealized.toy.config import TrainConfig

from . import common, induction, mechanisms

COVERAGE_SETTLE = 20000.0  # theory.predicted_coverage's default settling time
NOISE_SAMPLES = 2**13  # Monte Carlo problems for SGD's gradient noise at finite d
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


def predictions(
    stride,
    chunks,
    gain,
    heads=1,
    dim=None,
    loss="mse",
    init_scale=0.01,
    samples=128,
    lr=2.0,
    batch=256,
    steps=600,
    escape_boundary=False,
):
    """Every prediction of theory/ for one config, as plain JSON-able values.

    stride s, chunks N, gain beta, heads H, dim d (None: skip the finite-d part), loss
    "mse" | "ce", init_scale of the pooling logits, samples: starts for the support-size
    distribution and law; lr, batch, steps: the SGD run that the finite-d part describes;
    escape_boundary: bisect for N_esc (slow). Infinite values (no threshold, never
    specialises) are None. The top-level numbers are the d = inf theory except the
    accuracy and delta_max, which are at d when d is given: `dim_of` names the d of each.
    support_size_distribution integrates the d = inf flow from isotropic starts (a
    consistency check); support_size_law is the derived cut-local race
    (theory.support_size_law) for the starts init_scale describes, k -> P (H <= 2).
    For H = 1 the support size is the distribution's most probable k; for H >= 2 the
    phases per head of theory.predicted_coverage's most probable outcome. With d (one
    head, mse), `finite_d` holds the numbers at d: threshold N_c(d), lambda_d, stability,
    admissible sizes, the support from the L_d flow and its delta_max, SGD's median t*
    (theory.sgd_specialization_time); and escape_boundary (None without d): P(escape within
    steps) of SGD from uniform pooling (theory.escape_within) and, if asked, N_esc
    (theory.escape_boundary).
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
    out["support_size_law"] = None
    if heads <= 2:
        law = theory.support_size_law(
            stride, chunks, gain, heads, loss, init_scale, samples=samples
        )["law"]
        out["support_size_law"] = {str(k): p for k, p in law.items()}
    out["predicted_phase_accuracy"] = None
    accuracy_dim = math.inf if dim is None else dim
    if heads == 1:
        accuracy = theory.phase_accuracy(weights[0], gain, chunks, accuracy_dim)
    else:
        accuracy = _heads_accuracy(weights, gain, chunks, accuracy_dim)
    if dim is not None:
        out["predicted_phase_accuracy"] = np.asarray(accuracy, float).tolist()
    out["predicted_delta_max"] = float(theory.delta_max(accuracy))
    at = "inf" if dim is None else dim
    out["dim_of"] = {key: "inf" for key in out} | {
        "predicted_phase_accuracy": at,
        "predicted_delta_max": at,
    }
    out["finite_d"] = out["escape_boundary"] = None
    if dim is not None and heads == 1 and loss == "mse":
        out["finite_d"] = finite_d_predictions(
            stride, chunks, gain, dim, init_scale, samples, lr, batch, steps, escape_boundary
        )
        out["escape_boundary"] = out["finite_d"].pop("escape_boundary")
        out["dim_of"] |= {"finite_d": dim, "escape_boundary": dim}
    return out


def finite_d_predictions(
    stride, chunks, gain, dim, init_scale, samples, lr, batch, steps, escape_boundary=False
):
    """The predictions at key dimension d (one head, mse), as plain JSON-able values.

    critical_chunks: N_c(d) (theory.critical_chunks_finite_d); growth_rate: lambda_d;
    uniform_stable: lambda_d <= 0; stable_support_sizes at d; predicted_support_size and
    support_size_distribution: the flow of L_d from `samples` isotropic starts
    (theory.predicted_support_size(dim=d)); predicted_delta_max of that k-state at d;
    specialization_time_sgd: SGD's median t* at (lr, batch) with gradient noise
    (theory.sgd_specialization_time; None where uniform is stable at d); escape_boundary:
    lr, batch, steps, p_escape (theory.escape_within) and chunks = N_esc (None unless
    escape_boundary).
    """
    lam = theory.growth_rate_finite_d(stride, chunks, gain, dim)
    sizes, probs, admissible = theory.predicted_support_size(
        stride, chunks, gain, samples=samples, dim=dim
    )
    k = int(sizes[np.argmax(probs)])
    profile = theory.phase_accuracy_profile(stride, chunks, k, dim)
    onset = None
    if lam > 0:
        noise = theory.uniform_moments(stride, chunks, dim, gain, samples=NOISE_SAMPLES)
        onset = theory.sgd_specialization_time(
            stride, chunks, gain, init_scale, dim, lr, batch, moments=noise
        )["time"]
    boundary = {
        "lr": lr,
        "batch": batch,
        "steps": steps,
        "p_escape": theory.escape_within(
            stride, chunks, gain, dim, lr, batch, steps, samples=NOISE_SAMPLES
        ),
        "chunks": None,
    }
    if escape_boundary:
        found = theory.escape_boundary(stride, gain, dim, lr, batch, steps)
        boundary["chunks"] = found["chunks"]
    return {
        "dim": dim,
        "critical_chunks": _finite_or_none(theory.critical_chunks_finite_d(gain, stride, dim)),
        "growth_rate": lam,
        "uniform_stable": not lam > 0,
        "stable_support_sizes": np.asarray(admissible).tolist(),
        "predicted_support_size": k,
        "support_size_distribution": {
            str(int(a)): float(p) for a, p in zip(sizes, probs, strict=True)
        },
        "predicted_delta_max": float(theory.delta_max(profile)),
        "specialization_time_sgd": None if onset is None else _finite_or_none(onset),
        "escape_boundary": boundary,
    }


def _heads_accuracy(weights, gain, chunks, dim):
    if math.isinf(dim):
        covered = (weights > 0).any(axis=0)
        return np.where(covered, 1.0, 1.0 / chunks)
    # The head-averaged readout argmax_c mean_h P_h[c] (theory.interventions), not the best head.
    return theory.readout_accuracy(weights, gain, chunks, dim)


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

"""`weakspots flow`: integrate the reduced gradient flow (docs/theory.md §5) of a FlowConfig."""

from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from weakspots.idealized.toy.config import GAIN_PARAMETRISATIONS, LOSSES, FlowConfig
from weakspots.sims.toy.flow import FlowFailed, FlowResult, solve

from . import common, induction, mechanisms

_DEFAULT = FlowConfig()


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "flow",
        help="integrate the reduced (d = infinity) gradient flow",
        description="Integrate the reduced gradient flow of docs/theory.md §5 (diffrax Tsit5, "
        "PID step control, "
        "float64) from the trainer's initial pooling logits for --seed; print the pooling "
        "weights over time. Every flag is a field of idealized.toy.config.FlowConfig.",
        epilog=common.examples(
            "weakspots flow --chunks 64 --gain 16 --t1 400",
            "weakspots flow --stride 4 --chunks 40 --heads 2 --json",
        ),
    )
    model = parser.add_argument_group("model")
    model.add_argument("--stride", type=int, default=_DEFAULT.stride, help=_h("tokens per chunk s"))
    model.add_argument(
        "--chunks", type=int, default=_DEFAULT.chunks, help=_h("chunks of context N")
    )
    model.add_argument(
        "--dim",
        type=int,
        default=_DEFAULT.dim,
        help="key dimension d: integrate the finite-d expected loss L_d (one head, mse) "
        "instead of L_inf (default: d = infinity)",
    )
    model.add_argument("--heads", type=int, default=_DEFAULT.heads, help=_h("attention heads H"))
    model.add_argument(
        "--gain",
        type=float,
        default=_DEFAULT.gain,
        help=_h("logit gain beta (its start if learned)"),
    )
    model.add_argument("--loss", default=_DEFAULT.loss, help=_h(f"one of {', '.join(LOSSES)}"))
    model.add_argument(
        "--learn-gain", action="store_true", help="learn the gain as well (default: fixed)"
    )
    model.add_argument(
        "--gain-parametrisation",
        default=_DEFAULT.gain_parametrisation,
        help=_h(
            f"coordinate of a learned gain, one of {', '.join(GAIN_PARAMETRISATIONS)} "
            "(log: d log beta/dt = -beta dL/dbeta; linear: dbeta/dt = -dL/dbeta)"
        ),
    )
    model.add_argument(
        "--weight-decay",
        type=float,
        default=_DEFAULT.weight_decay,
        help=_h("penalty weight_decay/2 * sum_h gain_h^2"),
    )
    model.add_argument(
        "--phase-entropy",
        type=float,
        default=_DEFAULT.phase_entropy,
        metavar="REG",
        help=_h("reward entropy of the pooling weights: loss - REG * mean_h H(alpha_h)"),
    )
    start = parser.add_argument_group("start")
    start.add_argument(
        "--init-scale",
        type=float,
        default=_DEFAULT.init_scale,
        help=_h("std of the initial pooling logits"),
    )
    start.add_argument(
        "--seed", type=int, default=_DEFAULT.seed, help=_h("seed of the start (the trainer's)")
    )
    solver = parser.add_argument_group("solver")
    solver.add_argument(
        "--t1", type=float, default=_DEFAULT.t1, help=_h("flow time to integrate to")
    )
    solver.add_argument(
        "--saves", type=int, default=_DEFAULT.saves, help=_h("saved times, evenly in [0, t1]")
    )
    solver.add_argument(
        "--rtol", type=float, default=_DEFAULT.rtol, help=_h("relative tolerance of the PID step")
    )
    solver.add_argument(
        "--atol", type=float, default=_DEFAULT.atol, help=_h("absolute tolerance of the PID step")
    )
    solver.add_argument(
        "--max-steps",
        type=int,
        default=_DEFAULT.max_steps,
        help=_h("solver steps before the flow fails"),
    )
    solver.add_argument(
        "--event-level",
        type=float,
        default=_DEFAULT.event_level,
        help=_h("the specialisation time is when |centred pooling logits| reaches this"),
    )
    mechanisms.add_model_kind_flags(parser, predict=False)
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def _h(text: str) -> str:
    return f"{text} (default: %(default)s)"


def flow_config(args: argparse.Namespace) -> FlowConfig:
    """The FlowConfig the flags name (ConfigError naming a bad flag)."""
    names = {f.name for f in dataclasses.fields(FlowConfig)}
    return FlowConfig(**{k: v for k, v in vars(args).items() if k in names})


def run(args: argparse.Namespace) -> int:
    if args.model == "induction":
        return induction.run_flow(args)
    config = mechanisms.flow_config(args, flow_config)
    try:
        result = solve(config)
    except FlowFailed as error:
        print(f"weakspots flow: error: {error}", file=sys.stderr)
        return 1
    out = result.summary()
    if args.json:
        common.print_json(out)
    else:
        print(text_report(result))
    return 0


def text_report(result: FlowResult, shown: int = 11) -> str:
    """The flow as a table of at most `shown` saved times (a line says when some are left
    out), then the final weights and support."""
    config, out = result.config, result.summary()
    times = out["times"]
    picks = sorted(set(np.linspace(0, len(times) - 1, min(shown, len(times))).round().astype(int)))
    rows = []
    for i in picks:
        weights = out["pooling_weights"][i]
        rows.append(
            [
                times[i],
                out["loss"][i],
                " ".join(f"{g:.3g}" for g in out["gain"][i]),
                *(common.sparkline(w, 0.0, max(w)) for w in weights),
            ]
        )
    headers = ["t", "loss", "gain", *(f"weights h{h}" for h in range(config.heads))]
    t_star = out["specialization_time"]
    dim = "inf" if config.dim is None else config.dim
    return "\n".join(
        [
            f"reduced flow s={config.stride} N={config.chunks} d={dim} H={config.heads} "
            f"gain={config.gain:g} {config.loss} init_scale={config.init_scale:g} "
            f"seed={config.seed}" + (" learned gain" if config.learn_gain else ""),
            common.table(headers, rows, ".4g"),
            *(
                [f"({len(picks)} of {len(times)} saved times shown, evenly spaced; --json: all)"]
                if len(picks) < len(times)
                else []
            ),
            "final weights: "
            + "; ".join(" ".join(f"{w:.3f}" for w in h) for h in out["pooling_weights"][-1]),
            f"support size per head {out['support_size']}  specialization time "
            + ("never" if t_star is None else f"{t_star:.4g}"),
        ]
    )

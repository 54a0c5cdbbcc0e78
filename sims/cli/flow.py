"""`weakspots flow`: integrate the reduced gradient flow (THEORY 5) of one config with diffrax."""

from __future__ import annotations

import argparse
import math

import jax
import numpy as np

from weakspots.idealized.config import TrainConfig
from weakspots.idealized.metrics import support_size
from weakspots.sims.flow import reduced_flow

from . import common

_DEFAULT = TrainConfig()


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "flow",
        help="integrate the reduced (d = infinity) gradient flow",
        description="Integrate the reduced gradient flow of THEORY 5 (diffrax Tsit5 + PID, "
        "float64) from a near-uniform start; print the pooling weights over time.",
    )
    common.add_model_flags(parser)
    parser.add_argument("--t1", type=float, default=1200.0, help="flow time to integrate to")
    parser.add_argument("--saves", type=int, default=101, help="saved times in [0, t1]")
    parser.add_argument(
        "--init-scale",
        type=float,
        default=_DEFAULT.init_scale,
        help="std of the initial pooling logits",
    )
    parser.add_argument("--seed", type=int, default=_DEFAULT.seed, help="seed of the start")
    parser.add_argument(
        "--weight-decay", type=float, default=_DEFAULT.weight_decay, help="penalty wd/2 gain^2"
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def validate(args: argparse.Namespace) -> TrainConfig:
    """The config the flags name (ConfigError/UsageError naming the flag)."""
    config = common.train_config(args)
    if not (math.isfinite(args.t1) and args.t1 > 0):
        raise common.UsageError(f"--t1: must be a finite number > 0, got {args.t1}")
    if args.saves < 2:
        raise common.UsageError(f"--saves: must be an integer >= 2, got {args.saves}")
    return config


def flow_report(config: TrainConfig, t1: float, saves: int) -> dict:
    """The reduced flow of `config` from seed `config.seed`, as plain JSON-able values.

    Keys: times (T,), pooling_weights (T, H, s), gain (T, H), loss (T,), support_size
    (H,) at t1, specialization_time (None if the event is not reached by t1).
    """
    hist = reduced_flow(
        jax.random.PRNGKey(config.seed),
        stride=config.stride,
        chunks=float(config.chunks),
        heads=config.heads,
        gain=config.gain,
        init_scale=config.init_scale,
        weight_decay=config.weight_decay,
        learn_gain=config.learn_gain,
        loss=config.loss,
        t_end=t1,
        n_save=saves,
    )
    weights = np.asarray(hist.pooling_weights[0], float)
    t_star = float(hist.specialization_time[0])
    return {
        "times": np.asarray(hist.times[0], float).tolist(),
        "pooling_weights": weights.tolist(),
        "gain": np.asarray(hist.gain[0], float).tolist(),
        "loss": np.asarray(hist.loss[0], float).tolist(),
        "support_size": support_size(weights[-1]).tolist(),
        "specialization_time": t_star if math.isfinite(t_star) else None,
    }


def run(args: argparse.Namespace) -> int:
    config = validate(args)
    out = flow_report(config, args.t1, args.saves)
    if args.json:
        common.print_json(out)
    else:
        print(text_report(config, out))
    return 0


def text_report(config: TrainConfig, out: dict, shown: int = 11) -> str:
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
    return "\n".join(
        [
            f"reduced flow s={config.stride} N={config.chunks} H={config.heads} "
            f"gain={config.gain:g} {config.loss} init_scale={config.init_scale:g} "
            f"seed={config.seed}" + (" learned gain" if config.learn_gain else ""),
            common.table(headers, rows, ".4g"),
            "final weights: "
            + "; ".join(" ".join(f"{w:.3f}" for w in h) for h in out["pooling_weights"][-1]),
            f"support size per head {out['support_size']}  specialization time "
            + ("never" if t_star is None else f"{t_star:.4g}"),
        ]
    )

"""`weakspots ablate`: train, then measure causal interventions per head and phase, beside theory."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from weakspots.sims.toy.interventions import ablate
from weakspots.sims.toy.train import train

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ablate",
        help="head ablation, pooling-weight and activation patching: heads x phases effects",
        description="Train one model, then ablate each head, patch its pooling weights and its "
        "compressed keys; print the heads x phases effect matrices and theory's predictions.",
        epilog=common.examples(
            "weakspots ablate --heads 4",
            "weakspots ablate --heads 2 --chunks 32 --ablate-samples 4096 --json",
        ),
    )
    common.add_train_flags(parser)
    parser.add_argument(
        "--ablate-samples",
        type=int,
        default=None,
        help="needles per phase for the interventions (default: --eval-samples)",
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    config = common.train_config(args)
    if args.seeds is not None:
        raise common.UsageError("--seeds: ablate analyses one model; use --seed")
    if args.ablate_samples is not None and args.ablate_samples < 1:
        raise common.UsageError(
            f"--ablate-samples: must be an integer >= 1, got {args.ablate_samples}"
        )
    with common.train_progress(args, "ablate", [config]) as progress:
        result = train(config, progress=progress)
    report = ablate(config, result.model, args.ablate_samples)
    report["config"] = dataclasses.asdict(config)
    if args.json:
        common.print_json(report)
    else:
        print(text_report(report, config))
    return 0


def _matrix(name: str, matrix, heads: int) -> str:
    rows = [[f"h{h}", *np.asarray(matrix[h], float).tolist()] for h in range(heads)]
    stride = len(matrix[0])
    return name + "\n" + common.table(["head", *(f"phi={p}" for p in range(stride))], rows, ".2f")


def text_report(report: dict, config) -> str:
    heads = config.heads
    parts = [
        f"s={config.stride} N={config.chunks} d={config.dim} H={heads} gain={config.gain:g} "
        f"{config.operator} {config.loss} steps={config.steps} seed={config.seed}",
        f"phase accuracy {common.sparkline(report['phase_accuracy'])}  "
        + " ".join(f"{a:.2f}" for a in report["phase_accuracy"]),
        _matrix("ablation effect (accuracy drop)", report["effect"], heads),
    ]
    for key, title in (
        ("predicted_effect", "predicted ablation effect (theory.interventions)"),
        ("patch_zero", "pooling patch alpha_h[phi] = 0 (drop)"),
        ("patch_uniform", "pooling patch alpha_h[phi] = 1/s (drop)"),
        ("activation_patch", "activation patching: accuracy restored by head h's clean keys"),
        ("pooling_weights", "pooling weights"),
    ):
        if report.get(key) is not None:
            parts.append(_matrix(title, report[key], heads))
    parts.append(
        "specialisation "
        + " ".join(f"h{h}={v:.2f}" for h, v in enumerate(report["specialization"]))
    )
    return "\n\n".join(parts)

"""`weakspots bench`: the project's speed against a naive baseline and the machine, as ratios."""

from __future__ import annotations

import argparse
import sys
import time

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark the trainer and the flow against baselines and the machine's limit",
        description=(
            "Time the trainer against the naive loop and the RNG limit, the diffrax flow "
            "against scipy, and 2 host devices against 1, in one run; print the ratios."
        ),
        epilog=common.examples("weakspots bench --quick", "weakspots bench --json > bench.json"),
    )
    parser.add_argument(
        "--quick", action="store_true", help="less work (fewer steps and rounds per comparison)"
    )
    common.add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from weakspots.benchmarks import bench  # jax and the baselines load only when this verb runs

    settings = bench.QUICK if args.quick else bench.FULL
    start = time.perf_counter()

    def log(message: str) -> None:
        if common.progress_enabled(args):
            elapsed = time.perf_counter() - start
            print(f"bench [{elapsed:5.1f}s]: {message}", file=sys.stderr, flush=True)

    result = bench.run(settings, log)
    if args.json:
        common.print_json(result)
    else:
        print(text_report(result))
    return 0


def text_report(result: dict) -> str:
    """The targets table, then the other measurements, one per line."""

    def fmt(value):
        if value is None:
            return "-"
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    rows = [
        [name, fmt(t["value"]), f">= {t['target']:g}", "yes" if t["met"] else "NO"]
        for name, t in result["targets"].items()
    ]
    lines = [
        f"weakspots bench ({result['platform']}; medians of paired ratios over interleaved rounds)",
        common.table(["metric", "value", "target", "met"], rows),
        "",
    ]
    cpu = result["cpu_time_ratios"]
    extra = [
        ("sharding_speedup (2 host devices / 1)", result["sharding_speedup"]),
        ("compile_seconds (trainer)", result["compile_seconds"]),
        ("flow_compile_seconds", result["flow_compile_seconds"]),
        ("peak_memory_mb (canonical batch)", result["peak_memory_mb"]),
        ("flow_max_disagreement (diffrax vs LSODA)", result["flow_max_disagreement"]),
        *((f"{k} (CPU-time ratio)", v) for k, v in cpu.items()),
        *((k, v) for k, v in result["details"].items() if k.startswith("reduced_flow_api")),
        *(
            (f"operator_step_speedup ({op})", v)
            for op, v in (result.get("operator_step_speedup") or {}).items()
        ),
        *((k, v) for k, v in (result["absolute"] or {}).items()),
        ("bench_seconds", result["bench_seconds"]),
    ]
    width = max(len(k) for k, _ in extra)
    lines += [f"{k.ljust(width)}  {fmt(v)}" for k, v in extra]
    if "sharding_error" in result["details"]:
        lines.append(f"sharding failed: {result['details']['sharding_error']}")
    return "\n".join(lines)

"""`weakspots sweep SPEC.toml --store DIR`: run a declared grid of runs into a result store."""

from __future__ import annotations

import argparse
import math
import sys

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a TOML grid of train/flow runs into a result store",
        description=(
            "Run every config of a TOML sweep spec ([fixed] values, [grid] lists; "
            'kind = "train" | "flow") in compiled, device-sharded batches, writing each '
            "run to the store as it finishes. See docs/sweeps.md."
        ),
    )
    parser.add_argument("spec", help="the sweep spec (TOML)")
    parser.add_argument("--store", required=True, help="result store directory")
    parser.add_argument("--resume", action="store_true", help="skip runs already in the store")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--slice",
        default="0/1",
        metavar="i/n",
        help="run only share i of n (0 <= i < n): every n-th run from the i-th",
    )
    parser.add_argument(
        "--runs-per-device",
        type=int,
        default=None,
        help="runs per device in one batch (default: sized from --memory-gb)",
    )
    parser.add_argument(
        "--memory-gb", type=float, default=1.0, help="memory per device to size batches"
    )
    parser.add_argument("--dry-run", action="store_true", help="list the runs; run nothing")
    group = parser.add_argument_group("several processes (jax.distributed)")
    group.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() (auto-detects TPU pods, Slurm, ...) and "
        "shard over every process's devices; process 0 writes",
    )
    group.add_argument("--coordinator", default=None, help="host:port of process 0")
    group.add_argument("--num-processes", type=int, default=None)
    group.add_argument("--process-id", type=int, default=None)
    parser.set_defaults(handler=run)


def parse_slice(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise common.UsageError(f"--slice: expected i/n (e.g. 0/4), got {text!r}") from None
    if not (count >= 1 and 0 <= index < count):
        raise common.UsageError(f"--slice: need 0 <= i < n, got {text!r}")
    return index, count


def run(args: argparse.Namespace) -> int:
    index, count = parse_slice(args.slice)
    if args.runs_per_device is not None and args.runs_per_device < 1:
        raise common.UsageError(
            f"--runs-per-device: must be an integer >= 1, got {args.runs_per_device}"
        )
    if not (math.isfinite(args.memory_gb) and args.memory_gb > 0):
        raise common.UsageError(f"--memory-gb: must be a finite number > 0, got {args.memory_gb}")
    # Imported here: the spec is checked (and usage errors reported) before jax starts.
    from weakspots.sims import store, sweep

    try:
        runs = sweep.select_slice(sweep.load_spec(args.spec).runs(), index, count)
    except sweep.SpecError as err:
        raise common.UsageError(str(err)) from None
    if args.dry_run:
        for run in runs:
            print(run.hash, run.row)
        return 0
    try:
        store.prepare(args.store)  # before anything trains
    except store.StoreError as err:
        raise common.UsageError(f"--store: {err}") from None
    if args.distributed:
        import jax

        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
        )
    mesh = sweep.run_mesh()
    progress = None if args.quiet else sweep.Progress(len(runs))
    report = sweep.run_sweep(
        runs,
        args.store,
        resume=args.resume,
        mesh=mesh,
        runs_per_device=args.runs_per_device,
        memory_bytes=int(args.memory_gb * 2**30),
        progress=progress,
    )
    if not args.quiet:
        print(
            f"sweep: {report.ran} runs in {report.seconds:.1f}s "
            f"({report.runs_per_second:.2f} runs/s) over {report.devices} device(s), "
            f"{report.buckets} bucket(s); {report.skipped} already stored",
            file=sys.stderr,
        )
    return 0

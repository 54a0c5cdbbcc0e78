"""`weakspots sweep SPEC.toml --store DIR`: run a declared grid of runs into a result store."""

from __future__ import annotations

import argparse
import math
import os
import sys

from . import common


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a TOML grid of train/flow runs into a result store",
        description=(
            "Run every config of a TOML sweep spec ([fixed] values, [grid] lists; "
            'kind = "train" | "flow") in compiled, device-sharded batches, writing each '
            "run to the store as it finishes. Ctrl-C stops it; --resume carries on. "
            "See docs/sweeps.md."
        ),
        epilog=common.examples(
            "weakspots sweep examples/sweep_tiny.toml --store results/tiny --dry-run",
            "weakspots sweep examples/sweep_tiny.toml --store results/tiny --resume",
            "weakspots sweep spec.toml --store /shared/store --resume --quiet  "
            "# in a Slurm array task: its share",
            "weakspots plot results/tiny --x gain --y delta_max --hue operator",
        ),
    )
    parser.add_argument("spec", help="the sweep spec (TOML)")
    parser.add_argument("--store", required=True, help="result store directory")
    parser.add_argument("--resume", action="store_true", help="skip runs already in the store")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--slice",
        default=None,
        metavar="i/n",
        help="run only share i of n (0 <= i < n): every n-th run from the i-th (default: "
        "this task's share of a Slurm job array, from SLURM_ARRAY_TASK_*; else 0/1)",
    )
    parser.add_argument(
        "--runs-per-device",
        type=int,
        default=None,
        help="runs per device in one batch (default: as many as fit --memory-gb)",
    )
    parser.add_argument(
        "--memory-gb",
        type=float,
        default=None,
        help="memory per device one batch may take (default: half the device's free "
        "memory; on CPU, half the host's available memory over its devices)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the run count, the buckets (one compile each) and the runs; run nothing",
    )
    group = parser.add_argument_group("several processes (jax.distributed)")
    group.add_argument(
        "--distributed",
        action="store_true",
        help="call jax.distributed.initialize() (auto-detects TPU pods, Slurm, ...) and "
        "shard over every process's devices; process 0 writes",
    )
    group.add_argument(
        "--coordinator", default=None, help="host:port of process 0 (default: auto-detected)"
    )
    group.add_argument(
        "--num-processes", type=int, default=None, help="processes in all (default: auto-detected)"
    )
    group.add_argument(
        "--process-id", type=int, default=None, help="this process's rank (default: auto-detected)"
    )
    group.add_argument(
        "--distributed-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="longest wait for the other processes (connecting, barriers, a silent peer) "
        "before exiting with status 1 (default: $WEAKSPOTS_DISTRIBUTED_TIMEOUT, else 120)",
    )
    parser.set_defaults(handler=run)


def parse_slice(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise common.UsageError(f"--slice: expected i/n (e.g. 0/4), got {text!r}") from None
    if not (count >= 1 and 0 <= index < count):
        raise common.UsageError(f"--slice: need 0 <= i < n, got {text!r}")
    return index, count


def share_of(args: argparse.Namespace, label: str) -> tuple[int, int]:
    """`(index, count)` from `--slice i/n`, else from the Slurm job array this task is in
    (said on stderr unless `--quiet`), else `(0, 1)`; a bad slice is a UsageError."""
    from weakspots.sims import sweep

    try:
        share = parse_slice(args.slice) if args.slice is not None else sweep.slurm_array_slice()
    except sweep.SpecError as err:
        raise common.UsageError(str(err)) from None
    index, count = share or (0, 1)
    if args.slice is None and share is not None and not args.quiet:
        print(f"{label}: Slurm array task: slice {index}/{count}", file=sys.stderr)
    return index, count


def run(args: argparse.Namespace) -> int:
    if args.runs_per_device is not None and args.runs_per_device < 1:
        raise common.UsageError(
            f"--runs-per-device: must be an integer >= 1, got {args.runs_per_device}"
        )
    if args.memory_gb is not None and not (math.isfinite(args.memory_gb) and args.memory_gb > 0):
        raise common.UsageError(f"--memory-gb: must be a finite number > 0, got {args.memory_gb}")
    # Imported here: the spec is checked (and usage errors reported) before jax starts.
    from weakspots.sims import store, sweep

    index, count = share_of(args, "sweep")
    try:
        runs = sweep.select_slice(sweep.load_spec(args.spec).runs(), index, count)
        timeout = sweep.distributed_timeout(args.distributed_timeout)
    except sweep.SpecError as err:
        raise common.UsageError(str(err)) from None
    if args.dry_run:
        print(dry_run_report(runs, args.store if args.resume else None))
        return 0
    try:
        store.prepare(args.store)  # before anything trains
    except store.StoreError as err:
        raise common.UsageError(f"--store: {err}") from None
    if args.distributed:
        return _run_distributed(args, sweep, runs, timeout)
    return _run(args, sweep, runs, timeout)


def _run_distributed(args, sweep, runs, timeout: float) -> int:
    """`_run` as one of several processes: any failure ends this process at once, status 1.

    A process that raised and then exited normally would wait at jax's shutdown barrier
    while the others wait for it in a collective; exiting at once lets the others see its
    heartbeat stop (within the timeout) instead.
    """
    try:
        sweep.start_distributed(
            args.coordinator, args.num_processes, args.process_id, timeout=timeout
        )
    except sweep.SpecError as err:
        raise common.UsageError(str(err)) from None
    try:
        return _run(args, sweep, runs, timeout)
    except Exception as err:  # noqa: BLE001  (reported in one line, then the process ends)
        import jax

        print(
            f"weakspots sweep: error: process {jax.process_index()}: {err}",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        os._exit(1)


def _run(args, sweep, runs, timeout: float) -> int:
    import jax

    from weakspots.sims import store
    from weakspots.sims.progress import Progress

    mesh = sweep.run_mesh()
    try:
        enabled = not args.quiet and jax.process_index() == 0
        with Progress("sweep", "runs", enabled=enabled) as progress:
            report = sweep.run_sweep(
                runs,
                args.store,
                resume=args.resume,
                mesh=mesh,
                runs_per_device=args.runs_per_device,
                memory_bytes=None if args.memory_gb is None else int(args.memory_gb * 2**30),
                progress=progress,
                timeout=timeout,
            )
    except KeyboardInterrupt:
        stored = len(store.completed_hashes(args.store) & {r.hash for r in runs})
        print(
            f"weakspots sweep: interrupted: stored {stored} of {len(runs)} runs; "
            "rerun with --resume",
            file=sys.stderr,
        )
        return 130
    if not args.quiet:
        processes = ""
        if jax.process_count() > 1:
            processes = (
                f" in {jax.process_count()} processes; process {jax.process_index()} "
                f"wrote {report.written}"
            )
        print(
            f"sweep: {report.ran} runs in {report.seconds:.1f}s "
            f"({report.runs_per_second:.2f} runs/s) over {report.devices} device(s)"
            f"{processes}, {report.buckets} bucket(s); {report.skipped} already stored",
            file=sys.stderr,
        )
    return 0


def dry_run_report(runs, store_dir=None) -> str:
    """The run count, the buckets (one compiled program each) and a table of the runs.

    The table shows each run's hash and the keys that vary across the runs; a bucket is
    named by those of them it holds fixed. With `store_dir` (`--resume`), stored runs
    are counted and marked.
    """
    from weakspots.sims import store

    stored = store.completed_hashes(store_dir) if store_dir is not None else set()
    rows = [r.row for r in runs]
    keys = [k for k in rows[0] if len({repr(row.get(k)) for row in rows}) > 1] if rows else []
    buckets: dict = {}
    for run in runs:
        buckets.setdefault(run.bucket, []).append(run)
    todo = sum(r.hash not in stored for r in runs)
    head = f"{len(runs)} runs in {len(buckets)} bucket(s) (one compiled program each)"
    if store_dir is not None:
        head += f"; {len(runs) - todo} already stored, {todo} to run"
    lines = [head]
    for number, members in enumerate(buckets.values()):
        fixed = [
            f"{k}={members[0].row[k]}" for k in keys if len({repr(m.row[k]) for m in members}) == 1
        ]
        lines.append(f"  bucket {number}: {len(members)} runs  {' '.join(fixed)}".rstrip())
    headers = ["hash", *keys] + (["stored"] if store_dir is not None else [])
    table = [
        [run.hash, *(_plain(run.row[k]) for k in keys)]
        + (["yes" if run.hash in stored else "no"] if store_dir is not None else [])
        for run in runs
    ]
    return "\n".join([*lines, "", common.table(headers, table, ".6g")])


def _plain(value):
    return str(value) if isinstance(value, bool) else value

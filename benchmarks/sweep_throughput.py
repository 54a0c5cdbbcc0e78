"""Benchmark (not a test): sweep throughput in runs/s against the same runs one by one.

    python benchmarks/sweep_throughput.py [--runs 32] [--steps 100]
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python benchmarks/sweep_throughput.py

"One by one" is what a shell loop over `weakspots train --seed i` would do inside one
process (so process start-up is not even counted): `sims.toy.train.train(config)` per run.
Both are timed after a warm-up that compiles their programs, then again cold-inclusive.
"""

import argparse
import tempfile
import time

import jax

from weakspots.idealized.precision import float64_module
from weakspots.sims import sweep
from weakspots.sims.toy.train import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    fixed = dict(stride=8, chunks=32, dim=16, steps=args.steps, eval_every=25,
                 eval_samples=256, batch=64, lr=1.0)  # fmt: skip
    spec = sweep.parse_spec({"fixed": fixed, "grid": {"seed": list(range(args.runs))}})
    runs = spec.runs()
    mesh = sweep.run_mesh()

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as store_dir:
        sweep.run_sweep(runs, store_dir, mesh=mesh)  # includes compiling
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as store_dir:
        sweep.run_sweep(runs, store_dir, mesh=mesh)
    warm = time.perf_counter() - t0

    train(runs[0].config)  # compile the single-run program
    t0 = time.perf_counter()
    for run in runs:
        train(run.config)
    one_by_one = time.perf_counter() - t0

    n = len(runs)
    print(f"devices {len(jax.devices())}, {n} runs of {args.steps} steps")
    print(f"sweep (incl. compile, store writes): {n / cold:8.2f} runs/s")
    print(f"sweep (compiled, store writes):      {n / warm:8.2f} runs/s")
    print(f"one by one (compiled, no store):     {n / one_by_one:8.2f} runs/s")
    print(f"speed-up (compiled):                 {one_by_one / warm:8.1f}x")


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    main()

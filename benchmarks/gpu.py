"""On a GPU: `weakspots bench --json` and `paper_repro.py --full`, timed, into `benchmarks/runs/gpu/`.

    python -m weakspots.benchmarks.gpu [--out benchmarks/runs/gpu] [--skip-paper]

Run it from the repository root of a machine whose jax sees a GPU (it refuses to run on
a CPU, whose numbers would be filed as a GPU's). It writes `<out>/<device>.json`: the
device, jax's version, the bench's result (ratios, and the absolute rates the bench
reports off the CPU: model-steps per second of the trainer and of the RNG limit, which
on that device is the trainer's ceiling, so `fraction_of_rng_limit` is the fraction of
the GPU's limit reached), and the wall time of the full paper reproduction. It prints
the table `docs/performance.md` expects under "On a GPU".
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def device_description() -> dict:
    """The default device as jax sees it (a subprocess: this process never starts jax)."""
    probe = (
        "import json, jax; d = jax.devices()[0]; s = d.memory_stats() or {}; "
        "print(json.dumps({'backend': jax.default_backend(), 'kind': d.device_kind, "
        "'count': jax.device_count(), 'memory_bytes': s.get('bytes_limit'), "
        "'jax': jax.__version__}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench() -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "weakspots", "bench", "--json", "--quiet"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return json.loads(done.stdout)


def paper_seconds(out: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "paper_repro.py", "--full", "--out", str(out)], check=True, cwd=ROOT
    )
    return time.perf_counter() - start


def table(record: dict) -> str:
    """The markdown rows for docs/performance.md's "On a GPU" section."""
    result, absolute = record["bench"], record["bench"].get("absolute") or {}

    def row(name, value, unit=""):
        text = "-" if value is None else (f"{value:.3g}" if isinstance(value, float) else value)
        return f"| {name} | {text}{unit} |"

    rows = [
        "| quantity | value |",
        "|---|---|",
        row("device", f"{record['device']['kind']} x {record['device']['count']}"),
        row("jax", record["device"]["jax"]),
        row("date", record["date"]),
        row(
            "fraction_of_rng_limit (trainer / RNG limit on this GPU)",
            result["fraction_of_rng_limit"],
        ),
        row("trainer model-steps/s", absolute.get("trainer_model_steps_per_second")),
        row("RNG limit model-steps/s", absolute.get("rng_limit_model_steps_per_second")),
        row("speedup_vs_naive_loop", result["speedup_vs_naive_loop"]),
        row("flow_speedup_vs_scipy", result["flow_speedup_vs_scipy"]),
        row("diffrax solves/s", absolute.get("diffrax_solves_per_second")),
        row("device peak memory", absolute.get("device_peak_memory_mb"), " MB"),
        row("compile_seconds (trainer)", result["compile_seconds"]),
        row("paper_repro.py --full", record.get("paper_seconds"), " s"),
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "runs" / "gpu")
    parser.add_argument("--skip-paper", action="store_true", help="only the bench")
    args = parser.parse_args()
    device = device_description()
    if device["backend"] != "gpu":
        sys.exit(f"benchmarks/gpu.py: jax's default backend is {device['backend']!r}, not a GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "device": device,
        "date": datetime.date.today().isoformat(),
        "bench": bench(),
        "paper_seconds": None if args.skip_paper else paper_seconds(args.out / "paper_full"),
    }
    name = re.sub(r"[^A-Za-z0-9]+", "-", device["kind"]).strip("-").lower()
    path = args.out / f"{name}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {path}\n\n{table(record)}")


if __name__ == "__main__":
    main()

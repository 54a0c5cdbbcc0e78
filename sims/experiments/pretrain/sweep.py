"""The issue-50 sweep: pretrain each design at one size, score it by the lookup, record it.

A design is a set of `PretrainConfig` fields (`PRETRAIN_DESIGNS`); a size the shared ones (`SIZES`).
Every run is the command line's own: `weakspots lm pretrain` then `weakspots lm lookup` under
both paddings, so a recording's commands are what produced its numbers. `python -m
weakspots.sims.experiments.pretrain.sweep --size h200 --results DIR` runs the whole sweep on one machine
within `--budget` seconds: every design in its own process at once (a small model does not
fill an accelerator, and the compiles run in parallel on the host's cores); a first short
round of every design (`PROBE_STEPS`) fails fast and measures each design's rate when all
run together, from which the shared step count is chosen so that every design trains on
the same tokens and all finish in time. `record` turns the results into
`sims/experiments/pretrain/runs/<design>.json` and `paper_lookup.json` (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.sims.experiments.pretrain.commands import argv_of, machine

PRETRAIN_DESIGNS: dict[str, dict] = {
    "full_1kv": dict(attention="full", kv_heads=1),
    "full_8kv": dict(attention="full", kv_heads=8),
    "w8s8_1kv": dict(attention="compressed", window=8, stride=8, kv_heads=1),
    "w8s4_1kv": dict(attention="compressed", window=8, stride=4, kv_heads=1),
    "w4s4_1kv": dict(attention="compressed", window=4, stride=4, kv_heads=1),
    "w8s8_1kv_uniform": dict(
        attention="compressed", window=8, stride=8, kv_heads=1, gate="uniform"
    ),
    "w8s8_1kv_norope": dict(attention="compressed", window=8, stride=8, kv_heads=1, rope_dim=0),
    "w8s8_8kv": dict(attention="compressed", window=8, stride=8, kv_heads=8),
}
"""The paper's designs (PAPER.md §3) this sweep runs; every other field is the size's."""
CONTROLS = {name: "full_8kv" if design["kv_heads"] == 8 else "full_1kv"
            for name, design in PRETRAIN_DESIGNS.items()}  # fmt: skip
"""Each design's full-attention control: the same backbone, KV heads and token budget."""

SIZES: dict[str, dict] = {
    "h200": dict(d_model=256, layers=4, heads=8, head_dim=32, mlp_hidden=768, seq_len=384,
                 batch=32, lr=2e-3, warmup=100, seeds=4, log_every=50, val_batches=4),
    "cpu": dict(d_model=64, layers=2, heads=8, head_dim=8, mlp_hidden=192, seq_len=384,
                batch=8, lr=3e-3, warmup=50, seeds=2, log_every=50, val_batches=1),
    "smoke": dict(d_model=16, layers=1, heads=8, head_dim=4, mlp_hidden=16, seq_len=384,
                  batch=2, lr=3e-3, warmup=2, seeds=2, log_every=2, val_batches=1),
    "cpu2": dict(d_model=128, layers=2, heads=4, head_dim=32, mlp_hidden=384, seq_len=384,
                 batch=2, lr=1e-3, warmup=100, rope_theta=10_000.0, open_words=64, zipf=1.0,
                 schedule="constant", seeds=2, log_every=50, val_batches=4,
                 checkpoint_every=1000, emergence_every=1000),
}  # fmt: skip
SIZES["cpu16"] = dict(SIZES["cpu2"], batch=16, checkpoint_every=250, emergence_every=250)
"""Shared fields per size: `h200` for one H200, `cpu` a reduced fallback, `smoke` a check,
`cpu2` issue 57's first CPU protocol: the one emergence recipe whose copying became
key-specific on this machine (docs/pretraining.md, "The first CPU protocol"); its 384-token
context holds the paper's 372-token lookup. `cpu16`, the CPU protocol, is `cpu2` at 16
sequences a step, where W8/S8 learns to copy (it does not at 2; on repeated tokens it does
at 16 sequences and not at 4 or 8)."""
PROBE_STEPS = {"h200": 100, "cpu": 50, "smoke": 4, "cpu2": 100, "cpu16": 100}  # two blocks
MAX_STEPS = {"h200": 6000, "cpu": 2000, "smoke": 6, "cpu2": 200000, "cpu16": 50000}
PAPER_PROMPTS = 480  # prompts per residue group (`weakspots lm lookup`'s default)
EVAL_BATCH = {"h200": 256, "cpu": 32, "smoke": 32, "cpu2": 64, "cpu16": 64}
PADDINGS = ("prefix", "in-sequence")


def config(design: str, size: str, steps: int) -> PretrainConfig:
    return PretrainConfig(**{**SIZES[size], **PRETRAIN_DESIGNS[design], "steps": steps})


def pretrain_argv(design: str, size: str, steps: int, out: str) -> list[str]:
    """`weakspots lm pretrain` flags for every field that differs from the default."""
    return argv_of(config(design, size, steps), out)


def lookup_argv(out: str, padding: str, size: str, prompts: int = PAPER_PROMPTS) -> list[str]:
    return ["lm", "lookup", "--checkpoint", out, "--padding", padding,
            "--prompts-per-residue", str(prompts), "--batch", str(EVAL_BATCH[size]),
            "--json", "--quiet"]  # fmt: skip


def command(argv: list[str]) -> str:
    return shlex.join(["weakspots", *argv])


def run_cli(argv: list[str]) -> dict:
    """The command line's `--json` output of `argv`, run as the program `weakspots` is (in
    a child process: the command line sits above this module, which does not import it)."""
    done = subprocess.run(
        [sys.executable, "-m", "weakspots", *argv], stdout=subprocess.PIPE, text=True
    )
    if done.returncode:
        raise RuntimeError(f"{command(argv)} exited with {done.returncode}")
    return json.loads(done.stdout)


def run_design(design: str, size: str, steps: int, work: Path, *, prompts: int, lookup: bool):
    """Pretrain one design (and score it), writing `work/<design>.json`."""
    out = str(work / "runs" / design)
    argv = pretrain_argv(design, size, steps, out)
    started = time.perf_counter()
    result = {"design": design, "size": size, "pretrain_command": command(argv)}
    result["pretrain"] = run_cli(argv)
    result["history"] = json.loads((Path(out) / "history.json").read_text())
    result["pretrain_seconds"] = time.perf_counter() - started
    if lookup:
        for padding in PADDINGS:
            largv = lookup_argv(out, padding, size, prompts)
            result[f"{padding}_command"] = command(largv)
            result[padding] = run_cli(largv)
    result["wall_seconds"] = time.perf_counter() - started
    path = work / f"{design}.json"
    path.write_text(json.dumps(result) + "\n")
    return result


def _launch(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    with open(log, "w") as handle:
        return subprocess.Popen(
            [sys.executable, "-m", "weakspots.sims.experiments.pretrain.sweep", *args],
            stdout=handle, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip


def _wait(processes: dict[str, subprocess.Popen], deadline: float) -> dict[str, int | None]:
    """Exit codes (None: killed at the deadline)."""
    codes: dict[str, int | None] = {}
    for name, process in processes.items():
        try:
            codes[name] = process.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            codes[name] = None
    return codes


def sweep(size: str, work: Path, results: Path, budget: float, designs: list[str],
          memory_fraction: float, prompts: int) -> dict:  # fmt: skip
    """Probe every design at once, choose the step count, train and score every design."""
    start = time.time()
    deadline = start + budget
    env = dict(os.environ, XLA_PYTHON_CLIENT_MEM_FRACTION=str(memory_fraction))
    env.setdefault("WEAKSPOTS_JAX_CACHE", str(work / "jax-cache"))
    summary: dict = {"size": size, "designs": designs, "budget": budget}
    probe_dir, main_dir = work / "probe", work / "main"
    probe_dir.mkdir(parents=True, exist_ok=True)
    main_dir.mkdir(parents=True, exist_ok=True)
    probe = {d: _launch(["one", d, "--size", size, "--steps", str(PROBE_STEPS[size]),
                         "--work", str(probe_dir), "--prompts", "24",
                         *([] if d != designs[-1] else ["--lookup"])],
                        probe_dir / f"{d}.log", env) for d in designs}  # fmt: skip
    codes = _wait(probe, start + 0.4 * budget)
    summary["probe_seconds"] = time.time() - start
    summary["probe_codes"] = codes
    if any(code != 0 for code in codes.values()):
        summary["error"] = "probe failed"
        summary["logs"] = {d: _tail(probe_dir / f"{d}.log") for d in designs}
        _write(results / "sweep.json", summary)
        return summary
    rates, compile_seconds = {}, {}
    for d in designs:
        probed = json.loads((probe_dir / f"{d}.json").read_text())
        steps_per_second = probed["history"]["timed_steps"] / probed["history"]["train_seconds"]
        rates[d] = steps_per_second
        compile_seconds[d] = probed["pretrain_seconds"] - probed["history"]["train_seconds"]
    summary["probe_steps_per_second"] = rates
    summary["probe_other_seconds"] = compile_seconds
    left = deadline - time.time()
    # Compiles come from the persistent cache now; the lookup's two paddings cost about
    # `EVAL_SHARE` of what is left; keep a margin.
    train_seconds = left * (1 - EVAL_SHARE) - max(compile_seconds.values()) * 0.5 - MARGIN
    log_every = SIZES[size]["log_every"]
    steps = int(train_seconds / shared_step_seconds(rates)) // log_every * log_every
    steps = max(log_every, min(steps, MAX_STEPS[size]))
    summary["steps"] = steps
    main = {d: _launch(["one", d, "--size", size, "--steps", str(steps), "--work", str(main_dir),
                        "--prompts", str(prompts), "--lookup"], main_dir / f"{d}.log", env)
            for d in designs}  # fmt: skip
    codes = _wait(main, deadline)
    summary["codes"] = codes
    summary["seconds"] = time.time() - start
    summary["runs"] = {}
    for d in designs:
        path = main_dir / f"{d}.json"
        if path.exists():
            summary["runs"][d] = json.loads(path.read_text())
        else:
            summary.setdefault("logs", {})[d] = _tail(main_dir / f"{d}.log")
    _write(results / "sweep.json", summary)
    return summary


EVAL_SHARE = 0.25
MARGIN = 30.0


def shared_step_seconds(rates: dict[str, float]) -> float:
    """Seconds for every design to take one step when all run at once on one device:
    the device runs their steps in turn, so the sum of each design's own step time
    (`1 / rate`, steps per second measured in the probe).

    The minimum rate alone (each process as if it had the device to itself) undercounts:
    the first GPU sweep chose 1350 steps from it and no design finished in time
    (docs/performance.md).
    """
    return sum(1.0 / rate for rate in rates.values())


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text()[-chars:] if path.exists() else ""


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) + "\n")


def record(
    summary: dict, runs_dir: Path, machine_name: str, out_root: str = "runs/pretrain"
) -> dict:
    """Write `<design>.json` per design and `paper_lookup.json` under `runs_dir`, with the
    commands rewritten to `out_root/<design>` (where a rerun puts its checkpoints)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    recorded = {}
    for design, run in summary["runs"].items():
        out = f"{out_root}/{design}"
        argv = pretrain_argv(design, summary["size"], summary["steps"], out)
        entry = {
            "design": design,
            "config": config(design, summary["size"], summary["steps"]).asdict(),
            "machine": machine_name,
            "pretrain_command": command(argv),
            "history": run["history"],
            "pretrain": {
                k: v for k, v in run["pretrain"].items() if k not in ("out", "checkpoints")
            },
        }
        for padding in PADDINGS:
            prompts = run[padding]["prompts_per_residue"]
            entry[f"{padding}_command"] = command(
                lookup_argv(out, padding, summary["size"], prompts)
            )
            entry[padding] = _portable(run[padding])
        _write(runs_dir / f"{design}.json", entry)
        recorded[design] = entry
    best = _largest_gap(recorded)
    if best is not None:
        control = recorded.get(CONTROLS[best])
        if control is not None:
            paper = {
                "design": best,
                "control": CONTROLS[best],
                "machine": machine_name,
                "command": f"{recorded[best]['pretrain_command']} && {recorded[best]['prefix_command']}",
                "control_command": f"{control['pretrain_command']} && {control['prefix_command']}",
                "result": recorded[best]["prefix"],
                "control_result": control["prefix"],
                "in_sequence_result": recorded[best]["in-sequence"],
                "control_in_sequence_result": control["in-sequence"],
            }
            _write(runs_dir / "paper_lookup.json", paper)
    return recorded


def _portable(report: dict) -> dict:
    """A lookup report without this machine's paths."""
    return {k: v for k, v in report.items() if k not in ("checkpoints",)}


def _largest_gap(recorded: dict) -> str | None:
    """The compressed design whose prefix-padding gap is largest among those beyond both
    intervals (else the largest gap)."""
    compressed = [d for d in recorded if PRETRAIN_DESIGNS[d]["attention"] == "compressed"]
    if not compressed:
        return None
    beyond = [d for d in compressed if recorded[d]["prefix"]["gap_beyond_intervals"]]
    return max(beyond or compressed, key=lambda d: recorded[d]["prefix"]["gap"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m weakspots.sims.experiments.pretrain.sweep")
    verbs = parser.add_subparsers(dest="verb", required=True)
    one = verbs.add_parser("one", help="pretrain (and score) one design")
    one.add_argument("design", choices=sorted(PRETRAIN_DESIGNS))
    one.add_argument("--size", choices=sorted(SIZES), default="h200")
    one.add_argument("--steps", type=int, required=True)
    one.add_argument("--work", required=True)
    one.add_argument("--prompts", type=int, default=PAPER_PROMPTS)
    one.add_argument("--lookup", action="store_true")
    every = verbs.add_parser("all", help="the whole sweep within --budget seconds")
    every.add_argument("--size", choices=sorted(SIZES), default="h200")
    every.add_argument("--work", required=True)
    every.add_argument("--results", required=True)
    every.add_argument("--budget", type=float, default=480.0)
    every.add_argument("--designs", default=",".join(PRETRAIN_DESIGNS))
    every.add_argument("--memory-fraction", type=float, default=0.1)
    every.add_argument("--prompts", type=int, default=PAPER_PROMPTS)
    rec = verbs.add_parser("record", help="write the recordings from a sweep.json")
    rec.add_argument("summary")
    rec.add_argument("--runs-dir", default=str(Path(__file__).parent / "runs"))
    rec.add_argument("--machine", required=True)
    args = parser.parse_args(argv)
    if args.verb == "one":
        run_design(args.design, args.size, args.steps, Path(args.work),
                   prompts=args.prompts, lookup=args.lookup)  # fmt: skip
        return 0
    if args.verb == "all":
        designs = args.designs.split(",")
        unknown = sorted(set(designs) - set(PRETRAIN_DESIGNS))
        if unknown:
            parser.error(f"--designs: unknown {', '.join(unknown)}")
        summary = sweep(args.size, Path(args.work), Path(args.results), args.budget, designs,
                        args.memory_fraction, args.prompts)  # fmt: skip
        summary["machine"] = machine()
        _write(Path(args.results) / "sweep.json", summary)
        return 0 if "error" not in summary else 1
    summary = json.loads(Path(args.summary).read_text())
    recorded = record(summary, Path(args.runs_dir), args.machine)
    print(json.dumps({d: r["prefix"]["gap"] for d, r in recorded.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CONTROLS", "PRETRAIN_DESIGNS", "SIZES", "config", "record", "run_design", "sweep"]

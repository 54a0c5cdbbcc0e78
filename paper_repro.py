"""Regenerate every theory figure and the theory-vs-simulation report with one command.

    python paper_repro.py [--quick | --full] [--only NAME ...] [--out DIR] [--jobs N]
                          [--[no-]check]

For each selected figure: `sims.experiments.run_<name>` (simulations; results kept in the
result store under OUT/store, so a rerun reuses them), `predict_<name>` (theory/),
`figures.<name>.make` (saved as PNG and PDF), and its agreement rows. Then REPORT.md and
report.csv in OUT: the agreement table (plus `sims.check.agreement_rows` when that module
exists), each figure with two lines on what it shows, and the run's provenance.
Exit code 1 if any agreement row fails or a figure could not be made.

The SGD runs of all selected figures are trained first, together (one compiled program
per model structure, shared across figures); with `--jobs 2` (the default on 2 CPUs) two
groups of figures that share no runs are made in two processes at once, since tracing
and XLA compilation keep only one core busy.

Runtime on 2 CPU cores, cold (empty store and compilation cache), README's first command
on a fresh clone: 3:40 wall including `pip install -e .` in a fresh virtual environment,
182 s inside the script (366 CPU-s), 72 rows, 0 failing. Per process: the shared SGD
runs 62 s and 65 s; then head_ablation 51 s (the readout quadrature of every ablated
head), support_size 56 s (SGD at 7 points plus the finite-d support flows and escape
chains), pooling_dynamics 34 s, mitigations 22 s, finite_d_accuracy 18 s, learned_gain
13 s, the rest under 8 s each. The version of 2026-11-29 took 365 s; most of the gain
is the trainer compiled without XLA:CPU's MLIR fusion emitters (`idealized.xla`:
training steps 4-5x faster), then the shared training and the two processes. A rerun
that reuses the store and the compilation cache takes 20 s (16 s in the script). With
the changes of 2026-11-30 (two structures at once, figure 3's escape scan) a cold quick
run took 191 s in the script, 72 rows, 0 failing; README's first command on a fresh
clone of the final tree, 4:43 wall (223 s in the script).

--full on 2 CPU cores, cold, on an idle machine (2026-11-30, commit 788d257): 57:10 wall
(3425 s in the script; 5796 CPU-s, 7.1 GB peak memory), 154 rows, 0 failing, exit 0.
First job: its 139 SGD runs 293 s, support_size 206 s, pooling_dynamics 93 s, the rest
under 26 s each (10.5 minutes in all). Second job: its 92 SGD runs 2959 s (4503 CPU-s),
nearly all the real-key operators at 8 seeds x 600 steps (each step draws the B N s d =
8.4 million key numbers of a run): low_rank done at 926 s, max_pool at 1472 s,
deepseek_v4 at 2959 s; then its figures 160 s. Then the rows of `weakspots check` 300 s.
deepseek_v4 started only when low_rank was done (equal cost estimates, fixed since in
`sims.experiments._work`), so for the last 21 minutes one training program ran alone.
The version before training two structures at once per process took 1:02:36 (3751 s)
and found 5 failing rows, each a finding fixed since: figure 4's fit mixed two heads'
common and differential modes (1-4% low), and at s=8 N=16 SGD escapes the metastable
uniform state (P 0.99) below N_c(d=64) = 18.4 (figures 3 and 6). No GPU was lent to
measure it there.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import importlib.util
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import jax  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent
SHARED = "sgd_runs"  # the figures' SGD runs, trained together before the figures
# Structures a process trains at once (threads; train_planned): a real-key training
# program keeps about 1.6 of 2 cores busy, two keep both (max_pool: 1.2-1.3x faster).
TRAIN_THREADS = min(2, os.cpu_count() or 1)
CHECK = "sims.check"  # the rows of `weakspots check`, which run their own simulations
COLUMNS = ("name", "config", "predicted", "ode", "sgd", "rel_error", "tolerance", "pass")


def parse(argv=None) -> argparse.Namespace:
    from weakspots.sims.experiments import FIGURES

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        dest="size",
        action="store_const",
        const="quick",
        help="fewer seeds, samples and configs, same physics (default)",
    )
    size.add_argument(
        "--full",
        dest="size",
        action="store_const",
        const="full",
        help="the sizes a paper would print",
    )
    size.add_argument(
        "--tiny", dest="size", action="store_const", const="tiny", help=argparse.SUPPRESS
    )  # smoke tests only: too small to mean anything
    p.set_defaults(size="quick")
    p.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        choices=FIGURES,
        default=list(FIGURES),
        help=f"figures to make (default all): {', '.join(FIGURES)}",
    )
    p.add_argument("--out", default="figures/out", help="output folder (default figures/out)")
    p.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        metavar="N",
        help="processes making figures at once: 1, or 2 (two groups of figures that share no "
        "SGD runs; default 2 where there are 2 CPUs)",
    )
    p.add_argument("--worker-json", help=argparse.SUPPRESS)  # set by run_jobs for its workers
    p.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="add the rows of `weakspots check` (sims.check), which run their own "
        "simulations (about 4 minutes at quick size); default: on with --full, off with "
        "--quick, whose agreement table comes from the figure runs alone",
    )
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs: must be an integer >= 1, got {args.jobs}")
    return args


def enable_compilation_cache(out: Path) -> None:
    """JAX's persistent compilation cache under OUT, so reruns skip XLA compilation."""
    jax.config.update("jax_compilation_cache_dir", str(out / "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def provenance(size, wall: float, times: dict, cpu: dict, jobs: int = 1) -> dict:
    def git(*args):
        try:
            return subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown"

    import diffrax
    import equinox
    import optax

    versions = {m.__name__: m.__version__ for m in (jax, equinox, optax, diffrax, np, matplotlib)}
    return {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "commit": git("rev-parse", "--short", "HEAD")
        + (" (dirty)" if git("status", "--porcelain") else ""),
        "python": platform.python_version(),
        "versions": versions,
        "device": ", ".join(f"{d.platform}:{d.device_kind}" for d in jax.devices()),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "size": size,
        "jobs": jobs,
        "wall_seconds": wall,
        "figure_seconds": times,
        "cpu_seconds": sum(cpu.values()),
        "figure_cpu_seconds": cpu,
    }


def _fmt(x) -> str:
    if x is None:
        return ""
    if isinstance(x, bool):
        return "PASS" if x else "**FAIL**"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else f"{x:.4g}"
    return str(x)


def write_report(out: Path, rows: list[dict], made: dict, errors: dict, prov: dict) -> None:
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=("figure", *COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    failed = sum(not r["pass"] for r in rows)
    lines = [
        "# Periodic weak spots: theory against simulation",
        "",
        f"`{prov['command']}` — size `{prov['size'].name}`, {len(made)} figure(s), "
        f"{len(rows)} agreement rows, **{failed} failing**, wall time {prov['wall_seconds']:.0f} s.",
        "",
        "## Agreement",
        "",
        "`rel_error` = max over the measurements (ode, sgd) of |measured - predicted| / "
        "|predicted| (the row's stated floor replaces small |predicted|); a row passes when "
        "rel_error <= tolerance. `ode` is the reduced (d = inf) gradient flow, `sgd` the "
        "finite-d trainer (or Monte Carlo, figure 11).",
        "",
        "| figure | " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * (len(COLUMNS) + 1),
    ]
    lines += ["| " + " | ".join(_fmt(r.get(c)) for c in ("figure", *COLUMNS)) + " |" for r in rows]
    lines += ["", "## Figures", ""]
    for i, (name, caption) in enumerate(made.items(), 1):
        lines += [
            f"### {i}. {name}",
            "",
            f"![{name}]({name}.png)",
            "",
            caption[0] + "  ",
            caption[1],
            "",
            f"[PDF]({name}.pdf)",
            "",
        ]
    for name, err in errors.items():
        lines += [f"### {name}: FAILED", "", "```", err, "```", ""]
    lines += ["## Provenance", ""]
    p = prov
    lines += [
        f"* commit: {p['commit']}",
        f"* python {p['python']}; " + ", ".join(f"{k} {v}" for k, v in p["versions"].items()),
        f"* device: {p['device']}; {p['cpus']} CPU(s); load average at the end "
        + ", ".join(f"{x:.1f}" for x in p["load_average"]),
        f"* size preset: `{p['size']}` (seeds are 0..seeds-1 for SGD; fixed numpy seeds for "
        "flow starts; held-out needles from eval_seed 12345)",
        f"* wall time: {p['wall_seconds']:.1f} s with {p['jobs']} process(es) making figures "
        f"at once; per step ({SHARED}: a process's SGD runs, trained together before its "
        "figures; each figure's own time excludes them): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in p["figure_seconds"].items()),
        "* CPU time (all threads of the processes that made figures; far less sensitive to "
        "other load than wall time): "
        f"{p['cpu_seconds']:.1f} s; per step: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in p["figure_cpu_seconds"].items()),
        "",
    ]
    (out / "REPORT.md").write_text("\n".join(lines))


def check_rows(size_name: str) -> list[dict]:
    """Rows of `weakspots check` (sims.check) when that module exists."""
    if importlib.util.find_spec("weakspots.sims.check") is None:
        return []
    check = importlib.import_module("weakspots.sims.check")
    rows = check.agreement_rows(quick=size_name != "full", progress=True)
    return [{"figure": "check", **r} for r in rows]


def main(argv=None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    enable_compilation_cache(out)
    from weakspots.sims import experiments

    size = experiments.SIZES[args.size]
    start = time.perf_counter()
    if args.worker_json:  # one group of a parallel run: figures only, results to the parent
        made = make_figures(args.only, size, out)
        Path(args.worker_json).write_text(json.dumps(made))
        return 0
    groups = job_groups(args.only, args.jobs)
    made = make_figures(args.only, size, out) if len(groups) == 1 else run_jobs(args, groups)
    made = in_figure_order(made)
    rows, captions, errors, times, cpu = (
        made[k] for k in ("rows", "made", "errors", "times", "cpu")
    )
    if args.check if args.check is not None else args.size == "full":
        t0, c0 = time.perf_counter(), time.process_time()
        _log("rows of `weakspots check` (sims.check) ...")
        try:
            rows += check_rows(size.name)
        except Exception:  # reported in REPORT.md and fails the run, figures are kept
            errors[CHECK] = traceback.format_exc()
        times[CHECK], cpu[CHECK] = time.perf_counter() - t0, time.process_time() - c0
        _log(f"{CHECK}: {times[CHECK]:.1f} s ({cpu[CHECK]:.0f} CPU-s)")
    wall = time.perf_counter() - start
    write_report(out, rows, captions, errors, provenance(size, wall, times, cpu, len(groups)))
    failed = [r for r in rows if not r["pass"]]
    print(
        f"[paper_repro] {len(captions)} figures, {len(rows)} rows, {len(failed)} failing, "
        f"{len(errors)} errors, {wall:.0f} s -> {out / 'REPORT.md'}",
        file=sys.stderr,
    )
    return 1 if failed or errors else 0


def _log(message: str) -> None:
    print(f"[paper_repro] {message}", file=sys.stderr, flush=True)


def make_figures(names, size, out: Path) -> dict:
    """Train the figures' SGD runs together, then make each figure: its rows, caption, times."""
    from weakspots.sims import experiments

    store_dir = out / "store"
    rows, made, errors, times, cpu = [], {}, {}, {}, {}
    t0, c0 = time.perf_counter(), time.process_time()
    _log(f"SGD runs of {', '.join(names)}, trained together ...")
    try:
        trained = experiments.train_planned(names, size, store_dir, log=_log, workers=TRAIN_THREADS)
    except Exception:  # e.g. a diverged run: each figure then trains (and reports) its own
        trained = 0
        print(traceback.format_exc(), file=sys.stderr)
    times[SHARED], cpu[SHARED] = time.perf_counter() - t0, time.process_time() - c0
    _log(f"{trained} SGD runs: {times[SHARED]:.1f} s ({cpu[SHARED]:.0f} CPU-s)")
    for name in names:
        t0, c0 = time.perf_counter(), time.process_time()
        _log(f"{name} ...")
        try:
            run, predict, rows_of = experiments.experiment(name)
            results = run(size, store_dir)
            predictions = predict(size, results, store_dir)
            module = importlib.import_module(f"weakspots.figures.{name}")
            fig = module.make(results, predictions)
            for ext in ("png", "pdf"):
                fig.savefig(out / f"{name}.{ext}", bbox_inches="tight")
            plt.close(fig)
            rows += [{"figure": name, **r} for r in rows_of(results, predictions)]
            made[name] = module.CAPTION
        except Exception:  # one broken figure must not hide the others; it fails the run
            errors[name] = traceback.format_exc()
            print(errors[name], file=sys.stderr)
        times[name] = time.perf_counter() - t0
        cpu[name] = time.process_time() - c0
        _log(f"{name}: {times[name]:.1f} s ({cpu[name]:.0f} CPU-s)")
    return {"rows": rows, "made": made, "errors": errors, "times": times, "cpu": cpu}


# Figures whose SGD runs overlap (the canonical structure at several N and s) stay in one
# job, so that no run is trained twice; the two groups cost about the same CPU time at
# --quick (the first ~210 CPU-s, the second ~170).
AFFINITY = (
    ("support_size", "pooling_dynamics", "weak_spots", "phase_diagram", "specialization_time"),
    ("head_ablation", "mitigations", "finite_d_accuracy", "learned_gain", "operators",
     "rope_anchoring", "growth_rate"),
)  # fmt: skip


def job_groups(names, jobs: int) -> list[list[str]]:
    """`names` split into at most `jobs` groups along AFFINITY (one group when jobs is 1)."""
    if jobs <= 1:
        return [list(names)]
    groups = [[n for n in group if n in names] for group in AFFINITY]
    rest = [n for n in names if not any(n in group for group in AFFINITY)]
    groups[-1] += rest
    return [g for g in groups if g] or [list(names)]


def run_jobs(args, groups: list[list[str]]) -> dict:
    """Each group in its own process (`--worker-json`), at once; their results merged.

    Tracing and XLA compilation are single-threaded, so one process leaves the second core
    idle for much of a run; two processes keep both busy. Both share the result store
    (safe for concurrent writers, sims.store) and the compilation cache.
    """
    out = Path(args.out)
    size_flag = f"--{args.size}"
    procs = []
    for i, group in enumerate(groups):
        target = out / f".worker-{i}.json"
        target.unlink(missing_ok=True)
        command = [sys.executable, str(Path(__file__).resolve()), size_flag, "--out", str(out)]
        command += ["--jobs", "1", "--worker-json", str(target), "--only", *group]
        procs.append((group, target, subprocess.Popen(command)))
    merged = {"rows": [], "made": {}, "errors": {}, "times": {}, "cpu": {}}
    for i, (group, target, proc) in enumerate(procs):
        code = proc.wait()
        if code != 0 or not target.exists():
            merged["errors"][f"job {i} ({', '.join(group)})"] = f"worker exited with code {code}"
            continue
        part = json.loads(target.read_text())
        target.unlink()
        merged["rows"] += part["rows"]
        merged["made"].update(part["made"])
        merged["errors"].update(part["errors"])
        merged["times"].update({_job_key(k, i): v for k, v in part["times"].items()})
        merged["cpu"].update({_job_key(k, i): v for k, v in part["cpu"].items()})
    return merged


def in_figure_order(made: dict) -> dict:
    """`make_figures`' output with rows and figures in FIGURES order (the report's order)."""
    from weakspots.sims.experiments import FIGURES

    order = {name: i for i, name in enumerate(FIGURES)}
    made["rows"].sort(key=lambda r: order.get(r["figure"], len(order)))  # stable within a figure
    made["made"] = dict(sorted(made["made"].items(), key=lambda kv: order[kv[0]]))
    return made


def _job_key(key: str, job: int) -> str:
    return f"{key} (job {job})" if key == SHARED else key


if __name__ == "__main__":
    sys.exit(main())

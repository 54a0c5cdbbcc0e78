"""Regenerate every theory figure and the theory-vs-simulation report with one command.

    python paper_repro.py [--quick | --full] [--only NAME ...] [--out DIR] [--jobs N]
                          [--[no-]check]

Each selected experiment of the registry (`sims.experiments.EXPERIMENTS`) is evaluated at
the chosen size, which each experiment looks up in its own `SIZES`
(`sims.experiments.evaluate`: run, predict, rows; results kept in the result store under
OUT/store, so a rerun reuses them) and, if it has a figure (`figures.DRAWINGS`, by the
experiment's name), drawn as PNG and PDF. Then
REPORT.md and report.csv in OUT: the agreement table, its rows counted by kind
(prediction, consistency, fit), the experiments' own tables (also in tables.json), each
figure with its caption, and the run's provenance.
Exit code 1 if any row fails or an experiment could not be made.

The SGD runs of the selected experiments are trained first, together (one compiled
program per model structure); with `--jobs 2` (the default on 2 CPUs) the experiments
are split into two groups along their shared SGD runs (`sims.experiments.job_groups`) and
made in two processes at once, since tracing and XLA compilation keep only one core busy.
Progress: one line per step on stderr, and the run's overall progress with an ETA that
leaves compilation out (`sims.runs.progress.Progress`: a bar on a terminal, lines elsewhere).
"""

from __future__ import annotations

import argparse
import csv
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

from weakspots.idealized.precision import float64  # noqa: E402
from weakspots.sims.runs.progress import Progress  # noqa: E402

ROOT = Path(__file__).resolve().parent
SHARED = "sgd_runs"  # the experiments' SGD runs, trained together before the experiments
# Structures a process trains at once (threads; train_planned): a real-key training
# program keeps about one of 2 cores busy, two keep both.
TRAIN_THREADS = min(2, os.cpu_count() or 1)
COLUMNS = ("experiment", "kind", "name", "config", "predicted", "ode", "sgd", "rel_error",
           "tolerance", "pass", "finding")  # fmt: skip
# The XLA compile of every program, reported by jax (seconds, per process).
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def registry():
    """Every experiment (sims.experiments.EXPERIMENTS)."""
    from weakspots.sims.experiments import EXPERIMENTS

    return EXPERIMENTS


def parse(argv=None) -> argparse.Namespace:
    names = [e.name for e in registry()]
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
        choices=names,
        help=f"experiments to make (default: every one with a figure, and with --check or "
        f"--full the rest): {', '.join(names)}",
    )
    p.add_argument("--out", default="figures/out", help="output folder (default figures/out)")
    p.add_argument(
        "--jobs",
        type=int,
        default=min(2, os.cpu_count() or 1),
        metavar="N",
        help="processes making experiments at once: 1, or more (groups along their shared "
        "SGD runs; default 2 where there are 2 CPUs)",
    )
    p.add_argument("--worker-json", help=argparse.SUPPRESS)  # set by run_jobs for its workers
    p.add_argument("--progress-file", help=argparse.SUPPRESS)  # set by run_jobs for its workers
    p.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="add the experiments without a figure (the rest of `weakspots check`'s table, "
        "which run their own simulations); default: on "
        "with --full, off with --quick",
    )
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"--jobs: must be an integer >= 1, got {args.jobs}")
    return args


def selected(args) -> list:
    """The experiments to make, in registry order."""
    if args.only:
        return [e for e in registry() if e.name in args.only]
    with_tables = args.check if args.check is not None else args.size == "full"
    return [e for e in registry() if e.drawn or with_tables]


def enable_compilation_cache(out: Path) -> None:
    """JAX's persistent compilation cache under OUT, so reruns skip XLA compilation."""
    jax.config.update("jax_compilation_cache_dir", str(out / "jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


class CompileClock:
    """Seconds this process has spent in XLA compilation (jax's monitoring events)."""

    def __init__(self):
        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._heard)

    def _heard(self, event: str, duration_secs: float, **kwargs) -> None:
        if event == COMPILE_EVENT:
            self.seconds += duration_secs


def provenance(size: str, wall: float, times: dict, cpu: dict, jobs: int = 1) -> dict:
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
        "step_seconds": times,
        "cpu_seconds": sum(cpu.values()),
        "step_cpu_seconds": cpu,
    }


def _fmt(x) -> str:
    if x is None:
        return ""
    if isinstance(x, bool):
        return "PASS" if x else "**FAIL**"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else f"{x:.4g}"
    return str(x)


def _cell(row: dict, column: str) -> str:
    """A report cell; a finding's outcome reads held / not held, not PASS / FAIL."""
    if column == "pass" and row.get("finding"):
        return "held" if row["pass"] else "not held"
    if column == "finding":
        return "yes" if row.get("finding") else ""
    return _fmt(row.get(column))


def table_lines(table: dict) -> list[str]:
    """One experiment table (`Table.as_dict()`) as markdown: a title, its note, the table."""
    lines = [f"### {table['title']}", ""]
    if table["note"]:
        lines += [table["note"], ""]
    lines += ["| " + " | ".join(table["columns"]) + " |", "|" + "---|" * len(table["columns"])]
    lines += ["| " + " | ".join(_fmt(cell) for cell in row) + " |" for row in table["rows"]]
    return lines + [""]


def write_report(
    out: Path, rows: list[dict], made: dict, errors: dict, prov: dict, tables: dict | None = None
) -> None:
    """REPORT.md, report.csv and (with tables) tables.json in `out`."""
    tables = tables or {}
    if tables:
        (out / "tables.json").write_text(json.dumps(tables, indent=1))
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    from weakspots.sims.experiments import failing, kind_counts

    failed = sum(failing(r) for r in rows)
    findings = [r for r in rows if r.get("finding")]

    counts = kind_counts(rows)
    predictions, failed_predictions = counts["prediction"]["rows"], counts["prediction"]["failing"]
    lines = [
        "# Periodic weak spots: theory against simulation",
        "",
        f"`{prov['command']}` — size `{prov['size']}`: **{predictions} predictions, "
        f"{failed_predictions} failing**; {len(rows)} agreement rows in all, {failed} failing; "
        f"{len(made)} figure(s); wall time {prov['wall_seconds']:.0f} s.",
        "",
        "## Agreement",
        "",
        "A row's kind says what it can show. `prediction`: derived, it does not integrate or "
        "simulate the system it is compared with. `consistency`: the same system by another "
        "solver, sample or start. `fit`: it uses the run's own learned weights or start.",
        "",
        "| kind | rows | failing |",
        "|---|---|---|",
        *(f"| {k} | {c['rows']} | {c['failing']} |" for k, c in counts.items()),
        "",
        "`rel_error` = max over the measurements (ode, sgd) of |measured - predicted| / "
        "max(|predicted|, the row's floor); a row passes when rel_error <= tolerance (and any "
        "further condition its config states). `ode` is the reduced (d = inf) gradient flow "
        "unless the row says otherwise, `sgd` the finite-d trainer or a Monte Carlo of the "
        "task.",
        "",
        f"{len(findings)} rows are findings (`finding` True): open questions, such as whether "
        "one of the toy's predictions carries over to the decoders, whose answer is reported "
        f"(held: {sum(r['pass'] for r in findings)}, not held: "
        f"{sum(not r['pass'] for r in findings)}) and never counts as failing.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(_cell(r, c) for c in COLUMNS) + " |" for r in rows]
    if tables:
        lines += ["", "## Tables", ""]
        lines += [
            "Experiments' own tables, every number from their runs (also in tables.json).",
            "",
        ]
        for name, found in tables.items():
            for table in found:
                lines += table_lines({**table, "title": f"{table['title']} ({name})"})
    lines += ["", "## Figures", ""]
    for i, (name, caption) in enumerate(made.items(), 1):
        lines += [f"### {i}. {name}", "", f"![{name}]({name}.png)", ""]
        lines += [line + "  " for line in caption[:-1]] + [caption[-1], ""]
        lines += [f"[PDF]({name}.pdf)", ""]
    for name, err in errors.items():
        lines += [f"### {name}: FAILED", "", "```", err, "```", ""]
    lines += ["## Provenance", ""]
    p = prov
    lines += [
        f"* commit: {p['commit']}",
        f"* python {p['python']}; " + ", ".join(f"{k} {v}" for k, v in p["versions"].items()),
        f"* device: {p['device']}; {p['cpus']} CPU(s); load average at the end "
        + ", ".join(f"{x:.1f}" for x in p["load_average"]),
        f"* size: `{p['size']}`, each experiment's own `SIZES[{p['size']!r}]` (seeds are "
        "0..seeds-1 for SGD; fixed numpy seeds for "
        "flow starts; held-out needles from eval_seed 12345)",
        f"* wall time: {p['wall_seconds']:.1f} s with {p['jobs']} process(es) making "
        f"experiments at once; per step ({SHARED}: a process's SGD runs, trained together "
        "before its experiments; each experiment's own time excludes them): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in p["step_seconds"].items()),
        "* CPU time (all threads of the processes that made experiments; far less sensitive "
        "to other load than wall time): "
        f"{p['cpu_seconds']:.1f} s; per step: "
        + ", ".join(f"{k} {v:.1f} s" for k, v in p["step_cpu_seconds"].items()),
        "",
    ]
    (out / "REPORT.md").write_text("\n".join(lines))


class StepRelay:
    """Feeds the events of the processes making experiments into one `sims.runs.progress.Progress`.

    An event is {"message"} (printed) or {"done", "seconds", "compile_seconds"} (a step
    ended: a process's shared SGD training, or an experiment). A step that spent more than
    half its time compiling (`compile_seconds` counts up per process) is a warmup, which
    `Progress` leaves out of the rate behind its ETA.
    """

    def __init__(self, progress):
        self.progress = progress
        self.compiled: dict[int, float] = {}

    def __call__(self, event: dict, job: int = 0) -> None:
        if "message" in event:
            self.progress.write(f"[paper_repro] {event['message']}")
        if event.get("done"):
            before = self.compiled.get(job, 0.0)
            self.compiled[job] = event["compile_seconds"]
            compiling = event["compile_seconds"] - before
            self.progress.update(1, warmup=compiling > 0.5 * event["seconds"])


@float64
def main(argv=None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    enable_compilation_cache(out)
    from weakspots.sims import experiments

    size = args.size
    chosen = selected(args)
    start = time.perf_counter()
    if args.worker_json:  # one group of a parallel run: experiments only, results to the parent
        made = make_experiments(chosen, size, out, to_file(Path(args.progress_file)))
        Path(args.worker_json).write_text(json.dumps(made))
        return 0
    groups = experiments.job_groups(chosen, size, args.jobs)
    with Progress("paper_repro", "steps", total=sum(len(g) + 1 for g in groups)) as progress:
        relay = StepRelay(progress)
        if len(groups) == 1:
            made = make_experiments(chosen, size, out, relay)
        else:
            made = run_jobs(args, groups, relay)
    order = {e.name: i for i, e in enumerate(registry())}
    made["rows"].sort(key=lambda r: order[r["experiment"]])  # stable within an experiment
    made["made"] = dict(sorted(made["made"].items(), key=lambda kv: order[kv[0]]))
    tables = dict(sorted(made["tables"].items(), key=lambda kv: order[kv[0]]))
    rows, captions, errors, times, cpu = (
        made[k] for k in ("rows", "made", "errors", "times", "cpu")
    )
    wall = time.perf_counter() - start
    prov = provenance(size, wall, times, cpu, len(groups))
    write_report(out, rows, captions, errors, prov, tables)
    counts = experiments.kind_counts(rows)
    failed = [r for r in rows if experiments.failing(r)]
    by_kind = ", ".join(f"{c['rows']} {kind}" for kind, c in counts.items())
    print(
        f"[paper_repro] {counts['prediction']['rows']} predictions "
        f"({counts['prediction']['failing']} failing), {len(rows)} rows in all ({by_kind}), "
        f"{len(failed)} failing, {len(captions)} figures, {len(errors)} errors, {wall:.0f} s "
        f"-> {out / 'REPORT.md'}",
        file=sys.stderr,
    )
    return 1 if failed or errors else 0


def to_file(path: Path):
    """A progress callback that appends each event to `path` as a JSON line (for the parent)."""

    def heard(event: dict) -> None:
        with open(path, "a") as f:
            f.write(json.dumps(event) + "\n")

    return heard


def make_experiments(chosen, size: str, out: Path, heard) -> dict:
    """Train the experiments' SGD runs together at size `size`, then evaluate (and draw) each.

    heard(event): told of every step ({"message": ...}, and {"done": 1, "compile_seconds"}
    when a step ends). Returns rows, figures made (name -> caption), errors, times, cpu.
    """
    from weakspots.figures import DRAWINGS
    from weakspots.sims import experiments

    clock = CompileClock()
    store_dir = out / "store"
    rows, made, tables, errors, times, cpu = [], {}, {}, {}, {}, {}

    def step_done(name: str) -> None:
        heard(
            {
                "message": f"{name}: {times[name]:.1f} s ({cpu[name]:.0f} CPU-s)",
                "done": 1,
                "seconds": times[name],
                "compile_seconds": clock.seconds,
            }
        )

    t0, c0 = time.perf_counter(), time.process_time()
    names = ", ".join(e.name for e in chosen)
    heard({"message": f"SGD runs of {names}, trained together ..."})
    try:
        trained = experiments.train_planned(
            chosen, size, store_dir, log=lambda m: heard({"message": m}), workers=TRAIN_THREADS
        )
    except Exception:  # e.g. a diverged run: each experiment then trains (and reports) its own
        trained = 0
        heard({"message": traceback.format_exc()})
    times[SHARED], cpu[SHARED] = time.perf_counter() - t0, time.process_time() - c0
    heard({"message": f"{trained} SGD runs trained"})
    step_done(SHARED)
    for experiment in chosen:
        name = experiment.name
        t0, c0 = time.perf_counter(), time.process_time()
        heard({"message": f"{name} ..."})
        try:
            results, predictions, agreement = experiments.evaluate(experiment, size, store_dir)
            if experiment.drawn:
                drawing = DRAWINGS[name]
                fig = drawing.make(results, predictions)
                for ext in ("png", "pdf"):
                    fig.savefig(out / f"{name}.{ext}", bbox_inches="tight")
                plt.close(fig)
                made[name] = list(drawing.CAPTION)
            rows += [{"experiment": name, **r.as_dict()} for r in agreement]
            if experiment.tables is not None:
                tables[name] = [t.as_dict() for t in experiment.tables(results, predictions)]
        except Exception:  # one broken experiment must not hide the others; it fails the run
            errors[name] = traceback.format_exc()
            heard({"message": errors[name]})
        times[name] = time.perf_counter() - t0
        cpu[name] = time.process_time() - c0
        step_done(name)
    return {
        "rows": rows,
        "made": made,
        "tables": tables,
        "errors": errors,
        "times": times,
        "cpu": cpu,
    }


def run_jobs(args, groups: list[list], relay: StepRelay) -> dict:
    """Each group in its own process (`--worker-json`), at once; their results merged.

    Tracing and XLA compilation are single-threaded, so one process leaves the second core
    idle for much of a run; two processes keep both busy. They share the result store
    (safe for concurrent writers, sims.runs.store) and the compilation cache, and report their
    progress through a file each, which this process reads while it waits.
    """
    out = Path(args.out)
    procs = []
    for i, group in enumerate(groups):
        target, events = out / f".worker-{i}.json", out / f".worker-{i}.progress"
        target.unlink(missing_ok=True)
        events.unlink(missing_ok=True)
        command = [sys.executable, str(Path(__file__).resolve()), f"--{args.size}"]
        command += ["--out", str(out), "--jobs", "1", "--worker-json", str(target)]
        command += ["--progress-file", str(events), "--only", *(e.name for e in group)]
        procs.append((group, target, events, subprocess.Popen(command)))
    read = [0] * len(procs)

    def read_events() -> None:
        for i, (_, _, events, _) in enumerate(procs):
            if events.exists():
                with open(events) as f:
                    f.seek(read[i])
                    while (line := f.readline()).endswith("\n"):
                        relay(json.loads(line), job=i)
                    read[i] = f.tell() - len(line)

    try:
        while any(proc.poll() is None for *_, proc in procs):
            read_events()
            time.sleep(0.5)
        read_events()
    finally:  # an error or Ctrl-C here must not leave the workers running
        for *_, proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
    merged = {"rows": [], "made": {}, "tables": {}, "errors": {}, "times": {}, "cpu": {}}
    for i, (group, target, events, proc) in enumerate(procs):
        events.unlink(missing_ok=True)
        if proc.returncode != 0 or not target.exists():
            names = ", ".join(e.name for e in group)
            merged["errors"][f"job {i} ({names})"] = f"worker exited with code {proc.returncode}"
            continue
        part = json.loads(target.read_text())
        target.unlink()
        merged["rows"] += part["rows"]
        merged["made"].update(part["made"])
        merged["tables"].update(part["tables"])
        merged["errors"].update(part["errors"])
        merged["times"].update({_job_key(k, i): v for k, v in part["times"].items()})
        merged["cpu"].update({_job_key(k, i): v for k, v in part["cpu"].items()})
    return merged


def _job_key(key: str, job: int) -> str:
    return f"{key} (job {job})" if key == SHARED else key


if __name__ == "__main__":
    sys.exit(main())

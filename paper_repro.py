"""Regenerate every theory figure and the theory-vs-simulation report with one command.

    python paper_repro.py [--quick | --full] [--only NAME ...] [--out DIR] [--jobs N]
                          [--[no-]check]

Each selected experiment of the registry (`sims.experiments.EXPERIMENTS`) is evaluated at
the chosen size, which each experiment looks up in its own `SIZES`
(`sims.experiments.evaluate`: run, predict, rows; results kept in the result store under
OUT/store, so a rerun reuses them) and, if it has a figure (`figures.DRAWINGS`, by the
experiment's name), drawn as PNG and PDF. Then
REPORT.md and report.csv in OUT. REPORT.md reads as a results section: a summary (the
rows of each kind, prediction, consistency, fit, held and failed; the findings held and
not held), then each figure under its experiment's name with the title it drew from this
run's data and its caption, then per experiment its agreement rows (configs in report.csv)
and its own tables (also in tables.json), then the run's provenance.
Exit code 1 if any row fails or an experiment could not be made.

The SGD runs of the selected experiments are trained first, together (one compiled
program per model structure); with `--jobs 2` (the default on 2 CPUs) the experiments
are split into two groups along their shared SGD runs (`sims.experiments.job_groups`) and
made in two processes at once, since tracing and XLA compilation keep only one core busy.
Progress: one line per step on stderr, and the run's overall progress with an ETA that
leaves compilation out (`sims.progress.Progress`: a bar on a terminal, lines elsewhere).
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
from weakspots.idealized.xla import release_compiled_programs  # noqa: E402
from weakspots.sims.progress import Progress  # noqa: E402

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


# The agreement rows' columns in REPORT.md: `config` (a row's whole setup, up to hundreds of
# characters) stays in report.csv, and a finding's rel_error and tolerance (no criterion:
# inf) are left blank.
SHOWN = ("kind", "name", "predicted", "ode", "sgd", "rel_error", "tolerance", "outcome")
LONG_CELL = 160  # characters: a longer cell of an experiment's table is cut in REPORT.md


def _cell(row: dict, column: str) -> str:
    """A report cell; a finding's outcome reads held / not held, not PASS / FAIL."""
    if column == "outcome":
        if row.get("finding"):
            return "finding held" if row["pass"] else "finding not held"
        return _fmt(bool(row["pass"]))
    if column in ("rel_error", "tolerance") and row.get("finding"):
        return ""
    return _fmt(row.get(column))


def _short(cell) -> str:
    text = _fmt(cell).replace("|", "/").replace("\n", " ")
    return text if len(text) <= LONG_CELL else text[: LONG_CELL - 1] + "…"


def table_lines(table: dict, level: str = "####") -> list[str]:
    """One experiment table (`Table.as_dict()`) as markdown: a title, its note, the table
    (cells longer than LONG_CELL cut; tables.json has them whole)."""
    lines = [f"{level} {table['title']}", ""]
    if table["note"]:
        lines += [table["note"], ""]
    lines += ["| " + " | ".join(table["columns"]) + " |", "|" + "---|" * len(table["columns"])]
    lines += ["| " + " | ".join(_short(cell) for cell in row) + " |" for row in table["rows"]]
    return lines + [""]


def summary_counts(rows: list[dict]) -> dict[str, dict[str, int]]:
    """Per kind (prediction, consistency, fit) the checked rows that held and failed, and the
    findings (open questions, never failing) held and not held."""
    from weakspots.sims.experiments import KINDS

    checked = [r for r in rows if not r.get("finding")]
    out = {
        kind: {
            "held": sum(r["kind"] == kind and bool(r["pass"]) for r in checked),
            "failed": sum(r["kind"] == kind and not r["pass"] for r in checked),
        }
        for kind in KINDS
    }
    findings = [r for r in rows if r.get("finding")]
    out["finding"] = {
        "held": sum(bool(r["pass"]) for r in findings),
        "not held": sum(not r["pass"] for r in findings),
    }
    return out


def write_report(
    out: Path,
    rows: list[dict],
    made: dict,
    errors: dict,
    prov: dict,
    tables: dict | None = None,
    titles: dict | None = None,
) -> None:
    """REPORT.md, report.csv and (with tables) tables.json in `out`.

    REPORT.md reads as a results section: the summary (rows held and failed per kind,
    findings held and not held), the figures (each under its experiment's name, with the
    title it drew from this run's data, `titles`, and its caption), then per experiment its
    agreement rows and its own tables, then the provenance.
    """
    tables, titles = tables or {}, titles or {}
    if tables:
        (out / "tables.json").write_text(json.dumps(tables, indent=1))
    with open(out / "report.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    counts = summary_counts(rows)
    failed = sum(c.get("failed", 0) for c in counts.values())
    order = [e.name for e in registry()]
    order += sorted({r["experiment"] for r in rows} - set(order))
    lines = [
        "# Periodic weak spots: theory against simulation",
        "",
        f"`{prov['command']}`, size `{prov['size']}`, wall time {prov['wall_seconds']:.0f} s.",
        "",
        "## Summary",
        "",
        f"* **Predictions: {counts['prediction']['held']} held, "
        f"{counts['prediction']['failed']} failed.** A prediction is derived: it does not "
        "integrate or simulate the system it is compared with.",
        f"* Consistency checks (the same system by another solver, sample or start): "
        f"{counts['consistency']['held']} held, {counts['consistency']['failed']} failed.",
        f"* Fits (they use the run's own learned weights or start): {counts['fit']['held']} "
        f"held, {counts['fit']['failed']} failed.",
        f"* Findings (open questions, such as whether a prediction of the toy carries over to "
        f"the decoders; reported, never failing the run): {counts['finding']['held']} held, "
        f"{counts['finding']['not held']} not held.",
        f"* {len(made)} figure(s)"
        + (f"; **{len(errors)} experiment(s) could not be made**" if errors else "")
        + ("; the run **fails**." if failed or errors else "; nothing failed."),
        "",
        "A row holds when rel_error = max over the measurements (ode, sgd) of |measured - "
        "predicted| / max(|predicted|, the row's floor) is at most its tolerance (and any "
        "further condition its config states). `ode` is the reduced (d = inf) gradient flow "
        "unless the row says otherwise, `sgd` the finite-d trainer or a Monte Carlo of the "
        "task. Each row's config: report.csv.",
        "",
    ]
    if made:
        lines += ["## Figures", ""]
        lines += [
            "Each figure is named by its experiment, here, in the README and in docs/; its "
            "title is drawn from this run's data, at this size.",
            "",
        ]
    for name, caption in made.items():
        lines += [f"### {name}", ""]
        if titles.get(name):
            lines += [f"**{titles[name]}** (size `{prov['size']}`)", ""]
        lines += [f"![{name}]({name}.png)", ""]
        lines += [line + "  " for line in caption[:-1]] + [caption[-1], ""]
        lines += [f"[PDF]({name}.pdf)", ""]
    if rows or tables:
        lines += ["## Tables by experiment", ""]
    for name in order:
        mine = [r for r in rows if r["experiment"] == name]
        if not mine and not tables.get(name):
            continue
        lines += [f"### {name}", ""]
        if mine:
            mine_counts = summary_counts(mine)
            said = [
                f"{kind}: {c['held']} held, {c['failed']} failed"
                for kind, c in mine_counts.items()
                if kind != "finding" and c["held"] + c["failed"]
            ]
            if sum(mine_counts["finding"].values()):
                f = mine_counts["finding"]
                said.append(f"findings: {f['held']} held, {f['not held']} not held")
            lines += ["; ".join(said) + ".", ""]
            lines += ["| " + " | ".join(SHOWN) + " |", "|" + "---|" * len(SHOWN)]
            lines += ["| " + " | ".join(_cell(r, c) for c in SHOWN) + " |" for r in mine]
            lines += [""]
        for table in tables.get(name, []):
            lines += table_lines(table)
    if errors:
        lines += ["## Experiments that could not be made", ""]
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
    """Feeds the events of the processes making experiments into one `sims.progress.Progress`.

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
    write_report(out, rows, captions, errors, prov, tables, made["titles"])
    failed = [r for r in rows if experiments.failing(r)]
    counts = summary_counts(rows)  # the same counts as REPORT.md's summary
    checked = ", ".join(
        f"{kind} {c['held']} held / {c['failed']} failed"
        for kind, c in counts.items()
        if kind != "finding"
    )
    findings = counts["finding"]
    print(
        f"[paper_repro] {checked}; findings {findings['held']} held, {findings['not held']} "
        f"not held; {len(rows)} rows, {len(failed)} failing; {len(captions)} figures, "
        f"{len(errors)} errors, {wall:.0f} s -> {out / 'REPORT.md'}",
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
    rows, made, tables, errors, times, cpu, titles = [], {}, {}, {}, {}, {}, {}

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
                titles[name] = fig.get_suptitle() or next(
                    (ax.get_title(loc="left") or ax.get_title() for ax in fig.axes), ""
                )
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
        release_compiled_programs()  # every experiment in one process: room for the next's
        step_done(name)
    return {
        "rows": rows,
        "made": made,
        "titles": titles,
        "tables": tables,
        "errors": errors,
        "times": times,
        "cpu": cpu,
    }


def run_jobs(args, groups: list[list], relay: StepRelay) -> dict:
    """Each group in its own process (`--worker-json`), at once; their results merged.

    Tracing and XLA compilation are single-threaded, so one process leaves the second core
    idle for much of a run; two processes keep both busy. They share the result store
    (safe for concurrent writers, sims.store) and the compilation cache, and report their
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
    merged = {
        "rows": [],
        "made": {},
        "titles": {},
        "tables": {},
        "errors": {},
        "times": {},
        "cpu": {},
    }
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
        merged["titles"].update(part["titles"])
        merged["tables"].update(part["tables"])
        merged["errors"].update(part["errors"])
        merged["times"].update({_job_key(k, i): v for k, v in part["times"].items()})
        merged["cpu"].update({_job_key(k, i): v for k, v in part["cpu"].items()})
    return merged


def _job_key(key: str, job: int) -> str:
    return f"{key} (job {job})" if key == SHARED else key


if __name__ == "__main__":
    sys.exit(main())

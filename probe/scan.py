"""The practitioner's scan: several presses (methods x compression ratios) and the
uncompressed model, on the same draws, one model load, one store.

`press_scan(config, presses)` runs `config` (a `ProbeConfig` without `press`) first without
a press (the control: the same prompts, read uncompressed), then once per SPEC of `presses`,
each a `probe.run.probe` on one `HFBackend` whose press is swapped between runs. The trials
of every run go to `config.store` keyed by the press (its canonical SPEC, its library and
version, `question_aware`), so `resume=True` continues any run that was cut short. Returns
the list of the runs' reports (the dense one first), each with `press` (None for the
control); `press_table` reads the per-method summary off them.
"""

from __future__ import annotations

from weakspots.sims.progress import Progress

from .backends import make_backend
from .design import ProbeConfig
from .run import early_plan, probe


def press_scan(config: ProbeConfig, presses, *, dense: bool = True, progress: bool = False,
               backoff: float = 0.5) -> list[dict]:  # fmt: skip
    """Reports of the control and of each press in `presses` (module docstring)."""
    configs = [config.replace(press=spec) for spec in presses]  # every SPEC checked before the load
    if dense:
        configs.insert(0, config.replace(press=None, question_aware=False))
    early_plan(configs[0])  # a design the context cannot hold is refused before the model loads
    backend = make_backend(configs[0])
    reports = []
    try:
        for i, run in enumerate(configs):
            spec = run.press_spec
            backend.press, backend.question_aware = spec, run.question_aware
            label = f"probe {i + 1}/{len(configs)} {spec.text if spec else 'uncompressed'}"
            bar = Progress(label, "trials", enabled=progress)
            try:
                report = probe(run, client=backend, progress=bar, backoff=backoff)
            finally:
                bar.close()
            reports.append(report)
    finally:
        backend.close()
    return reports


def own_stride(report: dict) -> int:
    """The stride a method is read at: its unit where its SPEC names one (`chunk_length`,
    `block_size`, `period`) and the report holds it, else the report's first stride."""
    import ast

    strides = [int(s) for s in report["by_stride"]]
    spec = report.get("press")
    if spec:
        for node in ast.walk(ast.parse(spec, mode="eval")):
            if isinstance(node, ast.keyword) and node.arg in (
                "chunk_length",
                "block_size",
                "period",
            ):
                value = ast.literal_eval(node.value)
                if value in strides:
                    return int(value)
    return int(report["stride"])


def press_table(reports: list[dict]) -> list[dict]:
    """One row per run: method, its stride, mean accuracy, worst phase, delta_max with its
    interval, permutation p, dominant period (needle phase, from the probe's statistics)."""
    rows = []
    for report in reports:
        stride = own_stride(report)
        stats = report["by_stride"][str(stride)]
        accuracy = [a for a in stats["phase_accuracy"] if a is not None]
        rows.append({
            "method": report.get("press") or "uncompressed",
            "question_aware": bool(report.get("question_aware")),
            "stride": stride,
            "trials": report["trials"],
            "mean": sum(accuracy) / len(accuracy) if accuracy else None,
            "worst_phase": stats["worst_phase"],
            "delta_max": stats["delta_max"],
            "delta_max_ci": stats["delta_max_ci"],
            "p": stats["delta_max_p"],
            "dominant_period": stats["dominant_period"],
            "phase_accuracy": stats["phase_accuracy"],
        })  # fmt: skip
    return rows

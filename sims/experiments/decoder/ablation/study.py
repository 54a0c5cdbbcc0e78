"""The decoder mechanism study: designs measured by every intervention, recorded or retrained.

`STUDY_DESIGNS` names the decoder designs of the mechanism table and of the toy-vs-decoder
comparison, each as the `LMConfig` fields of its `weakspots lm ablate` command. `report`
measures one design as `weakspots lm ablate --json` does (`interventions.ablate_lm`, the
attention margins, the evidence and verdict of `mechanism`, the noise floor of its
`delta_max`, the support size of its pooling weights).

Sizes: `tiny` trains tiny decoders (for tests of the pipeline); `quick` reads the reports
recorded in `sims/experiments/decoder/ablation/runs/ablate_<name>.json` (each holds its config and seeds; the command
is `weakspots lm ablate` with those fields, `--seeds 2 --json`), since training the designs
is the costly part; `full` retrains every design and measures it again
(trained decoders are kept in the `sims.decoder.checkpoint` cache).

Statistics: a report's intervals and noise floor take the seeds as clusters where it holds
each seed's accuracies (`phase_accuracy_per_seed`, written by `interventions.ablate_lm`);
recordings made before it did keep their Wilson intervals of outcomes pooled over seeds,
and their `interval` field says so.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import numpy as np

from weakspots import theory
from weakspots.idealized import metrics
from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import count_params
from weakspots.sims.decoder.checkpoint import trained
from weakspots.sims.decoder.evaluate import phase_summary, report_noise_floor
from weakspots.sims.decoder.interventions import ablate_lm, offset_ensemble
from weakspots.sims.decoder.train import model_flops_per_step, stacked_params
from weakspots.sims.experiments.decoder.ablation import causal_study
from weakspots.sims.progress import Progress

RECORDED = resources.files(__package__) / "runs"  # package data: ships in the wheel
SEEDS = 2
_RUN = dict(seq_len=128, pairs=4, d_model=64, steps=1000, eval_every=250)
STUDY_DESIGNS: dict[str, dict] = {
    "mean_s8": dict(_RUN, stride=8, operator="mean_pool", steps=1500),
    "softmax_s8": dict(_RUN, stride=8, operator="softmax_pool"),
    "dsv4_s8": dict(_RUN, stride=8, operator="deepseek_v4"),
    "mean_s8_k3": dict(_RUN, stride=8, operator="mean_pool", key_len=3),
    "mean_s4": dict(_RUN, stride=4, operator="mean_pool"),
    "mean_s4_p8": dict(_RUN, stride=4, operator="mean_pool", pairs=8, steps=2000, eval_samples=48),
    "mean_s8_p8": dict(_RUN, stride=8, operator="mean_pool", pairs=8, steps=2000, eval_samples=48),
    "mean_s8_T64": dict(_RUN, stride=8, operator="mean_pool", seq_len=64),
    "softmax_s8_wd": dict(_RUN, stride=8, operator="softmax_pool", weight_decay=0.1),
}
"""Design name -> `LMConfig` fields (each trained with seeds 0 and 1)."""
PATCHING_DESIGNS = (
    "mean_s8",
    "softmax_s8",
    "dsv4_s8",
    "mean_s8_k3",
    "mean_s4_p8",
    "mean_s8_p8",
)
"""The designs measured with activation patching (`patch_entries`); the rest with `--no-patch`."""
ENSEMBLES = (2, 4)  # offset-ensemble sizes K of the mitigation study
TINY = dict(
    seq_len=40, pairs=4, key_vocab=16, value_vocab=8, filler_vocab=4, d_model=16, heads=2,
    rope_dim=4, window=4, steps=8, eval_every=4, batch=4, eval_batch=8, eval_samples=1,
)  # fmt: skip


def config(name: str, size: str) -> LMConfig:
    """The `LMConfig` of design `name` at `size` (tiny: the design on a tiny decoder)."""
    fields = STUDY_DESIGNS[name]
    if size == "tiny":
        keep = {k: v for k, v in fields.items() if k in ("stride", "operator", "key_len")}
        fields = {**TINY, **keep, "weight_decay": fields.get("weight_decay", 0.0)}
        context = 24 if name == "mean_s8_T64" else 32  # multiples of every stride here
        fields["seq_len"] = context + TINY["pairs"] * (fields.get("key_len", 1) + 1)
    return LMConfig(**fields)


def report(
    config: LMConfig, params, *, patch: bool = True, progress: Progress | None = None
) -> dict:
    """One design measured as `weakspots lm ablate --json` reports it (module docstring).

    `params`: parameter states stacked over the seeds' runs of `config`.
    """
    out = ablate_lm(config, params, patch=patch, progress=progress)
    out["config"] = config.asdict()
    out["margins"] = causal_study.attention_margins(config, params)
    return with_noise_floor_and_support(with_verdict(config, out))


def with_verdict(config: LMConfig, out: dict) -> dict:
    """`out` with the `evidence` of `sims.experiments.decoder.ablation.causal_study`, its `verdict` and `shown_by` added."""
    found = causal_study.evidence(config, out)
    out.update(
        evidence=found, verdict=causal_study.verdict(found), shown_by=causal_study.shown_by(found)
    )
    return out


def with_noise_floor_and_support(out: dict) -> dict:
    """`out` with the quantities derived from a report's own numbers added: the 95% noise
    floor of its `delta_max` (`evaluate.report_noise_floor`: seeds as clusters where the report
    holds `phase_accuracy_per_seed`, else pooled), `interval` (how its intervals were made) and
    the support size per run and head of the compressed layer's pooling weights
    (`idealized.metrics.support_size`; None without learned weights)."""
    out["delta_max_noise_floor"] = report_noise_floor(
        out["phase_accuracy"], out["samples"], out.get("phase_accuracy_per_seed")
    )
    out.setdefault("interval", "wilson, seeds pooled")
    layer = out["margins"]["layer"] if out["margins"] else None
    weights = out["pooling_weights"][layer] if layer is not None else None
    out["support_size"] = None if weights is None else metrics.support_size(weights).tolist()
    return out


def seeds_of(size: str) -> int:
    """The study's seeds per design at `size` (one for tiny decoders)."""
    return 1 if size == "tiny" else SEEDS


def trained_runs(config: LMConfig, size: str) -> list:
    """`config` over the study's seeds, trained or loaded from the checkpoint cache (no cache
    for tiny decoders)."""
    runs = [config.replace(seed=s) for s in range(seeds_of(size))]
    return trained(runs, directory=size != "tiny")


@functools.cache
def measure(name: str, size: str) -> dict:
    """Design `name` at `size`: trained (or loaded from the checkpoint cache) and measured
    (memoised: experiments that share a design measure it once per process)."""
    base = config(name, size)
    params = stacked_params(trained_runs(base, size))
    out = report(base, params, patch=name in PATCHING_DESIGNS)
    out["seeds"] = list(range(seeds_of(size)))
    return out


def _same_config(recorded: dict, expected: LMConfig) -> bool:
    """Whether a recording's config is `expected` (fields at their defaults may be absent:
    `LMConfig.asdict`)."""
    try:
        return LMConfig(**recorded).asdict() == expected.asdict()
    except (TypeError, ValueError):
        return False


def recorded(name: str) -> dict:
    """The report of design `name` recorded in `sims/experiments/decoder/ablation/runs/ablate_<name>.json`, checked
    against `STUDY_DESIGNS` (a recording of another config is an error, not a silent mismatch)."""
    path = RECORDED / f"ablate_{name}.json"
    out = json.loads(path.read_text())
    design = config(name, "full")
    expected = design.asdict()
    if not _same_config(out["config"], design):
        changed = sorted(k for k in expected if out["config"].get(k) != expected[k])
        raise ValueError(f"{path} records another config (fields {', '.join(changed)})")
    return with_noise_floor_and_support(with_verdict(design, out))  # judged by today's rules


def rerecorded(name: str) -> dict | None:
    """Design `name` measured again with each seed's accuracies kept (seed-cluster intervals),
    as recorded in `sims/experiments/decoder/ablation/runs/ablate_<name>_rerecorded.json` beside its first report
    (whose decoders other recordings share), judged as `recorded` does; None if absent."""
    path = RECORDED / f"ablate_{name}_rerecorded.json"
    if not path.exists():
        return None
    out = json.loads(path.read_text())
    design = config(name, "full")
    if not _same_config(out["config"], design):
        raise ValueError(f"{path} records another config")
    return with_noise_floor_and_support(with_verdict(design, out))


def mitigations(name: str, size: str, ensembles=ENSEMBLES) -> dict:
    """The offset-ensemble mitigation on design `name`'s trained decoders, per ensemble size K
    (`interventions.offset_ensemble`), with the intact per-phase accuracy beside it."""
    base = config(name, size)
    params = stacked_params(trained_runs(base, size))
    intact = measure(name, size) if size == "tiny" else None
    out = {
        "config": base.asdict(),
        "seeds": list(range(seeds_of(size))),
        "ensembles": {str(k): offset_ensemble(base, params, k) for k in ensembles},
    }
    if intact is not None:
        out["phase_accuracy"] = intact["phase_accuracy"]
    return out


def recorded_mitigations(name: str) -> dict:
    """`mitigations(name, "full")` as recorded in `sims/experiments/decoder/ablation/runs/mitigations_<name>.json`."""
    path = RECORDED / f"mitigations_{name}.json"
    out = json.loads(path.read_text())
    if not _same_config(out["config"], config(name, "full")):
        raise ValueError(f"{path} records another config")
    return out


TRAINED_MITIGATIONS: dict[str, tuple[str, dict]] = {
    "mean_s8_stagger": ("mean_s8", dict(stagger=True)),
    "softmax_s8_stagger": ("softmax_s8", dict(stagger=True)),
    "softmax_s8_entropy": ("softmax_s8", dict(phase_entropy=0.1)),
    "softmax_s8_entropy1": ("softmax_s8", dict(phase_entropy=1.0)),
    "dsv4_s8_overlap": ("dsv4_s8", dict(overlap=True)),
}
"""Trained mitigation -> (its base design in `STUDY_DESIGNS`, the `LMConfig` fields it changes)."""


def _phase_accuracy(config: LMConfig, outcomes: np.ndarray) -> dict:
    """Per-phase accuracy of runs' evaluation outcomes `(R, M)` (`LMResult.outcomes`, each run
    on its own sequences): `evaluate.phase_summary`, the protocol of `report`'s
    `phase_accuracy` (far facts; with R > 1 the seeds as clusters), with `delta_max`, its
    interval and its 95% noise floor."""
    found = phase_summary(config, outcomes)
    acc, samples = np.asarray(found["phase_accuracy"]), np.asarray(found["phase_samples"])
    return {
        "phase_accuracy": acc.tolist(),
        "phase_accuracy_ci": found["phase_accuracy_ci"],
        "phase_accuracy_per_seed": found["phase_accuracy_per_seed"],
        "interval": found["interval"],
        "samples": samples.tolist(),
        "mean_accuracy": float((acc * samples).sum() / max(samples.sum(), 1)),
        "delta_max": float(np.ptp(acc)),
        "delta_max_ci": found["delta_max_ci"],
        "delta_max_noise_floor": found["delta_max_noise_floor"],
    }


def _design_runs(config: LMConfig, size: str) -> dict:
    """Trained (or cached) runs of `config` over the study's seeds, measured: phase accuracy
    pooled over the runs (`_phase_accuracy`) and `per_seed` (mean accuracy, `delta_max`, its
    floor), each run's last held-out accuracy, pooling weights, parameters, FLOPs per
    training step, training wall seconds per run."""
    runs = trained_runs(config, size)
    weights = [
        [None if w is None else np.asarray(w).tolist() for w in r.model.pooling_weights()]
        for r in runs
    ]  # (R, layers, H, s), None for layers without weights
    out = _phase_accuracy(config, np.stack([r.outcomes for r in runs]))
    per_seed = [_phase_accuracy(config, r.outcomes[None]) for r in runs]
    out.update(
        per_seed={
            k: [p[k] for p in per_seed]
            for k in ("mean_accuracy", "delta_max", "delta_max_noise_floor")
        },
        final_eval_accuracy=[float(r.history.eval_accuracy[-1]) for r in runs],
        seeds=list(range(seeds_of(size))),
        pooling_weights=weights,
        parameters=count_params(runs[0].params),
        flops_per_step=model_flops_per_step(config),
        wall_seconds=float(np.mean([r.wall_seconds for r in runs])),
        chunking_cost=theory.chunking_cost(
            config.stride, config.heads, overlap=config.overlap, stagger=config.stagger
        ),
    )
    return out


def trained_mitigation(name: str, size: str) -> dict:
    """Mitigation `name` of `TRAINED_MITIGATIONS`: its base design and the mitigated variant,
    each trained over the study's seeds and measured by `_design_runs`."""
    design, changes = TRAINED_MITIGATIONS[name]
    base = config(design, size)
    return {
        "design": design,
        "changes": changes,
        "config": base.replace(**changes).asdict(),
        "base": _design_runs(base, size),
        "mitigated": _design_runs(base.replace(**changes), size),
    }


def recorded_trained_mitigation(name: str) -> dict:
    """`trained_mitigation(name, "full")` as recorded in `sims/experiments/decoder/ablation/runs/mitigations_<name>.json`,
    checked against today's config of it."""
    design, changes = TRAINED_MITIGATIONS[name]
    path = RECORDED / f"mitigations_{name}.json"
    out = json.loads(path.read_text())
    if not _same_config(out["config"], config(design, "full").replace(**changes)):
        raise ValueError(f"{path} records another config")
    return out


def reports(names, size: str) -> dict[str, dict]:
    """Each design's report at `size` (module docstring)."""
    if size == "quick":
        return {n: recorded(n) for n in names}
    return {n: measure(n, size) for n in names}


if (
    __name__ == "__main__"
):  # record the mitigations: python -m weakspots.sims.experiments.decoder.ablation.study NAME ...
    import sys

    for design in sys.argv[1:]:
        if design in TRAINED_MITIGATIONS:  # a trained variant and its base design
            found = trained_mitigation(design, "full")
            (RECORDED / f"mitigations_{design}.json").write_text(json.dumps(found))
            print(design, {k: found[k]["delta_max"] for k in ("base", "mitigated")}, flush=True)
            continue
        found = mitigations(design, "full")
        (RECORDED / f"mitigations_{design}.json").write_text(json.dumps(found))
        print(design, {k: v["accuracy"] for k, v in found["ensembles"].items()})

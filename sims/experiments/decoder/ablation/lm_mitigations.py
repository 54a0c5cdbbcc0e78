"""The toy's four mitigations applied to trained decoders: gap and cost.

Offset ensemble (inference only): each decoder reads every sequence under K chunkings
shifted by `k s // K` tokens and predicts from the mean log-probability
(`sims.decoder.interventions.offset_ensemble`; K forward passes per sequence). The toy's
prediction (`theory.offset_ensemble_accuracy` at finite d: each phase's accuracy is the
mean of the single-chunking accuracies of the phases it is shifted to) is applied to the
decoder's own intact per-phase accuracy, so the rows are fits.

Stagger, overlap and phase entropy change the model or its training, so each is a variant
of a design of `sims.experiments.decoder.ablation.study.STUDY_DESIGNS` trained from scratch with the same seeds
(`study.TRAINED_MITIGATIONS`) and evaluated by the intact designs' protocol. The toy's
predictions: staggering relabels each head's phases, so with heads that do not share
pooling weights the distribution of `delta_max` is unchanged (`theory.mitigations`):
predicted, the base design's `delta_max` (a fit: a measured decoder's number). Overlap
covers a phase when either aliased slot does, so it can only add coverage; the base
DeepSeek-V4 decoders' pooling weights cover every phase (support size s), so predicted:
the base's `delta_max` (fit). Phase entropy above the critical weight restores uniform
pooling, under which no phase differs: predicted `delta_max` 0 (a prediction; the
critical weight `H s lambda` has no decoder counterpart, so two weights are trained).
Every row is a finding (does the toy carry over?), its tolerance the measured 95% noise
floor of `delta_max` (the larger of base and variant for the fits against the base);
cost (parameters, FLOPs per step, training wall seconds, mean accuracy) in each row's
config.
"""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized import metrics
from weakspots.sims.decoder.evaluate import report_noise_floor
from weakspots.sims.experiments.decoder import ENGINE
from weakspots.sims.experiments.decoder.ablation import study
from weakspots.sims.experiments.experiment import Experiment, Row, sizes_by_name

MITIGATED = ("mean_s8", "softmax_s8")
TRAINED = tuple(study.TRAINED_MITIGATIONS)


def run(size: str) -> dict:
    """Per design: the intact per-phase accuracy and the ensembles' (recorded at quick); per
    trained mitigation: its base design and variant measured (`study.trained_mitigation`)."""
    out = {}
    for name in MITIGATED:
        if size == "quick":
            found, intact = study.recorded_mitigations(name), study.recorded(name)
        else:
            found, intact = study.mitigations(name, size), study.measure(name, size)
        out[name] = {
            "config": found["config"],
            "seeds": found["seeds"],
            "phase_accuracy": intact["phase_accuracy"],
            "samples": intact["samples"],
            "ensembles": found["ensembles"],
        }
    trained = {
        name: study.recorded_trained_mitigation(name)
        if size == "quick"
        else study.trained_mitigation(name, size)
        for name in TRAINED
    }
    return {"size": size, "designs": out, "trained": trained}


def predict(size: str, results: dict) -> dict:
    """The toy's ensemble accuracy per phase from each design's intact accuracy."""
    del size
    out = {"trained": {n: toy_prediction(r) for n, r in results.get("trained", {}).items()}}
    for name, r in results["designs"].items():
        dim = r["config"]["d_model"] // r["config"]["heads"]
        out[name] = {
            k: theory.offset_ensemble_accuracy(r["phase_accuracy"], int(k), dim=dim).tolist()
            for k in r["ensembles"]
        }
    return out


def toy_prediction(found: dict) -> dict:
    """The toy's `delta_max` for one trained mitigation (module docstring) and its basis."""
    changes, base = found["changes"], found["base"]
    if changes.get("phase_entropy"):
        return {"delta_max": 0.0, "kind": "prediction", "basis": "uniform pooling: no gap"}
    if changes.get("stagger"):
        basis = "untied heads: stagger relabels phases, gap unchanged"
        return {"delta_max": base["delta_max"], "kind": "fit", "basis": basis}
    weights = [w for run in base["pooling_weights"] for w in run if w is not None]
    stride = np.asarray(weights[0]).shape[-1]
    if all(np.all(metrics.support_size(w) == stride) for w in weights):
        basis = "overlap only adds coverage; base covers every phase: gap unchanged"
        return {"delta_max": base["delta_max"], "kind": "fit", "basis": basis}
    basis = "base leaves phases uncovered; the aliased slot covers them: no gap"
    return {"delta_max": 0.0, "kind": "prediction", "basis": basis}


def _cost(found: dict) -> str:
    base, mitigated = found["base"], found["mitigated"]
    return (
        f"parameters {base['parameters']} -> {mitigated['parameters']}, FLOPs/step "
        f"x{mitigated['flops_per_step'] / base['flops_per_step']:.2f} (pooling x"
        f"{mitigated['chunking_cost']['compress_compute']:.0f}), train "
        f"{base['wall_seconds']:.0f} -> {mitigated['wall_seconds']:.0f} s/run, mean accuracy "
        f"{base['mean_accuracy']:.3f} -> {mitigated['mean_accuracy']:.3f}"
    )


def _per_seed(measured: dict) -> str:
    """Each seed's delta_max and mean accuracy, e.g. `0.082/0.888, 0.048/0.980`."""
    seeds = measured["per_seed"]
    pairs = zip(seeds["delta_max"], seeds["mean_accuracy"], strict=True)
    return ", ".join(f"{d:.3f}/{m:.3f}" for d, m in pairs)


def trained_rows(results: dict, predictions: dict) -> list[Row]:
    """One finding per trained mitigation: its `delta_max` against the toy's."""
    out = []
    for name, found in results.get("trained", {}).items():
        toy = predictions["trained"][name]
        base, mitigated = found["base"], found["mitigated"]
        c = found["config"]
        floor = mitigated["delta_max_noise_floor"]
        if toy["kind"] == "fit":
            floor = max(floor, base["delta_max_noise_floor"])
        change = ", ".join(f"{k}={v}" for k, v in found["changes"].items())
        out.append(
            Row(
                f"{change}: delta_max (toy: {toy['basis']})",
                f"{found['design']}: {c['operator']} s={c['stride']} T={c['seq_len']}, seeds "
                f"{mitigated['seeds']}; delta_max {base['delta_max']:.3f} [floor "
                f"{base['delta_max_noise_floor']:.3f}] -> {mitigated['delta_max']:.3f} [floor "
                f"{mitigated['delta_max_noise_floor']:.3f}] (per seed {_per_seed(base)} -> "
                f"{_per_seed(mitigated)}); {_cost(found)}; tolerance: 95% noise floor",
                kind=toy["kind"],
                finding=True,  # does the toy carry over? an answer, not a check
                predicted=toy["delta_max"],
                sgd=mitigated["delta_max"],
                tolerance=floor,
                floor=1.0,
            )
        )
    return out


def rows(results: dict, predictions: dict) -> list[Row]:
    out = []
    for name, r in results["designs"].items():
        c = r["config"]
        intact = np.asarray(r["phase_accuracy"])
        for k, e in r["ensembles"].items():
            acc = np.asarray(e["accuracy"])
            samples = np.asarray(r["samples"])
            floor = report_noise_floor(acc, samples, e.get("accuracy_per_seed"))
            predicted = np.asarray(predictions[name][k])
            out.append(
                Row(
                    f"offset ensemble K={k}: delta_max (toy: mean over shifted phases)",
                    f"{name}: {c['operator']} s={c['stride']} T={c['seq_len']}, seeds "
                    f"{r['seeds']}; intact delta_max {np.ptp(intact):.3f}, mean "
                    f"{intact.mean():.3f} -> {acc.mean():.3f} at {e['cost']}x the forward "
                    "passes; tolerance: 95% noise floor",
                    kind="fit",  # the toy's formula applied to the decoder's own accuracy
                    finding=True,  # does the toy carry over? an answer, not a check
                    predicted=float(np.ptp(predicted)),
                    sgd=float(np.ptp(acc)),
                    tolerance=floor,
                    floor=1.0,
                )
            )
    return out + trained_rows(results, predictions)


EXPERIMENT = Experiment(
    "lm_mitigations",
    run,
    predict,
    rows,
    sizes=sizes_by_name(),
    version=3,
    drawn=True,
    study=__package__,
    engine=ENGINE,
)

"""The toy's offset-ensemble mitigation applied to trained decoders: gap and cost.

Each decoder reads every sequence under K chunkings shifted by `k s // K` tokens and
predicts from the mean log-probability (`sims.lm.interventions.offset_ensemble`; K forward
passes per sequence). The toy's prediction (`theory.offset_ensemble_accuracy` at finite d:
each phase's accuracy is the mean of the single-chunking accuracies of the phases it is
shifted to) is applied to the decoder's own intact per-phase accuracy, so the rows are
fits; measured: the ensemble's `delta_max`, within its 95% noise floor. The other toy
mitigations (stagger, overlap, phase entropy) change the model or its training and are
not measured here.
"""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.sims.experiments.experiment import Budget, Experiment, Row, drawn_in_figures
from weakspots.sims.lm import study
from weakspots.sims.lm.evaluate import delta_max_noise_floor

MITIGATED = ("mean_s8", "softmax_s8")


def run(budget: Budget) -> dict:
    """Per design: the intact per-phase accuracy and the ensembles' (recorded at quick)."""
    out = {}
    for name in MITIGATED:
        if budget.name == "quick":
            found, intact = study.recorded_mitigations(name), study.recorded(name)
        else:
            found, intact = study.mitigations(name, budget.name), study.measure(name, budget.name)
        out[name] = {
            "config": found["config"],
            "seeds": found["seeds"],
            "phase_accuracy": intact["phase_accuracy"],
            "samples": intact["samples"],
            "ensembles": found["ensembles"],
        }
    return {"size": budget.name, "designs": out}


def predict(budget: Budget, results: dict) -> dict:
    """The toy's ensemble accuracy per phase from each design's intact accuracy."""
    del budget
    out = {}
    for name, r in results["designs"].items():
        dim = r["config"]["d_model"] // r["config"]["heads"]
        out[name] = {
            k: theory.offset_ensemble_accuracy(r["phase_accuracy"], int(k), dim=dim).tolist()
            for k in r["ensembles"]
        }
    return out


def rows(results: dict, predictions: dict) -> list[Row]:
    out = []
    for name, r in results["designs"].items():
        c = r["config"]
        intact = np.asarray(r["phase_accuracy"])
        for k, e in r["ensembles"].items():
            acc = np.asarray(e["accuracy"])
            samples = np.asarray(r["samples"])
            floor = delta_max_noise_floor(float((acc * samples).sum() / samples.sum()), samples)
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
    return out


EXPERIMENT = Experiment("lm_mitigations", run, predict, rows, version=1, figure=drawn_in_figures)

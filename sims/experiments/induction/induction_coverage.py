"""How many positions m heads cover from a small start (PAPER.md §5, "why coverage fails"):
the linearised selection's occupancy law against the flow and SGD over many seeds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.induction import InductionFlowConfig
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.induction.shared import (
    FLOW,
    NOISY,
    PHYSICS,
    QUIET,
    SEEDS,
    flows,
    sgd,
    wilson,
)
from weakspots.sims.induction.flow import starts


@dataclass(frozen=True)
class Size:
    seeds: int  # flows and SGD runs per (S, m)
    shapes: tuple[tuple[int, int], ...]  # further (S, m) with flows, beside the canonical


SIZES = {
    "tiny": Size(SEEDS["tiny"], ()),
    "quick": Size(SEEDS["quick"], ()),
    "full": Size(SEEDS["full"], ((4, 2), (5, 3), (6, 2))),
}


def _flow_config(s: int, m: int) -> InductionFlowConfig:
    return FLOW.replace(stride=s, heads=m)


def _outcome(history) -> dict:
    positions = np.asarray([history.summary(i)["positions"] for i in range(len(history.seeds))])
    s = history.config.stride
    distinct = [len(set(p.tolist())) for p in positions]
    return {
        "positions": positions.tolist(),
        "distinct": distinct,
        "uncovered": [s - 1 - d for d in distinct],
        "nonfinal": bool((positions <= s - 2).all()),
    }


def run(size: Size) -> dict:
    """Flows (static gates, rho = 0.01) and SGD (quiet and noisy) from `seeds` starts."""
    out = {"flow": {}, "sgd": {}, "sgd_noisy": {}}
    for s, m in ((FLOW.stride, FLOW.heads), *size.shapes):
        out["flow"][f"{s},{m}"] = _outcome(flows(_flow_config(s, m), size.seeds))
    shape = f"{QUIET.stride},{QUIET.heads}"
    out["sgd"][shape] = _outcome(sgd(QUIET, size.seeds))
    out["sgd_noisy"][shape] = _outcome(sgd(NOISY, size.seeds))
    out["seeds"] = size.seeds
    return out


def predict(size: Size, results: dict) -> dict:
    """theory.induction_coverage_distribution and _expected_uncovered per (S, m); the
    linearised selection (theory.induction_selected_positions) of each flow's own start."""
    del results
    out = {"distribution": {}, "uncovered": {}, "selected": {}}
    shapes = ((FLOW.stride, FLOW.heads), *size.shapes)
    for s, m in shapes:
        out["distribution"][f"{s},{m}"] = theory.induction_coverage_distribution(m, s).tolist()
        out["uncovered"][f"{s},{m}"] = theory.induction_expected_uncovered(m, s)
    for s, m in shapes:
        logits = np.asarray(starts(_flow_config(s, m), range(size.seeds)).logits)
        out["selected"][f"{s},{m}"] = theory.induction_selected_positions(
            logits[:, :, 0], logits[:, :, 1]
        ).tolist()
    return out


def _where(shape: str, kind: str, seeds: int) -> str:
    s, m = shape.split(",")
    p = PHYSICS
    c = {"flow": FLOW, "sgd": QUIET, "sgd_noisy": NOISY}[kind]
    hyper = (
        f"flow to t={c.t1:g}, rho={c.init_scale:g}"
        if kind == "flow"
        else f"SGD rho={c.init_scale:g} lr={c.lr:g} batch={c.batch} steps={c.steps}"
    )
    return (
        f"S={s} m={m} L={p['chunks']} N={p['vocab']} gamma={p['gamma']:g} beta={p['beta']:g}, "
        f"static gates, {hyper}, {seeds} seeds"
    )


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per (S, m) and k, P(k distinct positions) of the flow and of quiet SGD inside the
    measured frequency's 99.9% Wilson interval; the mean number of uncovered positions
    within 3.3 standard errors; noisy SGD's P(m distinct) as a finding; the linearised
    selection against each flow's own start (fit)."""
    out = []
    n = results["seeds"]
    for kind in ("flow", "sgd", "sgd_noisy"):
        for shape, measured in results[kind].items():
            s, m = (int(v) for v in shape.split(","))
            law = predictions["distribution"][shape]
            counts = np.bincount(measured["distinct"], minlength=m + 1)
            where = _where(shape, kind, n)
            ks = [m] if kind == "sgd_noisy" else range(1, min(m, s - 1) + 1)
            for k in ks:
                lo, hi = wilson(int(counts[k]), n)
                out.append(Row(
                    f"induction: P({k} distinct positions of {m} heads)",
                    where + (" (shared minibatch noise)" if kind == "sgd_noisy" else ""),
                    kind="prediction", predicted=law[k],
                    **{"ode" if kind == "flow" else "sgd": counts[k] / n},
                    tolerance=max(hi - counts[k] / n, counts[k] / n - lo), floor=1.0,
                    holds=lo <= law[k] <= hi and measured["nonfinal"],
                    finding=kind == "sgd_noisy",
                ))
            if kind == "sgd_noisy":
                continue
            uncovered = np.asarray(measured["uncovered"], float)
            se = max(uncovered.std(ddof=1), 1.0 / n) / np.sqrt(n)
            out.append(Row(
                "induction: expected uncovered positions", where, kind="prediction",
                predicted=predictions["uncovered"][shape],
                **{"ode" if kind == "flow" else "sgd": uncovered.mean()},
                tolerance=3.3 * se, floor=1.0,
            ))
    for shape, selected in predictions["selected"].items():
        flow = np.asarray(results["flow"][shape]["positions"])
        match = float(np.mean(np.asarray(selected) == flow))
        out.append(Row(
            "induction: heads select argmax_r thetaK(r) + thetaV(r+1) of their start",
            _where(shape, "flow", n) + " (fraction of heads; near-tied starts may flip)",
            kind="fit", predicted=1.0, ode=match, tolerance=0.1, floor=1.0, finding=True,
        ))
    return out


def configs(size: Size) -> tuple:
    """No toy SGD runs (the induction runs are this experiment's own)."""
    del size
    return ()


EXPERIMENT = Experiment(
    "induction_coverage", run, predict, rows, sizes=SIZES, configs=configs, drawn=True
)

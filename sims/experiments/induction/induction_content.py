"""Gates that follow content (issue 59, part B; `idealized.induction_content`): the static
and the content-driven regime, the condition that separates them, and what each does to
phase sensitivity.

Derived (theory.induction_content, docs/induction.md §7): between the two one-hot rules
the loss is lower for content exactly when the reliability q exceeds the prior lambda,
and at the rules' ends the content regime's gates sit at (exp(H(mu)), 1) in the
concentration plane, the static regime's at (1, 1); per-phase accuracy is 1 at the
favourite and 0 elsewhere (static) or q + (1 - q)/(S - 1) at every position (content).
Measured: the model's exact loss at both rules (where they cross), and gradient flows from
a small start on a (lambda, q) grid (which regime each ends in, its offsets, its accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from weakspots.idealized.induction_content import ContentConfig
from weakspots.sims.experiments.experiment import Experiment, Row, Table
from weakspots.sims.experiments.induction.shared import content_flows
from weakspots.sims.induction.content import rule_loss, train_many
from weakspots.theory import induction_content as content_theory

BASE = ContentConfig(stride=4, heads=2, chunks=8, vocab=4096, gamma=6.0, beta=2.0, favourite=1,
                     init_scale=0.01, t1=4000.0, saves=21)  # fmt: skip
OFFSET_END = 0.07  # |offsets - limit| of a gate at 0.99: exp(H) of (0.99, 0.01/3 x 3) is 1.069
SGD = dict(lr=2.0, batch=64, steps=2000)  # time lr x steps = the flows' t1
LOSS_TOL = 1e-9  # brentq's xtol on q, and the float64 rounding of two losses of order 10


@dataclass(frozen=True)
class Size:
    priors: tuple[float, ...]
    reliabilities: tuple[float, ...]


SIZES = {
    "tiny": Size((0.2,), (0.3, 1.0)),
    "quick": Size((0.1, 0.3), (0.2, 0.4, 0.6, 0.8, 1.0)),
    "full": Size((0.05, 0.1, 0.2, 0.3, 0.4, 0.6), tuple(np.round(np.linspace(0.1, 1.0, 10), 2))),
}


def grid(size: Size) -> tuple[ContentConfig, ...]:
    return tuple(
        BASE.replace(prior=p, reliability=q) for p in size.priors for q in size.reliabilities
    )


def _crossing(prior: float) -> float:
    """The reliability at which the model's exact losses of the two rules cross."""
    config = BASE.replace(prior=prior)

    def gap(q):
        c = config.replace(reliability=q)
        return rule_loss(c, "static") - rule_loss(c, "content")

    return float(brentq(gap, 1e-3, 1.0, xtol=LOSS_TOL))


def run(size: Size) -> dict:
    """The flows of the grid, and the crossing of the two rules' exact losses per prior."""
    configs = grid(size)
    flows = content_flows(configs)
    runs = []
    for i, c in enumerate(configs):
        runs.append(
            {
                "prior": c.prior,
                "reliability": c.reliability,
                "regime": flows.regime(i),
                "rules": list(flows.rules[i]),
                "phase_accuracy": flows.phase_accuracy[i].tolist(),
                "offsets": flows.offsets[i].tolist(),  # (T, H, 2 branches, 2 measures)
                "loss": float(flows.loss[i, -1]),
            }
        )
    corners = (0, len(configs) - 1)  # SGD at the grid's corners: least and most reliable
    trained = train_many([configs[i] for i in corners], **SGD)
    sgd = []
    for k, i in enumerate(corners):
        rules = set(trained["rules"][k])
        sgd.append({
            "run": i,
            "regime": rules.pop() if len(rules) == 1 else "mixed",
            "phase_accuracy": trained["phase_accuracy"][k].tolist(),
        })  # fmt: skip
    return {
        "runs": runs,
        "sgd": sgd,
        "times": flows.times.tolist(),
        "crossings": {str(p): _crossing(p) for p in size.priors},
        "wall_seconds": flows.wall_seconds,
    }


def predict(size: Size, results: dict) -> dict:
    """The derived boundary q* = lambda, the optimum's regime at each grid point, and at the
    one-hot limit of each regime the end offsets and the per-phase accuracy."""
    del results
    b = BASE
    out = {
        "boundary": {str(p): content_theory.boundary_reliability(p) for p in size.priors},
        "runs": [],
    }
    for c in grid(size):
        per = {
            "optimum": "content"
            if content_theory.content_wins(c.prior, c.reliability)
            else "static"
        }
        for regime in ("static", "content"):
            per[regime] = {
                "offsets": content_theory.regime_offsets(
                    b.stride, c.prior, c.reliability, b.favourite, regime
                ),
                "phase_accuracy": content_theory.regime_phase_accuracy(
                    b.stride, b.heads, b.chunks, b.gamma, b.beta, c.reliability, b.favourite, regime
                ).tolist(),
            }
        out["runs"].append(per)
    return out


def _where(results) -> str:
    b = BASE
    priors = sorted({r["prior"] for r in results["runs"]})
    qs = sorted({r["reliability"] for r in results["runs"]})
    return (
        f"S={b.stride} m={b.heads} L={b.chunks} N={b.vocab} gamma={b.gamma:g} beta={b.beta:g} "
        f"favourite={b.favourite}, flows from rho={b.init_scale:g} to t={b.t1:g}; "
        f"lambda in {priors}, q in {qs}"
    )


def rows(results: dict, predictions: dict) -> list[Row]:
    """The crossing of the rules' exact losses against q* = lambda (prediction); each flow's
    end offsets and per-phase accuracy against the closed form of the regime it ended in
    (fit: the regime is the run's own); whether the flow ends in the optimum's regime
    (finding)."""
    where = _where(results)
    runs, preds = results["runs"], predictions["runs"]
    crossing_error = max(
        abs(results["crossings"][p] - predictions["boundary"][p]) for p in predictions["boundary"]
    )
    ended = [
        (r, p) for r, p in zip(runs, preds, strict=True) if r["regime"] in ("static", "content")
    ]
    offset_error = max(
        float(np.max(np.abs(np.asarray(r["offsets"])[-1] - np.asarray(p[r["regime"]]["offsets"]))))
        for r, p in ended
    )
    accuracy_error = max(
        float(
            np.max(
                np.abs(
                    np.asarray(r["phase_accuracy"]) - np.asarray(p[r["regime"]]["phase_accuracy"])
                )
            )
        )
        for r, p in ended
    )
    agree = np.mean([r["regime"] == p["optimum"] for r, p in zip(runs, preds, strict=True)])
    regimes = {r["regime"] for r in runs}
    return [
        Row(
            "induction content gates: the rules' exact losses cross at q* = lambda (max |q - q*|)",
            where.split(";")[0] + f"; lambda in {sorted(predictions['boundary'])}",
            kind="prediction",
            predicted=0.0,
            ode=crossing_error,
            tolerance=1e-6,
            floor=1.0,
        ),
        Row(
            "induction content gates: end offsets (static, per-window) = the regime's limit (max |diff|)",
            where
            + f"; {len(ended)} of {len(runs)} runs one-hot in one regime; tolerance: a gate at 0.99",
            kind="fit",
            predicted=0.0,
            ode=offset_error,
            tolerance=OFFSET_END,
            floor=1.0,
            holds=len(ended) == len(runs),
        ),
        Row(
            "induction content gates: per-phase accuracy = the regime's closed form (max |diff|)",
            where + f"; regimes reached: {sorted(regimes)}",
            kind="fit",
            predicted=0.0,
            ode=accuracy_error,
            tolerance=1e-6,
            floor=1.0,
            holds={"static", "content"} <= regimes,
        ),
        Row(
            "induction content gates: SGD ends in the flow's regime, at its closed-form accuracy",
            where + f"; SGD lr={SGD['lr']:g} batch={SGD['batch']} steps={SGD['steps']} at the "
            f"grid's corners; error: max |accuracy - closed form|, 1 if a regime differs",
            kind="fit",
            predicted=0.0,
            sgd=_sgd_error(results, predictions),
            tolerance=1e-6,
            floor=1.0,
        ),
        Row(
            "induction content gates: the flow ends in the optimum's regime (fraction of runs)",
            where,
            kind="prediction",
            predicted=1.0,
            ode=float(agree),
            tolerance=0.0,
            floor=1.0,
            finding=True,
        ),
    ]


def _sgd_error(results: dict, predictions: dict) -> float:
    worst = 0.0
    for r in results["sgd"]:
        flow = results["runs"][r["run"]]["regime"]
        if r["regime"] != flow or flow == "mixed":
            return 1.0
        closed = np.asarray(predictions["runs"][r["run"]][flow]["phase_accuracy"])
        worst = max(worst, float(np.max(np.abs(np.asarray(r["phase_accuracy"]) - closed))))
    return worst


def tables(results: dict, predictions: dict) -> list[Table]:
    """Per prior: the largest q whose flow ended static, the smallest whose flow ended
    content-driven, and the optimum's boundary q* = lambda."""
    body = []
    for p in sorted({r["prior"] for r in results["runs"]}):
        these = [r for r in results["runs"] if r["prior"] == p]
        static = [r["reliability"] for r in these if r["regime"] == "static"]
        driven = [r["reliability"] for r in these if r["regime"] == "content"]
        body.append(
            (
                p,
                max(static) if static else None,
                min(driven) if driven else None,
                predictions["boundary"][str(p)],
                results["crossings"][str(p)],
            )
        )
    return [
        Table(
            "Content gates: where the flow switches regime against where the optimum does",
            (
                "prior lambda",
                "largest q, flow static",
                "smallest q, flow content",
                "q* = lambda (derived)",
                "rules' losses cross (measured)",
            ),
            body,
            _where(results),
        )
    ]


EXPERIMENT = Experiment(
    "induction_content", run, predict, rows, sizes=SIZES, drawn=True, tables=tables, version=2
)  # 2: results hold SGD at the grid's corners

"""Theorem 1 and the cost of a collision (PAPER.md §5): distinct positions win by O(1/N).

The model's exact population loss (idealized.induction, the per-query softmax over all N
tokens) at one-hot assignments against the closed form (theory.induction_*), N x the
collision cost against its derived 1/N expansion, and free minimisation of the model's
loss from random starts (Theorem 1: every end one-hot at (r, r + 1); the least, distinct).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

from weakspots import theory
from weakspots.idealized import induction
from weakspots.sims.experiments.experiment import Experiment, Row, Table
from weakspots.sims.induction.summary import end_state

# (S, m, L, gamma, beta): the config, and one the code was not developed on
MODELS = ((4, 2, 8, 6.0, 2.0), (5, 3, 6, 5.0, 1.5))
THEOREM_VOCAB = 4096
ROUNDING = 32 * float(np.finfo(np.float64).eps)  # of each loss, scaled by N in N x cost


@dataclass(frozen=True)
class Size:
    starts: int  # free minimisations per model (Theorem 1)
    vocabs: tuple[int, ...]  # N at which the collision cost is measured


SIZES = {
    "tiny": Size(2, (1024, 65536)),
    "quick": Size(12, (256, 1024, 4096, 16384, 65536, 2**20)),
    "full": Size(64, (256, 1024, 4096, 16384, 65536, 2**18, 2**20, 2**22)),
}


def _one_hot(positions, stride):
    logits = np.full((len(positions), 2, stride), -np.inf)
    for h, r in enumerate(positions):
        logits[h, 0, r] = logits[h, 1, r + 1] = 0.0
    return induction.StaticGates(jnp.asarray(logits))


def _config(model, vocab) -> induction.InductionConfig:
    s, m, big_l, gamma, beta = model
    return induction.InductionConfig(stride=s, heads=m, chunks=big_l, vocab=vocab, gamma=gamma, beta=beta)


def run(size: Size) -> dict:
    """Per model: the model's loss at the distinct and the collided assignment at each N,
    and L-BFGS on the model's loss (static logits) from `starts` N(0, 1) starts."""
    out = []
    for model in MODELS:
        s, m, big_l = model[:3]
        loss = jax.jit(lambda g, sc, big_l=big_l: induction.population_loss(g, big_l, sc))
        distinct = _one_hot(theory.induction_distinct_assignment(m, s), s)
        collided = _one_hot(theory.induction_collided_assignment(m, s), s)
        per_n = []
        for n in size.vocabs:
            sc = induction.scales(_config(model, n))
            per_n.append({"vocab": n, "distinct": float(loss(distinct, sc)), "collided": float(loss(collided, sc))})
        ends = _minimise(model, loss, size.starts)
        out.append({"model": list(model), "losses": per_n, "ends": ends})
    return {"models": out}


def _minimise(model, loss, count: int) -> list[dict]:
    """L-BFGS on the model's loss from `count` N(0, 1) starts of the static logits."""
    s, m = model[:2]
    sc = induction.scales(_config(model, THEOREM_VOCAB))
    value_and_grad = jax.jit(
        jax.value_and_grad(lambda y: loss(induction.StaticGates(y.reshape(m, 2, s)), sc))
    )

    def objective(y):
        return tuple(np.asarray(v, float) for v in value_and_grad(jnp.asarray(y)))

    rng = np.random.default_rng(0)
    ends = []
    for _ in range(count):
        fit = minimize(
            objective,
            rng.normal(0.0, 1.0, m * 2 * s),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": 5000, "gtol": 1e-12, "ftol": 1e-15},
        )
        w = np.asarray(jax.nn.softmax(jnp.asarray(fit.x).reshape(m, 2, s), axis=-1))
        ends.append({"loss": float(fit.fun), **end_state(w[:, 0], w[:, 1])})
    return ends


def predict(size: Size, results: dict) -> dict:
    """Closed forms: the losses, the coefficient and the 1/N^2 term of N x the collision
    cost with a bound on the rest, the optimum, and each end's assignment loss."""
    out = []
    for model, measured in zip(MODELS, results["models"], strict=True):
        s, m, big_l, gamma, beta = model
        fc = theory.induction_normaliser_excess(theory.induction_collided_assignment(m, s), s, big_l, gamma, beta)
        fd = theory.induction_normaliser_excess(theory.induction_distinct_assignment(m, s), s, big_l, gamma, beta)
        per_n = []
        for n in size.vocabs:
            tail = np.mean(np.abs(fc) ** 3 + np.abs(fd) ** 3) / (3 * n**2) / (1 - max(fc.max(), fd.max()) / n)
            per_n.append({
                "vocab": n,
                "distinct": theory.induction_assignment_loss(theory.induction_distinct_assignment(m, s), s, big_l, n, gamma, beta),
                "collided": theory.induction_assignment_loss(theory.induction_collided_assignment(m, s), s, big_l, n, gamma, beta),
                "two_terms": theory.induction_collision_coefficient(m, s, big_l, gamma, beta)
                + theory.induction_collision_second_order(m, s, big_l, gamma, beta) / n,
                "tail_bound": tail,
            })
        best, optima = theory.induction_optimal_assignments(m, s, big_l, THEOREM_VOCAB, gamma, beta)
        out.append({
            "coefficient": theory.induction_collision_coefficient(m, s, big_l, gamma, beta),
            "losses": per_n,
            "optimal_loss": best,
            "optima_distinct": all(len(set(a)) == len(a) for a in optima),
            "end_losses": [
                theory.induction_assignment_loss(e["positions"], s, big_l, THEOREM_VOCAB, gamma, beta)
                for e in measured["ends"]
            ],
        })
    return {"models": out}


def _where(model, n=None) -> str:
    s, m, big_l, gamma, beta = model
    text = f"S={s} m={m} L={big_l} gamma={gamma:g} beta={beta:g}"
    return text + (f" N={n}" if n is not None else "")


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per model and N: the model's losses against the closed form (1e-9 relative); N x the
    collision cost against its two-term expansion within the bound on the rest (N >= 4096);
    Theorem 1: every L-BFGS end one-hot, each end's loss its assignment's, the least the
    optimum, and the optima (by enumeration) distinct."""
    out = []
    for model, measured, predicted in zip(MODELS, results["models"], predictions["models"], strict=True):
        for got, want in zip(measured["losses"], predicted["losses"], strict=True):
            n = got["vocab"]
            error = max(abs(got[k] - want[k]) / abs(want[k]) for k in ("distinct", "collided"))
            out.append(Row(
                "induction: the model's population loss = closed form (distinct and collided)",
                _where(model, n), kind="consistency", predicted=0.0, ode=error, tolerance=1e-9, floor=1.0,
            ))
            if n < 4096:
                continue
            scaled = n * (got["collided"] - got["distinct"])
            out.append(Row(
                "induction: N x collision cost = c1 + c2/N (derived 1/N expansion)",
                _where(model, n) + "; tolerance: the bound on the O(1/N^2) rest, and 32 ulp of the loss",
                kind="prediction", predicted=want["two_terms"], ode=scaled,
                tolerance=(want["tail_bound"] + n * ROUNDING * abs(want["distinct"])) / abs(want["two_terms"]),
            ))
        ends = measured["ends"]
        where = _where(model, THEOREM_VOCAB) + f", L-BFGS from {len(ends)} N(0,1) starts"
        out.append(Row(
            "induction Theorem 1: every minimiser one-hot at (r, r+1)", where, kind="prediction",
            predicted=1.0, ode=float(np.mean([e["concentrated"] for e in ends])), tolerance=0.0, floor=1.0,
        ))
        end_error = max(
            abs(e["loss"] - p) / p for e, p in zip(ends, predicted["end_losses"], strict=True)
        )
        out.append(Row(
            "induction Theorem 1: each end's loss = its assignment's closed form", where,
            kind="prediction", predicted=0.0, ode=end_error, tolerance=1e-9, floor=1.0,
        ))
        out.append(Row(
            "induction Theorem 1: least loss = the distinct assignments' (enumerated optimum)",
            where, kind="prediction", predicted=predicted["optimal_loss"],
            ode=min(e["loss"] for e in ends), tolerance=1e-9, holds=predicted["optima_distinct"],
        ))
    return out


def tables(results: dict, predictions: dict) -> list[Table]:
    """N x collision cost against N per model, with the coefficient."""
    rows_ = []
    for model, measured, predicted in zip(MODELS, results["models"], predictions["models"], strict=True):
        for got in measured["losses"]:
            n = got["vocab"]
            rows_.append((_where(model), n, n * (got["collided"] - got["distinct"]), predicted["coefficient"]))
    return [Table(
        "induction: N x (collided - distinct loss)", ("model", "N", "N x cost", "c1"), rows_,
        "c1 = lim N x cost = mean_r* (F_c - F_d) (theory.induction_collision_coefficient).",
    )]


EXPERIMENT = Experiment(
    "induction_collision", run, predict, rows, sizes=SIZES, drawn=True, tables=tables
)

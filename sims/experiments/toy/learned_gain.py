"""Learned gain: the race between the gain's growth and the instability, and the end state."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.metrics import specialization_index, support_size
from weakspots.sims.experiments.canonical import (
    CHUNKS,
    EVENT_LEVEL,
    STRIDE,
    base_flow,
    random_starts,
    solve_from,
)
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.measure import order_parameter
from weakspots.theory.gain import race_exponent

INIT_SCALE = 0.01  # the flows' initial pooling logits: INIT_SCALE * N(0, 1)


@dataclass(frozen=True)
class Size:
    """The weight decays of the learned-gain flows."""

    weight_decays: tuple[float, ...]


SIZES = {
    "tiny": Size((0.0, 1e-3)),
    "quick": Size((0.0, 1e-4, 3e-4, 1e-3)),
    "full": Size((0.0, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3)),
}


def run(size: Size) -> dict:
    """Reduced flow with the gain learned from 1 under weight decay wd: gain, specialisation."""
    wds = np.asarray(size.weight_decays, float)
    ts = np.concatenate([[0.0], np.geomspace(1.0, 2e5, 120)])
    starts = random_starts(len(wds), 1, STRIDE, INIT_SCALE, seed=7)
    configs = [
        base_flow(
            ts, gain=1.0, learn_gain=True, weight_decay=float(wd), gain_parametrisation="linear"
        )
        for wd in wds
    ]
    out = solve_from(configs, starts, ts)
    w = out.pooling_weights[:, :, 0]
    return {
        "times": ts,
        "weight_decays": wds,
        "gain": out.gain[:, :, 0],
        "specialization_index": specialization_index(w),
        "support": support_size(w[:, -1]),
        "start_order": order_parameter(np.exp(starts)),  # softmax up to a constant
        "start_gain": 1.0,
        "event_time": out.specialization_time,
    }


def predict(size: Size, results: dict) -> dict:
    """beta_c (docs/theory.md §6.3), the uniform-state equilibrium gain per wd
    (theory.weight_decay_equilibrium_gain), the race (theory.gain.race_exponent: the
    instability wins when log delta_0 + max_t int lambda(beta(t)) dt reaches log 0.25, the
    event of theory.specialization_time, along the uniform-state gain path) and the end
    state (theory.learned_gain_outcome: support size and gain at t_end)."""
    del size
    beta_c = float(theory.critical_gain(CHUNKS, STRIDE))
    t_end = float(results["times"][-1])
    out = {
        "critical_gain": beta_c,
        "equilibrium_gain": [],
        "specialises": [],
        "margin": [],
        "final_support": [],
        "final_gain": [],
    }
    for wd, d0 in zip(results["weight_decays"], results["start_order"], strict=True):
        _, _, growth = race_exponent(STRIDE, CHUNKS, results["start_gain"], wd, t_end, "linear")
        margin = math.log(d0) + float(growth.max()) - math.log(EVENT_LEVEL)
        k, beta = theory.learned_gain_outcome(
            STRIDE, CHUNKS, results["start_gain"], wd, INIT_SCALE, t_end, "linear"
        )
        out["equilibrium_gain"].append(
            theory.weight_decay_equilibrium_gain(STRIDE, CHUNKS, wd, STRIDE)
        )
        out["margin"].append(margin)
        out["specialises"].append(bool(margin >= 0))
        out["final_support"].append(k)
        out["final_gain"].append(beta)
    return out


# Deterministic: the flows run at rtol 1e-7 and the ladder's reduced ODE at 1e-9 to
# t = 2e5; 1e-3 allows for where the ladder's joins fall in time.
FINAL_GAIN_RTOL = 1e-3
# The equilibrium is the gain's fixed point on the uniform state; the flow approaches it
# only asymptotically, at the weight decay's slow rate, so at t = 2e5 it may not be there.
EQUILIBRIUM_RTOL = 0.02


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per weight decay: the race (fit: it starts from each flow's own start size), the end
    state's gain (prediction; its support size must match) and, for flows that end uniform,
    the equilibrium gain (prediction)."""
    out = []
    for i, wd in enumerate(results["weight_decays"]):
        reached = math.isfinite(results["event_time"][i])
        out.append(
            Row(
                "learned gain race: delta reaches 0.25 (1) or not (0)",
                f"s=8 N=64 gain0=1 wd={wd:g}; margin {predictions['margin'][i]:+.2f}",
                kind="fit",
                predicted=float(predictions["specialises"][i]),
                ode=float(reached),
                tolerance=0.0,  # an outcome: the same or not
                floor=1.0,
            )
        )
        out.append(
            Row(
                "learned gain: end state (race + re-entry ladder), final gain",
                f"s=8 N=64 gain0=1 wd={wd:g}; k predicted {predictions['final_support'][i]}, "
                f"ode {results['support'][i]}",
                kind="prediction",
                predicted=predictions["final_gain"][i],
                ode=float(results["gain"][i][-1])
                if results["support"][i] == predictions["final_support"][i]
                else math.nan,
                tolerance=FINAL_GAIN_RTOL,
            )
        )
        eq = predictions["equilibrium_gain"][i]
        if results["support"][i] == STRIDE and math.isfinite(eq):
            out.append(
                Row(
                    "learned gain: uniform-state equilibrium",
                    f"s=8 N=64 wd={wd:g}; ode = gain at t=2e5",
                    kind="prediction",
                    predicted=eq,
                    ode=float(results["gain"][i][-1]),
                    tolerance=EQUILIBRIUM_RTOL,
                )
            )
    return out


EXPERIMENT = Experiment(
    "learned_gain", run, predict, rows, sizes=SIZES, version=5, drawn=True
)

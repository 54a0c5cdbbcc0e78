"""Figure 12, learned gain: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import math

import numpy as np

from weakspots import theory
from weakspots.idealized.metrics import specialization_index, support_size
from weakspots.sims.experiments._common import (
    CHUNKS,
    EVENT_LEVEL,
    STRIDE,
    Size,
    cached,
    flow,
    order_parameter,
    random_starts,
    row,
)
from weakspots.theory.gain import race_exponent

INIT_SCALE = 0.01  # the flows' initial pooling logits: INIT_SCALE * N(0, 1)


def run_learned_gain(size: Size, store_dir=None) -> dict:
    """Reduced flow with the gain learned from 1.0 under weight decay wd: gain and specialisation."""

    def compute():
        wds = np.asarray(size.weight_decays, float)
        ts = np.concatenate([[0.0], np.geomspace(1.0, 2e5, 120)])
        starts = random_starts(len(wds), 1, STRIDE, INIT_SCALE, seed=7)
        out = flow(
            stride=STRIDE,
            starts=starts,
            chunks=CHUNKS,
            gain=1.0,
            ts=ts,
            learn_gain=1.0,
            weight_decay=wds,
            gain_param="linear",
        )
        w = out["pooling_weights"][:, :, 0]
        return {
            "times": ts,
            "weight_decays": wds,
            "gain": out["gain"][:, :, 0],
            "specialization_index": specialization_index(w),
            "support": support_size(w[:, -1]),
            "start_order": order_parameter(np.exp(starts)),  # softmax up to a constant
            "start_gain": 1.0,
            "event_time": out["specialization_time"],
        }

    return cached(store_dir, "run", "learned_gain", size, compute)


def predict_learned_gain(size: Size, results: dict, store_dir=None) -> dict:
    """beta_c (THEORY 6.3), the uniform-state equilibrium gain per wd
    (theory.weight_decay_equilibrium_gain), the race (theory.gain.race_exponent: the
    instability wins when log delta_0 + max_t int lambda(beta(t)) dt reaches log 0.25, the
    event of theory.specialization_time, along the uniform-state gain path) and the end
    state (theory.learned_gain_outcome: support size and gain at t_end)."""

    def compute():
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

    return cached(store_dir, "predict", "learned_gain", size, compute)


def rows_learned_gain(results: dict, predictions: dict) -> list[dict]:
    """The race (does delta reach 0.25?) and, for runs that end uniform, the equilibrium gain."""
    rows = []
    for i, wd in enumerate(results["weight_decays"]):
        reached = math.isfinite(results["event_time"][i])
        rows.append(
            row(
                "learned gain race: delta reaches 0.25 (1) or not (0)",
                f"s=8 N=64 gain0=1 wd={wd:g}; margin {predictions['margin'][i]:+.2f}",
                float(predictions["specialises"][i]),
                ode=float(reached),
                tolerance=0.0,
                floor=1.0,
            )
        )
        rows.append(
            row(
                "learned gain: end state (race + re-entry ladder), final gain",
                f"s=8 N=64 gain0=1 wd={wd:g}; k predicted {predictions['final_support'][i]}, "
                f"ode {results['support'][i]}",
                predictions["final_gain"][i],
                ode=float(results["gain"][i][-1])
                if results["support"][i] == predictions["final_support"][i]
                else math.nan,
                tolerance=1e-3,
            )
        )
        eq = predictions["equilibrium_gain"][i]
        if results["support"][i] == STRIDE and math.isfinite(eq):
            rows.append(
                row(
                    "learned gain: uniform-state equilibrium",
                    f"s=8 N=64 wd={wd:g}; ode = gain at t=2e5",
                    eq,
                    ode=float(results["gain"][i][-1]),
                    tolerance=0.02,
                )
            )
    return rows

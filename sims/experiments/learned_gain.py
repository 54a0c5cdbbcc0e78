"""Figure 12, learned gain: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import math

import numpy as np

import theory
from idealized.metrics import specialization_index, support_size
from sims.experiments._common import (
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


def _gain_slope(beta, stride, chunks, weight_decay):
    """dL/dbeta at uniform pooling, L = c (1 - sigma_N(beta/s))^2 + wd/2 beta^2 (THEORY 5, 6.6)."""
    c = chunks / (chunks - 1.0)
    sig = 1.0 / (1.0 + (chunks - 1.0) * np.exp(-np.asarray(beta, float) / stride))
    return -2.0 * c * sig * (1.0 - sig) ** 2 / stride + weight_decay * beta


def equilibrium_gain(stride, chunks, weight_decay, start=1.0) -> float:
    """Adapter (not yet in theory/): the gain a flow from `start` settles at under uniform pooling.

    The first zero of dL/dbeta above `start` where it turns from negative to positive
    (bisection); inf for wd = 0 (the gain then grows without bound).
    """
    grid = np.geomspace(start, 1e4, 4000)
    slope = _gain_slope(grid, stride, chunks, weight_decay)
    up = np.nonzero((slope[:-1] < 0) & (slope[1:] > 0))[0]
    if not up.size:
        return math.inf
    lo, hi = grid[up[0]], grid[up[0] + 1]
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _gain_slope(mid, stride, chunks, weight_decay) < 0 else (lo, mid)
    return float(0.5 * (lo + hi))


def race_growth(stride, chunks, weight_decay, start_gain, t_end) -> tuple[np.ndarray, np.ndarray]:
    """Adapter (not yet in theory/): the race of THEORY 6.6 in the linear regime.

    While pooling is near uniform the gain follows dbeta/dt = -dL/dbeta at uniform pooling
    (the linear gain parametrisation of THEORY 6.6) and the perturbation delta grows as
    exp(int lambda(beta(t)) dt), lambda of THEORY 6.2 (negative once beta > beta_c).
    Returns (times, cumulative growth exponent); delta is predicted to reach 0.25 when
    log delta_0 + max_t growth >= log 0.25.
    """
    beta, t, times, growth, total = float(start_gain), 0.0, [0.0], [0.0], 0.0

    def rate(b):
        return -float(_gain_slope(b, stride, chunks, weight_decay))

    while t < t_end:
        dt = min(max(0.25, 0.002 * t), t_end - t)
        lam0 = float(theory.growth_rate(stride, chunks, beta))
        k1 = rate(beta)
        k2 = rate(beta + 0.5 * dt * k1)
        k3 = rate(beta + 0.5 * dt * k2)
        k4 = rate(beta + dt * k3)
        beta += dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        lam1 = float(theory.growth_rate(stride, chunks, beta))
        total += 0.5 * dt * (lam0 + lam1)
        t += dt
        times.append(t)
        growth.append(total)
    return np.asarray(times), np.asarray(growth)


def run_learned_gain(size: Size, store_dir=None) -> dict:
    """Reduced flow with the gain learned from 1.0 under weight decay wd: gain and specialisation."""

    def compute():
        wds = np.asarray(size.weight_decays, float)
        ts = np.concatenate([[0.0], np.geomspace(1.0, 2e5, 120)])
        starts = random_starts(len(wds), 1, STRIDE, 0.01, seed=7)
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
    """beta_c (THEORY 6.3), the uniform-state equilibrium gain per wd, and the race: the
    instability wins (pooling specialises) when log delta_0 + max_t int lambda(beta(t)) dt
    reaches log 0.25 (the event of theory.specialization_time) along the uniform-state gain path."""

    def compute():
        beta_c = float(theory.critical_gain(CHUNKS, STRIDE))
        t_end = float(results["times"][-1])
        out = {"critical_gain": beta_c, "equilibrium_gain": [], "specialises": [], "margin": []}
        for wd, d0 in zip(results["weight_decays"], results["start_order"], strict=True):
            _, growth = race_growth(STRIDE, CHUNKS, wd, results["start_gain"], t_end)
            margin = math.log(d0) + float(growth.max()) - math.log(EVENT_LEVEL)
            out["equilibrium_gain"].append(equilibrium_gain(STRIDE, CHUNKS, wd))
            out["margin"].append(margin)
            out["specialises"].append(bool(margin >= 0))
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

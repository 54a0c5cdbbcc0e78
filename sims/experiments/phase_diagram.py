"""Figure 3, phase diagram: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import numpy as np

import theory
from idealized.config import TrainConfig
from idealized.metrics import specialization_index, support_size
from sims.experiments._common import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    Size,
    base_config,
    cached,
    flow,
    random_starts,
    row,
    train,
)


def configs_phase_diagram(size: Size) -> list[TrainConfig]:
    """The SGD points: N across size.chunks_sweep at gain 16, and gains 12, 24, 32 at N = 64."""
    points = [(n, GAIN) for n in size.chunks_sweep] + [(CHUNKS, g) for g in (12.0, 24.0, 32.0)]
    return [base_config(size, chunks=n, gain=g) for n, g in points]


def run_phase_diagram(size: Size, store_dir=None) -> dict:
    """Specialisation index of the reduced flow at t = 1200 over (N, gain/stride); SGD points on top."""

    def compute():
        chunks = np.unique(np.round(np.geomspace(4, 512, size.grid)).astype(int))
        ratios = np.linspace(1.0, 5.0, size.grid)
        nn, rr = np.meshgrid(chunks, ratios, indexing="ij")
        t_end = float(size.steps * 2.0)
        starts = random_starts(nn.size, 1, STRIDE, 0.01, seed=3)
        ode = flow(
            stride=STRIDE,
            starts=starts,
            chunks=nn.ravel(),
            gain=STRIDE * rr.ravel(),
            ts=np.linspace(0.0, t_end, 3),
        )
        index = specialization_index(ode["pooling_weights"][:, -1, 0]).reshape(nn.shape)
        configs = configs_phase_diagram(size)
        sgd = []
        for c, r in zip(configs, train(configs), strict=True):
            w = np.asarray(r.model.pooling_weights(), float)
            sgd.append(
                {
                    "chunks": c.chunks,
                    "ratio": c.gain / c.stride,
                    "index": float(specialization_index(w)[0]),
                    "support": int(support_size(w)[0]),
                }
            )
        return {
            "chunks": chunks,
            "ratios": ratios,
            "index": index,
            "t_end": t_end,
            "sgd": sgd,
        }

    return cached(store_dir, "run", "phase_diagram", size, compute)


def predict_phase_diagram(size: Size, results: dict, store_dir=None) -> dict:
    """The critical curve N_c = 1 + 2 exp(gain/stride) (THEORY 6.3), and N_c(d) at the SGD
    runs' d and gain 16 from the finite-d loss (theory.critical_chunks_finite_d)."""
    del size, store_dir
    ratios = np.linspace(min(results["ratios"]), max(results["ratios"]), 200)
    return {
        "ratios": ratios.tolist(),
        "critical_chunks": (1 + 2 * np.exp(ratios)).tolist(),
        "critical_chunks_finite_d": theory.critical_chunks_finite_d(GAIN, STRIDE, DIM),
    }


def rows_phase_diagram(results: dict, predictions: dict) -> list[dict]:
    """SGD bracket of N_c at gain 16: largest N that stays uniform, smallest that specialises,
    against N_c at d = inf and (when predicted) N_c(d) of the finite-d loss."""
    at_gain = [p for p in results["sgd"] if abs(p["ratio"] - GAIN / STRIDE) < 1e-9]
    uniform = [p["chunks"] for p in at_gain if p["support"] == STRIDE]
    special = [p["chunks"] for p in at_gain if p["support"] < STRIDE]
    if not uniform or not special:
        return []
    lo, hi = max(uniform), min(special)
    mid, half = 0.5 * (lo + hi), 0.5 * abs(hi - lo)
    predicted = {"N_c": float(theory.critical_chunks(GAIN, STRIDE))}
    if "critical_chunks_finite_d" in predictions:
        predicted[f"N_c(d={DIM})"] = float(predictions["critical_chunks_finite_d"])
    return [
        row(
            f"{name} inside the SGD bracket [{lo}, {hi}]",
            f"s=8 gain=16 d={DIM}; sgd = bracket midpoint, tolerance = half-width",
            value,
            sgd=mid,
            tolerance=half / value if hi > lo else 0.0,
        )
        for name, value in predicted.items()
    ]

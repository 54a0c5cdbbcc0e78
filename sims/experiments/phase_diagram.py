"""Figure 3, phase diagram: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig
from weakspots.idealized.metrics import specialization_index, support_size
from weakspots.sims.experiments._common import (
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
    """The critical curve N_c = 1 + 2 exp(gain/stride) (THEORY 6.3), N_c(d) at the SGD runs'
    d and gain 16 from the finite-d loss (theory.critical_chunks_finite_d), and the N past
    which a run leaves uniform pooling within its budget (`escape_chunks`)."""
    del store_dir
    ratios = np.linspace(min(results["ratios"]), max(results["ratios"]), 200)
    return {
        "ratios": ratios.tolist(),
        "critical_chunks": (1 + 2 * np.exp(ratios)).tolist(),
        "critical_chunks_finite_d": theory.critical_chunks_finite_d(GAIN, STRIDE, DIM),
        **escape_chunks(size),
    }


def escape_chunks(size: Size) -> dict:
    """N at which half the SGD runs (lr 2, this size's steps) leave uniform pooling, at gain 16.

    Below N_c(d = 64) = 18.4 uniform pooling is linearly stable under the finite-d loss, but
    past N_c(d = inf) = 15.8 it is only metastable, and SGD's noise carries runs over the
    saddle: P(escape) of the SGD recursion on L_d (theory.escape_fraction_discrete, as in
    figure 6) at integer N from 12 up, interpolated linearly in N where it crosses 1/2.
    Measured at --full: 0.02, 0.07, 0.22, 0.66, 0.99 at N = 12..16, so 14.6, where the SGD
    bracket is [12, 16] and N_c(d = 64) lies outside it.
    """
    from weakspots.sims.experiments.support_size import uniform_escape

    chunks, p_escape = [], []
    for n in range(12, int(np.ceil(theory.critical_chunks_finite_d(GAIN, STRIDE, DIM)))):
        chunks.append(n)
        p_escape.append(float(uniform_escape(size, STRIDE, n)["p_escape"]))
        if p_escape[-1] > 0.5:
            break
    out = {"escape_scan_chunks": chunks, "escape_scan_p": p_escape, "escape_steps": size.steps}
    if len(p_escape) > 1 and p_escape[-2] <= 0.5 < p_escape[-1]:
        f = (0.5 - p_escape[-2]) / (p_escape[-1] - p_escape[-2])
        out["escape_chunks"] = chunks[-2] + f
    return out


def rows_phase_diagram(results: dict, predictions: dict) -> list[dict]:
    """SGD bracket of N_c at gain 16: largest N that stays uniform, smallest that specialises,
    against N_c at d = inf and the N past which most runs escape uniform pooling
    (`escape_chunks`). N_c(d = 64) of the finite-d loss (18.4) is not a row: runs leave the
    metastable uniform state before it (at --full, N = 16 specialised, P(escape) 0.99)."""
    at_gain = [p for p in results["sgd"] if abs(p["ratio"] - GAIN / STRIDE) < 1e-9]
    uniform = [p["chunks"] for p in at_gain if p["support"] == STRIDE]
    special = [p["chunks"] for p in at_gain if p["support"] < STRIDE]
    if not uniform or not special:
        return []
    lo, hi = max(uniform), min(special)
    mid, half = 0.5 * (lo + hi), 0.5 * abs(hi - lo)
    predicted = {"N_c": float(theory.critical_chunks(GAIN, STRIDE))}
    if "escape_chunks" in predictions:  # past N_c(d) SGD would also leave; it does sooner
        steps = predictions["escape_steps"]
        name = f"N with P(escape) = 1/2 (L_d recursion at d={DIM}, {steps} steps)"
        predicted[name] = float(predictions["escape_chunks"])
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

"""Phase diagram: specialisation of the reduced flow over (N, gain/stride), SGD points on top."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from weakspots import theory
from weakspots.idealized.metrics import specialization_index, support_size
from weakspots.idealized.toy.config import TrainConfig
from weakspots.sims.experiments.canonical import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    TRAINING,
    Training,
    base_config,
    base_flow,
    random_starts,
    solve_from,
    train,
)
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.experiments.toy.uniform_state import uniform_escape

ESCAPE_GAINS = (12.0, 16.0, 20.0, 24.0, 28.0, 32.0)  # the derived boundary's gains (full)


@dataclass(frozen=True)
class Size:
    """SGD training and its N at gain 16, flow cells per axis, and whether the escape
    boundary is drawn over every gain of ESCAPE_GAINS (else gain 16 only)."""

    training: Training
    chunks_sweep: tuple[int, ...]
    grid: int
    every_escape_gain: bool


SIZES = {
    "tiny": Size(TRAINING["tiny"], (12, 64), grid=3, every_escape_gain=False),
    "quick": Size(TRAINING["quick"], (12, 24, 64, 256), grid=10, every_escape_gain=False),
    "full": Size(
        TRAINING["full"], (12, 16, 20, 24, 32, 64, 128, 256), grid=24, every_escape_gain=True
    ),
}


def configs(size: Size) -> list[TrainConfig]:
    """The SGD points: N across size.chunks_sweep at gain 16, and gains 12, 24, 32 at N = 64."""
    points = [(n, GAIN) for n in size.chunks_sweep] + [(CHUNKS, g) for g in (12.0, 24.0, 32.0)]
    return [base_config(size.training, chunks=n, gain=g) for n, g in points]


def run(size: Size) -> dict:
    """Specialisation index of the reduced flow at t = 1200 over (N, gain/stride), and SGD's."""
    chunks = np.unique(np.round(np.geomspace(4, 512, size.grid)).astype(int))
    ratios = np.linspace(1.0, 5.0, size.grid)
    nn, rr = np.meshgrid(chunks, ratios, indexing="ij")
    t_end = float(size.training.steps * 2.0)
    starts = random_starts(nn.size, 1, STRIDE, 0.01, seed=3)
    ts = np.linspace(0.0, t_end, 3)
    configs_ode = [
        base_flow(ts, chunks=int(n), gain=float(STRIDE * r))
        for n, r in zip(nn.ravel(), rr.ravel(), strict=True)
    ]
    ode = solve_from(configs_ode, starts, ts)
    index = specialization_index(ode.pooling_weights[:, -1, 0]).reshape(nn.shape)
    sgd_configs = configs(size)
    sgd = []
    for c, r in zip(sgd_configs, train(sgd_configs), strict=True):
        w = np.asarray(r.model.pooling_weights(), float)
        sgd.append(
            {
                "chunks": c.chunks,
                "ratio": c.gain / c.stride,
                "index": float(specialization_index(w)[0]),
                "support": int(support_size(w)[0]),
            }
        )
    return {"chunks": chunks, "ratios": ratios, "index": index, "t_end": t_end, "sgd": sgd}


def predict(size: Size, results: dict) -> dict:
    """The critical curve N_c = 1 + 2 exp(gain/stride) (docs/theory.md §6.3), N_c(d) at the
    SGD runs' d and gain 16 from the finite-d loss (theory.critical_chunks_finite_d), the N
    past which a run leaves uniform pooling within its training from the SGD recursion
    (`escape_chunks`), and the derived boundary N_esc(d, lr, B, steps) over gain
    (`escape_boundary`: theory.escape_boundary_curve, at gain 16 only below the full size)."""
    ratios = np.linspace(min(results["ratios"]), max(results["ratios"]), 200)
    sgd = base_config(size.training)
    gains = ESCAPE_GAINS if size.every_escape_gain else (GAIN,)
    return {
        "ratios": ratios.tolist(),
        "critical_chunks": (1 + 2 * np.exp(ratios)).tolist(),
        "critical_chunks_finite_d": theory.critical_chunks_finite_d(GAIN, STRIDE, DIM),
        **escape_chunks(size.training),
        "escape_boundary": theory.escape_boundary_curve(
            STRIDE, gains, DIM, sgd.lr, sgd.batch, sgd.steps
        ),
    }


def escape_chunks(training: Training) -> dict:
    """N at which half the SGD runs (lr 2, `training`'s steps) leave uniform pooling, at gain 16.

    Below N_c(d = 64) uniform pooling is linearly stable under the finite-d loss, but past
    N_c(d = inf) it is only metastable, and SGD's noise carries runs over the saddle:
    P(escape) of the SGD recursion on L_d (uniform_state.uniform_escape) at integer N from
    12 up, interpolated linearly in N where it crosses 1/2. Without a crossing below
    N_c(d = 64), `escape_chunks` is nan.
    """
    chunks, p_escape = [], []
    for n in range(12, int(np.ceil(theory.critical_chunks_finite_d(GAIN, STRIDE, DIM)))):
        chunks.append(n)
        p_escape.append(float(uniform_escape(training, STRIDE, n)["p_escape"]))
        if p_escape[-1] > 0.5:
            break
    out = {"escape_scan_chunks": chunks, "escape_scan_p": p_escape, "escape_steps": training.steps}
    out["escape_chunks"] = math.nan
    if len(p_escape) > 1 and p_escape[-2] <= 0.5 < p_escape[-1]:
        f = (0.5 - p_escape[-2]) / (p_escape[-1] - p_escape[-2])
        out["escape_chunks"] = chunks[-2] + f
    return out


def rows(results: dict, predictions: dict) -> list[Row]:
    """SGD bracket of the threshold at gain 16 (largest N that stays uniform, smallest that
    specialises) against N_c at d = inf (prediction), the derived escape boundary N_esc
    (prediction: the passage law, theory.escape_boundary) and the N past which most runs
    escape uniform pooling (consistency: it simulates the SGD recursion on L_d). N_c(d = 64)
    of the finite-d loss is not a row: runs leave the metastable uniform state before it.
    Without a bracket (every point uniform, or every one specialised) every row fails."""
    at_gain = [p for p in results["sgd"] if abs(p["ratio"] - GAIN / STRIDE) < 1e-9]
    uniform = [p["chunks"] for p in at_gain if p["support"] == STRIDE]
    special = [p["chunks"] for p in at_gain if p["support"] < STRIDE]
    steps = predictions["escape_steps"]
    escape_name = f"N with P(escape) = 1/2 (L_d recursion at d={DIM}, {steps} steps)"
    boundary = predictions["escape_boundary"]
    n_esc = boundary["chunks"][boundary["gain"].index(GAIN)]
    predicted = [
        ("N_c", "prediction", float(theory.critical_chunks(GAIN, STRIDE))),
        (f"N_esc (passage law at d={DIM}, {steps} steps)", "prediction", float(n_esc)),
        (escape_name, "consistency", float(predictions["escape_chunks"])),
    ]
    if not uniform or not special:
        sgd_chunks = sorted(p["chunks"] for p in at_gain)
        return [
            Row(
                f"{name} inside the SGD bracket (none: SGD at N {sgd_chunks})",
                f"s=8 gain=16 d={DIM}; no bracket, so the row fails",
                kind=kind,
                predicted=value,
                sgd=math.nan,  # nothing to compare: the row fails
                tolerance=0.0,
            )
            for name, kind, value in predicted
        ]
    lo, hi = max(uniform), min(special)
    mid, half = 0.5 * (lo + hi), 0.5 * abs(hi - lo)
    return [
        Row(
            f"{name} inside the SGD bracket [{lo}, {hi}]",
            f"s=8 gain=16 d={DIM}; sgd = bracket midpoint, tolerance = half-width",
            kind=kind,
            predicted=value,
            sgd=mid,
            tolerance=half / value if hi > lo else 0.0,  # the SGD grid's resolution
        )
        for name, kind, value in predicted
    ]


EXPERIMENT = Experiment(
    "phase_diagram", run, predict, rows, sizes=SIZES, configs=configs, version=4, drawn=True
)

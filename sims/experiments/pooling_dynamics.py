"""Figure 2, pooling dynamics: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig
from weakspots.idealized.metrics import support_size
from weakspots.sims.experiments._common import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    Size,
    _mode,
    base_config,
    cached,
    flow,
    row,
    sgd_start,
    support_prediction,
    train,
)
from weakspots.sims.flow import reduced_flow

POOLING_INIT = 0.3


def configs_pooling_dynamics(size: Size) -> list[TrainConfig]:
    """SGD at d = 64 and d = 1024 from init scale 0.3, size.seeds seeds each."""
    return [
        base_config(size, dim=d, seed=s, init_scale=POOLING_INIT)
        for d in (DIM, 1024)
        for s in range(size.seeds)
    ]


def run_pooling_dynamics(size: Size, store_dir=None) -> dict:
    """SGD pooling weights at d = 64 and d = 1024, and from each run's own start the reduced
    (d = inf) flow and the finite-d corrected flow (sims.flow.reduced_flow(dim=d))."""

    def compute():
        # Init scale 0.3 (THEORY 6.10): the start, not early SGD noise, then picks the support,
        # so SGD and the flow from the same start can be compared phase by phase.
        configs = configs_pooling_dynamics(size)
        results = train(configs)
        starts = np.stack([sgd_start(c) for c in configs])
        times = np.asarray(results[0].history.times, float)
        ode = flow(stride=STRIDE, starts=starts, chunks=CHUNKS, gain=GAIN, ts=times)
        # The finite-d corrected flow (theory.finite_d_loss at each run's d), same starts.
        corrected = reduced_flow(
            stride=STRIDE,
            chunks=float(CHUNKS),
            gain=GAIN,
            init_pooling_logits=starts,
            ts=times,
            dim=np.asarray([c.dim for c in configs], float),
            rtol=1e-7,
            atol=1e-9,
            event_level=None,  # only the weights are kept: no specialisation-event solve
        )
        corrected_weights = np.asarray(corrected.pooling_weights, float)
        runs = []
        for i, (c, r) in enumerate(zip(configs, results, strict=True)):
            sgd = np.asarray(r.history.pooling_weights, float)[:, 0]
            runs.append(
                {
                    "dim": c.dim,
                    "seed": c.seed,
                    "sgd": sgd,
                    "ode": ode["pooling_weights"][i][:, 0],
                    "corrected": corrected_weights[i][:, 0],
                }
            )
        return {"times": times, "runs": runs, "init_scale": POOLING_INIT}

    return cached(store_dir, "run", "pooling_dynamics", size, compute)


def predict_pooling_dynamics(size: Size, results: dict, store_dir=None) -> dict:
    """Uniform pooling 1/s, the growth rate, and the predicted final support size."""

    def compute():
        sizes, probs, admissible = support_prediction(STRIDE, CHUNKS, GAIN, size.support_samples)
        return {
            "uniform": 1.0 / STRIDE,
            "growth_rate": float(theory.growth_rate(STRIDE, CHUNKS, GAIN)),
            "support_sizes": sizes,
            "support_probabilities": probs,
            "admissible": admissible,
        }

    return cached(store_dir, "predict", "pooling_dynamics", size, compute)


def rows_pooling_dynamics(results: dict, predictions: dict) -> list[dict]:
    k_pred = float(
        predictions["support_sizes"][int(np.argmax(predictions["support_probabilities"]))]
    )
    rows = []
    for dim in sorted({r["dim"] for r in results["runs"]}):
        runs = [r for r in results["runs"] if r["dim"] == dim]
        ode_k = _mode([support_size(np.asarray(r["ode"])[-1:]).item() for r in runs])
        sgd_k = _mode([support_size(np.asarray(r["sgd"])[-1:]).item() for r in runs])
        rows.append(
            row(
                "support size k (most probable)",
                f"s=8 N=64 gain=16 d={dim}, flow from the SGD starts",
                k_pred,
                ode=ode_k,
                sgd=sgd_k,
                tolerance=0.0,
            )
        )
    return rows

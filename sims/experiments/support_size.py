"""Figure 6, support size: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import numpy as np

import theory
from sims.experiments._common import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    Size,
    _mode,
    base_config,
    cached,
    row,
    support_prediction,
    train,
)

DELTA_MAX_TOLERANCE = 0.1  # absolute, for the specialised k-states (k < s)
# k = s: the row passes inside this central interval of the predicted seed-mean delta_max
# (95%: a false alarm in one such row in 20 runs of the table).
NOISE_FLOOR_LEVEL = 0.95


def _support_points(size: Size) -> list[tuple[str, int, int]]:
    return [("chunks", STRIDE, n) for n in size.chunks_sweep] + [
        ("stride", s, CHUNKS) for s in size.stride_sweep
    ]


UNIFORM_SEEDS = 4  # at least this many SGD seeds where uniform pooling is stable


def _seeds(size: Size, stride: int, chunks: int) -> int:
    """SGD seeds at one point. Below the threshold the row compares a seed mean with the
    noise floor, whose 95% interval for a mean of 2 runs is too wide to say much (one
    outlying run moves it): there it takes at least UNIFORM_SEEDS."""
    below = chunks < float(theory.critical_chunks(GAIN, stride))
    return max(size.seeds, UNIFORM_SEEDS) if below else size.seeds


def run_support_size(size: Size, store_dir=None) -> dict:
    """Final support size and delta_max of SGD (d = 64, gain 16) against N and against s."""

    def compute():
        points = _support_points(size)
        configs = [
            base_config(size, stride=s, chunks=n, seed=seed)
            for _, s, n in points
            for seed in range(_seeds(size, s, n))
        ]
        results = train(configs)
        out = []
        for axis, s, n in points:
            runs = list(
                {
                    r.config: r for r in results if (r.config.stride, r.config.chunks) == (s, n)
                }.values()
            )
            out.append(
                {
                    "axis": axis,
                    "stride": s,
                    "chunks": n,
                    "support": [int(r.summary()["support_size"][0]) for r in runs],
                    "delta_max": [r.summary()["delta_max"] for r in runs],
                }
            )
        return {"points": out}

    return cached(store_dir, "run", "support_size", size, compute)


def uniform_noise_floor(size: Size, stride: int, chunks: int) -> dict:
    """theory.noise_floor for SGD at uniform pooling with this size's runs (config and seeds)."""
    c = base_config(size, stride=stride, chunks=chunks)
    return theory.noise_floor(
        stride,
        chunks,
        DIM,
        GAIN,
        c.lr,
        c.batch,
        c.steps,
        c.eval_samples,
        c.loss,
        c.init_scale,
        seeds=_seeds(size, stride, chunks),
        level=NOISE_FLOOR_LEVEL,
    )


def predict_support_size(size: Size, results: dict, store_dir=None) -> dict:
    """Support-size distribution from near-uniform starts (theory.predicted_support_size), the
    admissible set, and delta_max of the most probable k-state at d = 64 (theory.accuracy).

    Where uniform pooling is stable (k = s) the k-state's delta_max is 0 and what SGD shows is
    its noise floor (theory.noise_floor): the prediction is the expected delta_max, and the
    tolerance the predicted 95% interval of the mean over this size's seeds (its wider side).
    """

    def compute():
        out = []
        for p in results["points"]:
            s, n = p["stride"], p["chunks"]
            sizes, probs, admissible = support_prediction(s, n, GAIN, size.support_samples)
            k = int(sizes[np.argmax(probs)])
            profile = theory.phase_accuracy_profile(s, n, k, DIM, dropped_weight=1e-3)
            point = {
                "stride": s,
                "chunks": n,
                "sizes": sizes,
                "probabilities": probs,
                "admissible": admissible,
                "k": k,
                "delta_max": float(theory.delta_max(profile)),
                "delta_max_tolerance": DELTA_MAX_TOLERANCE,
            }
            if k == s:
                floor = uniform_noise_floor(size, s, n)
                mean = floor["delta_max_mean"]
                low, high = floor["mean_of_seeds_interval"]
                point["delta_max"] = mean
                point["delta_max_tolerance"] = max(high - mean, mean - low)
                point["noise_floor"] = floor
            out.append(point)
        return {"points": out}

    return cached(store_dir, "predict", "support_size", size, compute)


def rows_support_size(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for p, q in zip(results["points"], predictions["points"], strict=True):
        cfg = f"s={p['stride']} N={p['chunks']} gain=16 d=64"
        rows.append(
            row("support size k (SGD mode)", cfg, q["k"], sgd=_mode(p["support"]), tolerance=0.0)
        )
        rows.append(
            row(
                "delta_max noise floor (k = s)"
                if q["k"] == p["stride"]
                else "delta_max of the k-state",
                cfg,
                q["delta_max"],
                sgd=float(np.mean(p["delta_max"])),
                tolerance=q.get("delta_max_tolerance", DELTA_MAX_TOLERANCE),
                floor=1.0,
            )
        )
    return rows

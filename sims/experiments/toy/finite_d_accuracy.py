"""Finite-d accuracy: the chi-conditioned formula against Monte Carlo of fixed pooling weights."""

from __future__ import annotations

import math
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from weakspots import theory
from weakspots.idealized.toy.compression import LinearPool
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.model import init_model
from weakspots.sims.experiments.canonical import GAIN, STRIDE, correct_at_phase
from weakspots.sims.experiments.experiment import Experiment, Row
from weakspots.sims.toy.train import DTYPE


def finite_d_cases() -> list[dict]:
    """Pooling weights whose accuracy is checked: uniform (N = 12, 64) and the 3-phase state."""
    three = theory.support_weights(STRIDE, 3)
    three = np.where(three > 0, three, 1e-3)
    return [
        {
            "label": "uniform, N=12",
            "chunks": 12,
            "weights": np.full(STRIDE, 1 / STRIDE),
            "phase": 0,
        },
        {
            "label": "uniform, N=64",
            "chunks": 64,
            "weights": np.full(STRIDE, 1 / STRIDE),
            "phase": 0,
        },
        {
            "label": "3-phase state, covered",
            "chunks": 64,
            "weights": three / three.sum(),
            "phase": 0,
        },
        {
            "label": "3-phase state, dropped",
            "chunks": 64,
            "weights": three / three.sum(),
            "phase": 7,
        },
    ]


def monte_carlo_accuracy(weights, chunks, dim, phase, samples, seed=0) -> float:
    """Fraction of needles retrieved by one head with fixed pooling `weights` (Monte Carlo)."""
    config = TrainConfig(operator="linear", chunks=chunks, dim=dim).model
    model = init_model(jax.random.key(0), config, GAIN, 0.0, DTYPE)
    model = eqx.tree_at(
        lambda m: m.compressor, model, LinearPool(jnp.asarray(weights, DTYPE)[None])
    )
    key = jax.random.fold_in(jax.random.key(seed), dim)
    ok, _ = correct_at_phase(model, key, config, samples, jnp.asarray(phase))
    return float(np.mean(np.asarray(ok)))


@dataclass(frozen=True)
class Size:
    """Monte Carlo needles per phase, and the dimensions d it is run at."""

    mc_samples: int
    dims: tuple[int, ...]


SIZES = {
    "tiny": Size(mc_samples=256, dims=(16, 64)),
    "quick": Size(mc_samples=4096, dims=(16, 64, 256)),
    "full": Size(mc_samples=16384, dims=(16, 32, 64, 128, 256, 1024)),
}


def run(size: Size) -> dict:
    """Monte Carlo accuracy of fixed pooling weights at several d (inner-product sampler)."""
    out = []
    for case in finite_d_cases():
        acc = [
            monte_carlo_accuracy(
                case["weights"], case["chunks"], d, case["phase"], size.mc_samples
            )
            for d in size.dims
        ]
        out.append({**case, "dims": list(size.dims), "accuracy": acc})
    return {"cases": out, "samples": size.mc_samples}


def predict(size: Size, results: dict) -> dict:
    """Exact chi-conditioned formula (docs/theory.md §6.12) and §7.3's Gaussian approximation."""
    del size
    dims = np.unique(np.round(np.geomspace(8, 2048, 40)).astype(int))
    out = []
    for case in results["cases"]:
        w, n, phi = np.asarray(case["weights"]), case["chunks"], case["phase"]
        out.append(
            {
                "dims": dims,
                "exact": [theory.phase_accuracy(w, GAIN, n, d)[phi] for d in dims],
                "gaussian": [theory.phase_accuracy_gaussian(w, GAIN, n, d)[phi] for d in dims],
                "at_runs": [theory.phase_accuracy(w, GAIN, n, d)[phi] for d in case["dims"]],
            }
        )
    return {"cases": out}


def rows(results: dict, predictions: dict) -> list[Row]:
    """The formula (a prediction) against Monte Carlo, at 3 binomial standard errors of the
    Monte Carlo plus 0.5 points, relative to the prediction. The 0.5 points are a fixed
    allowance far above the quadrature's own error; the variance is floored at 1e-4 so an
    accuracy of 0 or 1 still has an interval."""
    out = []
    n = results["samples"]
    for case, pred in zip(results["cases"], predictions["cases"], strict=True):
        for d, mc, p in zip(case["dims"], case["accuracy"], pred["at_runs"], strict=True):
            se = math.sqrt(max(p * (1 - p), 1e-4) / n)
            out.append(
                Row(
                    "finite-d accuracy (exact formula vs Monte Carlo)",
                    f"{case['label']} d={d}",
                    kind="prediction",
                    predicted=p,
                    sgd=mc,
                    tolerance=(3 * se + 0.005) / max(p, 0.05),
                    floor=0.05,
                )
            )
    return out


EXPERIMENT = Experiment("finite_d_accuracy", run, predict, rows, sizes=SIZES, drawn=True)

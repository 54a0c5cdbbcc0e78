"""SGD follows the flow: the trainer's pooling weights against the finite-d flow on a sample."""

from __future__ import annotations

import numpy as np

from weakspots.sims.experiments.canonical import train
from weakspots.sims.experiments.experiment import Experiment, Row, no_difference
from weakspots.sims.experiments.measure import SGD_ATOL, sgd_config
from weakspots.sims.toy.flow import finite_flow

SIZES = {"tiny": 8192, "quick": 8192, "full": 32768}  # problems in the finite-d flow's sample


def configs(samples: int) -> list:
    """The one SGD run compared (measure.sgd_config: d = 256, init 0.3, lr 0.5), the same
    at every size."""
    del samples
    return [sgd_config()]


def run(samples: int) -> dict:
    """Max abs pooling-weight difference between SGD and the finite-d flow on a sample of
    `samples` problems (same start)."""
    config = sgd_config()
    (result,) = train([config])
    sgd = np.asarray(result.history.pooling_weights, float)
    ode = finite_flow(config, samples=samples, accuracy=False)
    return {"seed": config.seed, "max_difference": float(np.max(np.abs(sgd - ode.pooling_weights)))}


def rows(results: dict, predictions: dict) -> list[Row]:
    """The difference (consistency: small-learning-rate SGD follows the gradient flow of
    the same objective; predicted 0)."""
    return [
        Row(
            "ODE vs SGD: trainer follows the finite-d flow (max abs weight)",
            f"s=8 N=64 gain=16 d=256 init 0.3 seed {results['seed']} lr 0.5 x 600 steps, batch 256",
            kind="consistency",
            predicted=predictions["max_difference"],
            sgd=results["max_difference"],
            tolerance=SGD_ATOL,
            floor=1.0,
        )
    ]


EXPERIMENT = Experiment(
    "sgd_follows_flow", run, no_difference, rows, sizes=SIZES, configs=configs
)

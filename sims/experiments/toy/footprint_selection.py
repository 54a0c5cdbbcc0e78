"""The footprint and selection models (docs/theory.md §9.4-§9.5): theory against their
finite-d simulators, nothing fitted."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from weakspots import theory
from weakspots.idealized import footprint, selection
from weakspots.sims.experiments.experiment import Experiment, Row

# Footprint: s=5, W=8 (q=1, rho=3), g 0.45, g_D 0.7, N=21, mean pooling, d = 10^6, gain 1
FOOTPRINT = dict(stride=5, chunks=21, window=8, carry_gain=0.45, decoy_gain=0.7)
# Selection: s=4, N=40, k=4, indexer dimension 16, indexer weights 0.4 0.3 0.2 0.1
SELECTION = dict(stride=4, chunks=40, topk=4, dim=16)
INDEX_WEIGHTS = np.array([0.4, 0.3, 0.2, 0.1])


SIZES = {"tiny": 2000, "quick": 8000, "full": 40_000}  # Monte Carlo samples of each model


def run(samples: int) -> dict:
    """Monte Carlo of both finite-d models: the footprint's per-phase loss N/(N-1)(1 - M)^2
    under mean pooling at d = 10^6, and the selection model's per-phase miss fraction."""
    n = samples
    config = footprint.FootprintTrainConfig(
        **FOOTPRINT, dim=10**6, gain=1.0, operator="mean_pool", eval_samples=n
    )
    model = footprint.init_model(None, config, 1.0, 0.0)

    @jax.jit
    def losses(phase):
        batch = footprint.sample_batch(jax.random.key(phase), config, n, phase=phase)
        return footprint.problem_losses(model, batch, config)[0]

    loss = np.stack([np.asarray(losses(p), float) for p in range(config.stride)])
    select = selection.SelectionTrainConfig(**SELECTION)
    indexer = selection.SelectionModel(
        pooling_logits=jnp.zeros((1, 4)),
        index_logits=jnp.log(jnp.asarray(INDEX_WEIGHTS))[None],
        log_gain=jnp.zeros(1),
    )
    miss = 1.0 - selection.selected_fraction(select, indexer, n)
    return {
        "footprint_loss": loss.mean(axis=1),
        "footprint_loss_sd": loss.std(axis=1),
        "miss": miss,
        "samples": n,
    }


def predict(samples: int, results: dict) -> dict:
    """theory.footprint_flat_retrieval (§9.4.1) and theory.topk_phase_miss_probability (§9.5)."""
    del samples, results
    f = FOOTPRINT
    m = theory.footprint_flat_retrieval(
        f["stride"], f["window"], f["chunks"], f["carry_gain"], f["decoy_gain"]
    )
    n = f["chunks"]
    miss = theory.topk_phase_miss_probability(
        INDEX_WEIGHTS, SELECTION["chunks"], SELECTION["topk"], SELECTION["dim"]
    )
    return {"footprint_loss": n / (n - 1) * (1 - m) ** 2, "miss": miss}


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per phase, within 4 standard errors of the Monte Carlo (plus 1e-3 relative for the
    footprint's d = 10^6 against d = inf)."""
    out = []
    n = results["samples"]
    f = FOOTPRINT
    where = (
        f"s={f['stride']} W={f['window']} N={f['chunks']} g={f['carry_gain']} "
        f"g_D={f['decoy_gain']}, mean pooling, d=1e6; Monte Carlo, {n} facts"
    )
    pairs = zip(predictions["footprint_loss"], results["footprint_loss"], results["footprint_loss_sd"], strict=True)
    for phase, (p, measured, sd) in enumerate(pairs):
        out.append(Row(
            "footprint per-phase loss N/(N-1)(1-M)^2", f"{where}, phase {phase}",
            kind="prediction", predicted=float(p), sgd=float(measured),
            tolerance=(4 * sd / math.sqrt(n)) / p + 1e-3,
        ))
    s = SELECTION
    for phase, (p, measured) in enumerate(zip(predictions["miss"], results["miss"], strict=True)):
        se = math.sqrt(max(p * (1 - p), 1e-4) / n)
        out.append(Row(
            "selection miss probability P(rank > k)",
            f"s={s['stride']} N={s['chunks']} k={s['topk']} d_I={s['dim']}, indexer weights "
            f"0.4 0.3 0.2 0.1; Monte Carlo, {n} needles, phase {phase}",
            kind="prediction", predicted=float(p), sgd=float(measured), tolerance=4 * se, floor=1.0,
        ))
    return out


EXPERIMENT = Experiment("footprint_selection", run, predict, rows, sizes=SIZES)

"""Figure 8, operators: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig
from weakspots.sims.experiments._common import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    Size,
    base_config,
    cached,
    row,
    support_prediction,
    train,
)

GRAM_OPERATORS = ("softmax_pool", "mean_pool", "linear")
KEY_OPERATORS = ("max_pool", "low_rank", "deepseek_v4")


def _operators(size: Size) -> tuple[str, ...]:
    return GRAM_OPERATORS + (KEY_OPERATORS if size.real_keys else ())


def _base(size: Size) -> TrainConfig:
    # Only the final evaluation is reported, and evaluating never touches a run's random
    # stream, so one evaluation at the end gives the same numbers (bit for bit): a
    # real-key operator redraws its held-out keys (s * eval_samples needles of N s d
    # numbers) at every evaluation, which at `eval_every=10` costs more than training.
    return base_config(size, eval_every=size.steps)


def configs_operators(size: Size) -> list[TrainConfig]:
    """Every operator of this size at each of size.seeds seeds, evaluated once at the end."""
    from weakspots.sims.analysis import operator_configs

    runs = operator_configs(_base(size), _operators(size), range(size.seeds))
    return [c for configs in runs.values() for c in configs]


def run_operators(size: Size, store_dir=None) -> dict:
    """delta_max, psc and mean accuracy of each compression operator, same budget, over seeds."""
    from weakspots.sims.analysis import compare_operators

    def compute():
        ops = _operators(size)
        out = compare_operators(_base(size), ops, list(range(size.seeds)), train=train)
        return {
            "operators": list(ops),
            "results": out,
            "skipped": [o for o in KEY_OPERATORS if o not in ops],
        }

    return cached(store_dir, "run", "operators", size, compute)


TOLERANCE = 0.1  # absolute, on delta_max and mean accuracy where no interval is predicted
SUPPORT_TOLERANCE = 0.5 / 8  # relative: the seed-mean support size within half a phase of s
NOISE_LEVEL = 0.95  # the mean_pool row's tolerance: this interval of the seed mean


def predict_operators(size: Size, results: dict, store_dir=None) -> dict:
    """softmax_pool: the most probable k-state (THEORY 6.4) at d = 64; mean_pool: uniform pooling;
    deepseek_v4: uniform pooling of the unit-normalised key (theory.operators).

    mean_pool learns no pooling, so its delta_max is the held-out binomial error of s equal
    phase accuracies (theory.delta_max_distribution with no pooling part): the prediction is
    its expected value, the tolerance the wider side of the predicted 95% interval of the
    mean over this size's seeds.

    deepseek_v4 (only trained at sizes with real-key operators; the prediction costs
    milliseconds, so it is made at every size): at the canonical config its uniform pooling
    is stable (theory.normalised_growth_rate < 0: every zero-sum mode of `ape` decays;
    N_c far above N), so the support is all s phases and every phase has the normalised
    key's uniform accuracy (theory.normalised_phase_accuracy, not mean_pool's: the norm
    narrows the needle's spread). Its delta_max is predicted at the same held-out binomial
    floor as mean_pool's, with its own accuracy: theory.noise.noise_floor models
    softmax_pool's SGD fluctuations and does not apply, so the pooling logits' own SGD
    jitter about the stable point is left out of this floor. The prediction assumes the
    gate and value projections stay at their start (SGD trains them too). Checked (seed 0,
    600 steps, 16384 fresh needles): the sim at its start 0.706 (predicted 0.705); trained
    0.697 with `ape` near uniform (phase sd of its logits 0.006); resetting `ape` or `wgate`
    changes nothing (0.697), resetting `wkv` to I restores 0.707: the ~0.01 shortfall is the
    value projection's drift (|wkv - I|_F = 4.4), which this prediction leaves out.
    """

    def compute():
        sizes, probs, _ = support_prediction(STRIDE, CHUNKS, GAIN, size.support_samples)
        k = int(sizes[np.argmax(probs)])
        out = {}
        for name, acc in (
            ("softmax_pool", theory.phase_accuracy_profile(STRIDE, CHUNKS, k, DIM, 1e-3)),
            ("mean_pool", theory.phase_accuracy(np.full(STRIDE, 1 / STRIDE), GAIN, CHUNKS, DIM)),
        ):
            out[name] = {
                "delta_max": float(theory.delta_max(acc)),
                "delta_max_tolerance": TOLERANCE,
                "psc": float(theory.psc(acc)),
                "mean_accuracy": float(np.mean(acc)),
            }
        growth = float(theory.normalised_growth_rate(STRIDE, CHUNKS, GAIN))
        acc = theory.normalised_phase_accuracy(np.full(STRIDE, 1 / STRIDE), CHUNKS, DIM)
        out["deepseek_v4"] = {
            "psc": float(theory.psc(acc)),
            "mean_accuracy": float(np.mean(acc)),
            "growth_rate": growth,
            "softmax_pool_growth_rate": float(theory.growth_rate(STRIDE, CHUNKS, GAIN)),
            "critical_chunks": theory.normalised_critical_chunks(STRIDE, GAIN),
            "unstable_gains": theory.normalised_unstable_gains(STRIDE, CHUNKS),
        }
        if growth < 0.0:  # stable uniform pooling keeps every phase; else no prediction here
            out["deepseek_v4"]["support_size"] = float(STRIDE)
        for name in ("mean_pool", "deepseek_v4"):
            uniform = out[name]["mean_accuracy"]
            floor = theory.delta_max_distribution(
                0.0,
                np.sqrt(uniform * (1 - uniform) / size.eval_samples),
                STRIDE,
                seeds=size.seeds,
                level=NOISE_LEVEL,
            )
            low, high = floor["mean_of_seeds_interval"]
            out[name]["delta_max"] = floor["delta_max_mean"]
            out[name]["delta_max_tolerance"] = max(
                high - floor["delta_max_mean"], floor["delta_max_mean"] - low
            )
            out[name]["noise_floor"] = floor
        return out

    return cached(store_dir, "predict", "operators", size, compute)


def rows_operators(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for op, pred in predictions.items():
        res = results["results"].get(op, {})
        if "delta_max" not in res:
            continue
        # support_size needs sims.analysis.aggregate to report it; the row appears once it does.
        metrics = [m for m in ("delta_max", "mean_accuracy", "support_size") if m in pred]
        for metric in (m for m in metrics if m in res):
            rows.append(
                row(
                    f"{metric} ({op})",
                    "s=8 N=64 d=64 gain=16, 600 SGD steps; mean over seeds",
                    pred[metric],
                    sgd=res[metric]["mean"],
                    tolerance=pred.get(
                        f"{metric}_tolerance",
                        SUPPORT_TOLERANCE if metric == "support_size" else TOLERANCE,
                    ),
                    floor=1.0,
                )
            )
    return rows

"""Decoder runs in a sweep (`kind = "lm"` in `sims.sweep`): one batch trained, evaluated, summarised."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.decoder.evaluate import EVAL_CHUNK, evaluate_many, phase_summary
from weakspots.sims.decoder.train import LMHyper, held_out_recall, run_batch

METRICS = (
    "mean_accuracy", "delta_max", "delta_max_noise_floor", "interval_gap", "psc",
    "phase_accuracy", "phase_accuracy_by_key_phase", "worst_phase",
)  # fmt: skip
"""The phase metrics of `evaluate.phase_summary` a sweep stores per run (and, for configs with
an indexer, `indexer_recall`: its mean over the indexed layers on the held-out batch)."""


def bytes_per_run(config: LMConfig) -> int:
    """A rough upper bound on one run's training memory (float32 activations, eval chunk)."""
    width = config.d_model * (4 + 2 * config.mlp) + config.task.vocab
    attention = config.heads * 2 * config.seq_len
    per_token = 4 * 3 * (config.layers * (width + attention))
    return per_token * config.seq_len * (config.batch + EVAL_CHUNK)


def execute(configs: Sequence[LMConfig], padded: int) -> list[tuple[dict, dict]]:
    """Train `configs` (one structure) as one batch padded to `padded` runs; `(metrics, trajectory)` each.

    A run whose loss stops being finite is returned with no metrics, `diverged = True` and
    its reason in `failure` (as the toy's sweep stores it).
    """
    configs = list(configs)
    hyper = LMHyper.stack(configs + [configs[-1]] * (padded - len(configs)))
    static = configs[0].static
    history, params, step_loss = run_batch(static, hyper, stop_on_divergence=False)
    seeds = [c.seed for c in configs] + [configs[-1].seed] * (padded - len(configs))
    outcomes = evaluate_many(static, params, seeds=seeds)
    out = []
    for r, config in enumerate(configs):
        trajectory = {
            "steps": history.steps[r],
            "loss": history.loss[r],
            "eval_loss": history.eval_loss[r],
            "eval_accuracy": history.eval_accuracy[r],
            "step_loss": step_loss[r],
        }
        bad = ~np.isfinite(step_loss[r])
        if bad.any():
            step = int(np.argmax(bad)) + 1
            out.append(
                ({"diverged": True, "failure": f"training diverged: loss not finite at step {step}"},
                 trajectory)
            )  # fmt: skip
            continue
        summary = phase_summary(config, outcomes[r])
        metrics = {name: summary[name] for name in METRICS}
        metrics["same_window_accuracy"] = summary["straddle_accuracy"]["same_window"]["accuracy"]
        metrics["straddling_accuracy"] = summary["straddle_accuracy"]["straddling"]["accuracy"]
        metrics["near_query_accuracy"] = summary["near_query"]["accuracy"]
        metrics["final_loss"] = float(history.loss[r, -1])
        if static.indexed:
            run = jax.tree.map(lambda x, r=r: x[r], params)
            metrics["indexer_recall"] = float(np.mean(np.asarray(held_out_recall(static, run))))
        metrics["diverged"] = False
        out.append((metrics, trajectory))
    return out

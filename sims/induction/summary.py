"""End-state summaries of induction runs, shared by SGD and the flow."""

from __future__ import annotations

import numpy as np

CONCENTRATED = 0.99  # Theorem 2's end state: key >= this at r_h, value >= this at r_h + 1


def end_state(key_weights, value_weights) -> dict:
    """positions r_h (argmax of each head's key gate), whether every head is one-hot at
    (r_h, r_h + 1) with a non-final r_h, the distinct positions and the uncovered ones.

    key_weights, value_weights: (m, S) (gates averaged over windows for log-linear gates)."""
    k, v = np.asarray(key_weights, float), np.asarray(value_weights, float)
    s = k.shape[-1]
    positions = np.argmax(k, axis=-1)
    nonfinal = positions <= s - 2
    value_next = np.take_along_axis(v, np.minimum(positions + 1, s - 1)[:, None], axis=-1)[:, 0]
    key_top = np.max(k, axis=-1)
    one_hot = nonfinal & (key_top >= CONCENTRATED) & (value_next >= CONCENTRATED)
    covered = set(positions[nonfinal].tolist())
    return {
        "positions": positions.tolist(),
        "concentrated": bool(one_hot.all()),
        "key_at_position": key_top.tolist(),
        "value_at_next": value_next.tolist(),
        "distinct": len(covered),
        "uncovered": [r for r in range(s - 1) if r not in covered],
    }


def run_summary(history, run: int = 0) -> dict:
    """One run of a flow's or SGD's history (`flow.FlowHistory`, `train.TrainHistory`) as
    plain data: key_weights, value_weights (H, S) at the end, the end state, loss,
    phase_accuracy, delta_max, and along the run times, loss, key and value weights and
    effective offsets."""
    w = history.weights[run]
    acc = history.phase_accuracy[run]
    return {
        "model": "induction",
        "gate": history.config.gate,
        "seed": history.seeds[run],
        "key_weights": w[-1, :, 0].tolist(),
        "value_weights": w[-1, :, 1].tolist(),
        **end_state(w[-1, :, 0], w[-1, :, 1]),
        "loss": float(history.loss[run, -1]),
        "phase_accuracy": acc.tolist(),
        "delta_max": float(acc.max() - acc.min()),
        "times": history.times.tolist(),
        "loss_along": history.loss[run].tolist(),
        "key_weights_along": w[:, :, 0].tolist(),
        "value_weights_along": w[:, :, 1].tolist(),
        "offsets_along": history.offsets[run].tolist(),
        "wall_seconds": history.wall_seconds,
    }

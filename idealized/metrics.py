"""Phase metrics (THEORY.md section 4): computed on host arrays, reported per phase and aggregated."""

from __future__ import annotations

import math

import numpy as np

WILSON_Z95 = 1.959963984540054


def wilson_interval(accuracy, samples: int, z: float = WILSON_Z95) -> np.ndarray:
    """95% Wilson score interval for binomial proportions; returns `(..., 2)` of (low, high)."""
    p = np.asarray(accuracy, dtype=np.float64)
    n = float(samples)
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return np.stack([centre - half, centre + half], axis=-1)


def delta_max(accuracy) -> float:
    """Best minus worst phase accuracy."""
    accuracy = np.asarray(accuracy)
    return float(accuracy.max() - accuracy.min())


def phase_sensitivity(accuracy) -> float:
    """Phase Sensitivity Coefficient `psc = var_phi(acc) / mean_phi(acc)` (population variance)."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    return float(accuracy.var() / accuracy.mean()) if accuracy.mean() > 0 else math.inf


def harmonic_spectrum(accuracy) -> np.ndarray:
    """`|rfft(acc)| / s` over phases: entry 0 is the mean, entry k the k-th harmonic's amplitude."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    return np.abs(np.fft.rfft(accuracy)) / accuracy.shape[-1]


def phase_buckets(stride: int) -> dict[str, list[int]]:
    """Window boundary (phases 0 and s-1), edge (1 and s-2), centre (the rest)."""
    boundary = sorted({0, stride - 1})
    edge = sorted({1, stride - 2} - set(boundary)) if stride > 2 else []
    centre = [j for j in range(stride) if j not in boundary and j not in edge]
    return {"boundary": boundary, "edge": edge, "centre": centre}


def bucket_accuracy(accuracy) -> dict[str, float | None]:
    accuracy = np.asarray(accuracy, dtype=np.float64)
    return {
        name: (float(accuracy[phases].mean()) if phases else None)
        for name, phases in phase_buckets(accuracy.shape[-1]).items()
    }


def support_size(pooling_weights) -> np.ndarray:
    """Per head, the phases whose (normalised, absolute) pooling weight exceeds `1/(2s)`."""
    w = np.abs(np.asarray(pooling_weights, dtype=np.float64))
    w = w / np.sum(w, axis=-1, keepdims=True)
    return np.sum(w > 0.5 / w.shape[-1], axis=-1)


def specialization_index(pooling_weights) -> np.ndarray:
    """Per head, `1 - entropy(alpha) / log(s)`: 0 for uniform pooling, 1 for a single phase."""
    w = np.abs(np.asarray(pooling_weights, dtype=np.float64))
    w = w / np.sum(w, axis=-1, keepdims=True)
    entropy = -np.sum(np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0), axis=-1)
    return 1.0 - entropy / np.log(w.shape[-1]) if w.shape[-1] > 1 else np.zeros(w.shape[:-1])


def phase_report(accuracy, samples: int) -> dict:
    """Every phase metric of one per-phase accuracy vector, as plain Python numbers."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    mean = float(accuracy.mean())
    return {
        "phase_accuracy": accuracy.tolist(),
        "phase_accuracy_ci": wilson_interval(accuracy, samples).tolist(),
        "mean_accuracy": mean,
        "delta_max": delta_max(accuracy),
        "psc": phase_sensitivity(accuracy),
        "psc_std": float(accuracy.std() / mean) if mean > 0 else math.inf,
        "harmonic_spectrum": harmonic_spectrum(accuracy).tolist(),
        "buckets": bucket_accuracy(accuracy),
    }

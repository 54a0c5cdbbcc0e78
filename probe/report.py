"""Per-phase statistics of a probe's scored trials (the report of `weakspots probe`).

For each stride s, trials are grouped by needle phase (answer index mod s) and by tail
phase (prompt length mod s). Per phase: accuracy and its 95% Wilson interval
(`idealized.metrics.wilson_interval`, at the phase's own count). Per profile:
`delta_max` (`metrics.delta_max`) with a 95% percentile interval from resampling the
paired groups (blocks) with replacement, and a permutation p-value for "no phase
effect" with the phase labels shuffled within strata of the other phase (the needle
phases among trials of one tail phase, and the reverse), so a weak spot at one phase
does not pass for noise at the other; `psc`
(`metrics.phase_sensitivity`), the harmonic spectrum (`metrics.harmonic_spectrum`) and
its dominant period `s / k*` (k* the largest harmonic above 0), and the window buckets
(`metrics.bucket_accuracy`). Resampling is seeded, so a report is the same for the
same trials and seed.
"""

from __future__ import annotations

import math

import numpy as np

from weakspots.idealized import metrics

RESAMPLES = 2000
PERMUTATIONS = 2000


def _per_phase(labels: np.ndarray, correct: np.ndarray, s: int):
    samples = np.bincount(labels, minlength=s)
    hits = np.bincount(labels, weights=correct.astype(np.float64), minlength=s)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.where(samples > 0, hits / np.maximum(samples, 1), np.nan)
    return accuracy, samples


def _spread(accuracy: np.ndarray) -> np.ndarray:
    """delta_max over the phases observed, along the last axis (NaN where fewer than two)."""
    present = np.isfinite(accuracy)
    high = np.where(present, accuracy, -np.inf).max(axis=-1)
    low = np.where(present, accuracy, np.inf).min(axis=-1)
    return np.where(present.sum(axis=-1) >= 2, high - low, np.nan)


def profile(labels, correct, blocks, s: int, seed: int = 0, strata=None) -> dict:
    """Every statistic of one per-phase profile (module docstring), as plain Python values.

    `labels`: phase of each trial `(n,)` in `range(s)`; `correct` `(n,)` bool; `blocks`
    `(n,)` the paired group of each trial (the unit of resampling); `strata` `(n,)`: the
    permutation shuffles labels within each stratum (default: within blocks).
    """
    labels = np.asarray(labels, np.int64)
    correct = np.asarray(correct, bool)
    blocks = np.unique(np.asarray(blocks), return_inverse=True)[1]
    accuracy, samples = _per_phase(labels, correct, s)
    ci = np.full((s, 2), np.nan)
    for j in range(s):
        if samples[j]:
            ci[j] = metrics.wilson_interval(accuracy[j], int(samples[j]))
    # at 0 or 1 hits the Wilson bound is exactly 0 or 1; the formula leaves rounding there
    ci[:, 0] = np.where(accuracy == 0.0, 0.0, ci[:, 0])
    ci[:, 1] = np.where(accuracy == 1.0, 1.0, ci[:, 1])
    observed = float(_spread(accuracy))
    rng = np.random.default_rng([seed, s, 0])
    out = {
        "phase_accuracy": _list(accuracy),
        "phase_accuracy_ci": [_list(c) for c in ci],
        "phase_samples": samples.tolist(),
        "mean_accuracy": float(correct.mean()) if correct.size else None,
        "delta_max": _num(observed),
        "delta_max_ci": None,
        "delta_max_p": None,
        "worst_phase": int(np.nanargmin(accuracy)) if np.isfinite(accuracy).any() else None,
        "best_phase": int(np.nanargmax(accuracy)) if np.isfinite(accuracy).any() else None,
        "psc": None,
        "harmonic_spectrum": None,
        "dominant_period": None,
        "buckets": None,
    }
    if correct.size == 0 or not math.isfinite(observed):
        return out
    G = int(blocks.max()) + 1
    H = np.zeros((G, s))
    N = np.zeros((G, s))
    np.add.at(H, (blocks, labels), correct.astype(np.float64))
    np.add.at(N, (blocks, labels), 1.0)
    weights = rng.multinomial(G, np.full(G, 1.0 / G), size=RESAMPLES).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = _spread(np.where(weights @ N > 0, (weights @ H) / (weights @ N), np.nan))
    boot = boot[np.isfinite(boot)]
    if boot.size:
        out["delta_max_ci"] = [float(q) for q in np.quantile(boot, [0.025, 0.975])]
    strata = blocks if strata is None else np.unique(np.asarray(strata), return_inverse=True)[1]
    order = np.argsort(strata, kind="stable")
    exceed = 0
    for _ in range(PERMUTATIONS):
        shuffled = np.lexsort((rng.random(labels.size), strata))
        permuted = np.empty_like(labels)
        permuted[order] = labels[shuffled]
        exceed += bool(_spread(_per_phase(permuted, correct, s)[0]) >= observed - 1e-12)
    out["delta_max_p"] = (1 + exceed) / (1 + PERMUTATIONS)
    if np.all(samples > 0):
        out["psc"] = _num(metrics.phase_sensitivity(accuracy))
        spectrum = metrics.harmonic_spectrum(accuracy)
        out["harmonic_spectrum"] = spectrum.tolist()
        if s >= 2 and np.max(spectrum[1:]) > 1e-12 * max(spectrum[0], 1.0):  # flat: no period
            out["dominant_period"] = s / (int(np.argmax(spectrum[1:])) + 1)
        out["buckets"] = metrics.bucket_accuracy(accuracy)
    return out


def grid(labels, correct, axis_values, s: int) -> dict:
    """Needle-phase accuracy per value of a grid axis (depth or context): `(values, s)`."""
    axis_values = np.asarray(axis_values)
    values = sorted(set(axis_values.tolist()) - {None})
    rows, counts = [], []
    for v in values:
        mask = axis_values == v
        accuracy, samples = _per_phase(np.asarray(labels)[mask], np.asarray(correct)[mask], s)
        rows.append(_list(accuracy))
        counts.append(samples.tolist())
    return {"values": values, "phase_accuracy": rows, "phase_samples": counts}


def phase_report(scored: list[dict], strides, seed: int = 0) -> dict:
    """The report's statistics of `scored` trials (dicts with `needle_index`, `prompt_length`,
    `correct`, `block`, `context`, `depth`, and `logprob`: the greedy continuation's summed
    token log-probability, None where the backend gave none) for each stride:
    `{"by_stride": {s: ...}}` plus the first stride's keys at the top, tail-phase ones
    prefixed `tail_`; `phase_mean_logprob` is the mean `logprob` per phase (None where none)."""
    needle = np.asarray([t["needle_index"] for t in scored], np.int64)
    length = np.asarray([t["prompt_length"] for t in scored], np.int64)
    correct = np.asarray([bool(t["correct"]) for t in scored], bool)
    blocks = np.asarray([t["block"] for t in scored], np.int64)
    depth = [t["depth"] for t in scored]
    context = [t["context"] for t in scored]
    logprob = np.asarray(
        [np.nan if t.get("logprob") is None else t["logprob"] for t in scored], np.float64
    )
    by_stride = {}
    for s in strides:
        s = int(s)
        stats = profile(needle % s, correct, blocks, s, seed, strata=length % s)
        tail = profile(length % s, correct, blocks, s, seed + 1, strata=needle % s)
        stats.update({f"tail_{k}": v for k, v in tail.items() if k != "mean_accuracy"})
        stats["phase_mean_logprob"] = _mean_by(needle % s, logprob, s)
        stats["tail_phase_mean_logprob"] = _mean_by(length % s, logprob, s)
        stats["by_depth"] = grid(needle % s, correct, depth, s)
        stats["by_context"] = grid(needle % s, correct, context, s)
        by_stride[str(s)] = stats
    return {"stride": int(strides[0]), **by_stride[str(int(strides[0]))], "by_stride": by_stride}


def _mean_by(labels, values, s: int) -> list:
    present = np.isfinite(values)
    out = []
    for j in range(s):
        mask = present & (labels == j)
        out.append(float(values[mask].mean()) if mask.any() else None)
    return out


def _num(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _list(values) -> list:
    return [_num(float(v)) for v in values]

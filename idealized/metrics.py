"""Phase metrics (docs/theory.md §4): computed on host arrays, per phase and aggregated."""

from __future__ import annotations

import functools
import math
import statistics

import numpy as np

WILSON_Z95 = 1.959963984540054


def wilson_interval(accuracy, samples, z: float = WILSON_Z95) -> np.ndarray:
    """95% Wilson score interval for binomial proportions; returns `(..., 2)` of (low, high).

    `samples`: one count for every proportion, or an array of counts broadcast against
    `accuracy` (each proportion at its own count).
    """
    p = np.asarray(accuracy, dtype=np.float64)
    n = float(samples) if np.ndim(samples) == 0 else np.asarray(samples, dtype=np.float64)
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return np.stack([centre - half, centre + half], axis=-1)


def paired_interval(differences, z: float = WILSON_Z95) -> tuple[float, float, float]:
    """Mean of paired differences `(n,)` (such as per-needle 0/1 outcomes, clean minus
    intervened) and its normal interval `mean +- z sd / sqrt(n)` (sample sd).

    Zero width with one difference; NaN with none. Returns `(mean, lo, hi)`.
    """
    d = np.asarray(differences, dtype=np.float64).ravel()
    if d.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(d.mean())
    half = z * float(d.std(ddof=1)) / math.sqrt(d.size) if d.size > 1 else 0.0
    return mean, mean - half, mean + half


@functools.cache
def student_t_quantile(probability: float, df: int) -> float:
    """The `probability` quantile of Student's t with `df` >= 1 (integer) degrees of freedom.

    Bisection on the closed-form distribution function for integer `df` (Abramowitz and
    Stegun 26.7.3-4); accurate to about 1e-12.
    """
    if not 0.0 < probability < 1.0:
        raise ValueError(f"probability must be in (0, 1), got {probability}")
    if int(df) != df or df < 1:
        raise ValueError(f"df must be an integer >= 1, got {df}")
    if probability < 0.5:
        return -student_t_quantile(1.0 - probability, df)
    low, high = 0.0, 1.0
    while _student_t_cdf(high, int(df)) < probability:
        low, high = high, 2.0 * high
    for _ in range(200):
        mid = 0.5 * (low + high)
        if _student_t_cdf(mid, int(df)) < probability:
            low = mid
        else:
            high = mid
        if high - low <= 1e-13 * high:
            break
    return 0.5 * (low + high)


def _student_t_cdf(t: float, df: int) -> float:
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd: (2/pi) [theta + sin cos (1 + 2/3 c^2 + 2.4/(3.5) c^4 + ...)]
        term, series = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            series += term
        two_sided = 2.0 / math.pi * (theta + math.sin(theta) * math.cos(theta) * series)
    else:  # even: sin (1 + 1/2 c^2 + 1.3/(2.4) c^4 + ...)
        term, series = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            series += term
        two_sided = math.sin(theta) * series
    return 0.5 * (1.0 + two_sided)


def mean_interval(
    values, low: float = -math.inf, high: float = math.inf, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Mean of `values` (n,) and its Student-t interval, intersected with `[low, high]`.

    `[low, high]` is the range the statistic can take (`delta_max` lies in [0, 1], `psc`
    is >= 0): cutting the interval there keeps its coverage. Returns `(mean, lo, hi)`;
    with one value there is no spread to measure and `lo`, `hi` are NaN.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    t = student_t_quantile(0.5 + confidence / 2, v.size - 1)
    half = t * float(v.std(ddof=1)) / math.sqrt(v.size)
    return mean, float(max(mean - half, low)), float(min(mean + half, high))


def proportion_interval(
    values, samples: int, confidence: float = 0.95
) -> tuple[float, float, float]:
    """Mean of per-run proportions `values` (n,) and an interval for it inside [0, 1].

    Each run's proportion is measured on `samples` trials (held-out needles). The Wilson
    score interval at the effective sample size of Korn and Graubard (1998):
    `n_eff = p (1 - p) / Var(p)`, with `Var(p)` the between-run variance of the mean
    (it holds the runs' spread and their sampling noise), at most the `n * samples`
    trials pooled, and Student's t with n - 1 degrees of freedom in place of z. With
    one run, or runs that agree exactly, it is the Wilson interval of the pooled trials.
    Returns `(mean, lo, hi)`.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    p, n = float(v.mean()), v.size
    trials = float(n * samples)
    if n < 2:
        z, n_eff = statistics.NormalDist().inv_cdf(0.5 + confidence / 2), trials
    else:
        z = student_t_quantile(0.5 + confidence / 2, n - 1)
        var_mean = float(v.var(ddof=1)) / n
        n_eff = trials
        if var_mean > 0 and 0 < p < 1:
            n_eff = min(p * (1 - p) / var_mean, trials)
    lo, hi = wilson_interval(p, n_eff, z)
    return p, max(float(lo), 0.0), min(float(hi), 1.0)


def runs_interval(
    values, low: float = -math.inf, high: float = math.inf, samples: int | None = None
) -> tuple[float, float, float]:
    """Mean over runs of `values` (n,) and its 95% interval: a proportion measured on `samples`
    trials per run by `proportion_interval`, anything else (`samples=None`) by
    `mean_interval` inside `[low, high]`. Returns `(mean, lo, hi)`."""
    if samples is not None:
        return proportion_interval(values, samples)
    return mean_interval(values, low, high)


def cluster_interval(values, samples: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """Mean of per-cluster proportions `values` (n,) and its interval, the clusters (seeds,
    each scored on its own `samples` trials) as the independent units.

    The Student-t interval over the clusters (`mean_interval` inside [0, 1]), widened where
    needed to hold the Wilson interval of the `n * samples` trials pooled: the clusters'
    spread holds their random effects and their sampling noise, and the pooled trials' noise
    bounds it from below when the clusters agree (at the ceiling). Near nominal coverage where
    `proportion_interval` (Wilson at an effective size with t in place of z) is conservative
    for few clusters. One value: the Wilson interval of its trials. Returns `(mean, lo, hi)`.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    mean, lo, hi = mean_interval(v, 0.0, 1.0, confidence)
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    pooled_lo, pooled_hi = wilson_interval(mean, v.size * samples, z)
    if v.size < 2:
        return mean, max(float(pooled_lo), 0.0), min(float(pooled_hi), 1.0)
    return mean, max(min(lo, float(pooled_lo)), 0.0), min(max(hi, float(pooled_hi)), 1.0)


@functools.cache
def studentized_range_quantile(probability: float, groups: int, df: int) -> float:
    """The `probability` quantile of the studentised range of `groups` means with `df` degrees
    of freedom for the variance (Tukey's q; `scipy.stats.studentized_range`)."""
    from scipy.stats import studentized_range

    return float(studentized_range.ppf(probability, groups, df))


def cluster_range_floor(values, confidence: float = 0.95) -> float:
    """The `confidence` quantile of `max - min` of the column means of `values` `(R, s)` when
    every column has the same mean, with the R rows (seeds) as clusters.

    The rows are blocks of a two-way layout `values[r, p] = mu + a_r + b_p + e_rp` (a seed's
    shift `a_r` cancels in differences between columns); the columns' spread is the
    interaction mean square `MS = sum (v_rp - v_r. - v_.p + v..)^2 / ((R - 1)(s - 1))`, and
    the floor is Tukey's `q(confidence; s, (R - 1)(s - 1)) sqrt(MS / R)`. A measured range
    above it is beyond the seeds' noise at that level. NaN with fewer than two rows or columns.
    """
    v = np.asarray(values, dtype=np.float64)
    runs, groups = v.shape
    if runs < 2 or groups < 2:
        return math.nan
    residual = v - v.mean(axis=1, keepdims=True) - v.mean(axis=0, keepdims=True) + v.mean()
    df = (runs - 1) * (groups - 1)
    spread = float(np.sum(residual**2)) / df
    return studentized_range_quantile(confidence, groups, df) * math.sqrt(spread / runs)


def delta_max(accuracy):
    """Best minus worst phase accuracy, `max_phi acc - min_phi acc` (docs/theory.md §4).

    accuracy: (..., s). Returns a float for one vector, else an array (...).
    """
    accuracy = np.asarray(accuracy)
    spread = accuracy.max(axis=-1) - accuracy.min(axis=-1)
    return float(spread) if spread.ndim == 0 else spread


def phase_sensitivity(accuracy):
    """Phase Sensitivity Coefficient `psc = var_phi(acc) / mean_phi(acc)` (population variance;
    docs/theory.md §4), inf where the mean is 0.

    accuracy: (..., s). Returns a float for one vector, else an array (...).
    """
    return _over_mean(np.var, accuracy)


def phase_sensitivity_std(accuracy):
    """`std_phi(acc) / mean_phi(acc)` (docs/theory.md §4), inf where the mean is 0.

    accuracy: (..., s). Returns a float for one vector, else an array (...).
    """
    return _over_mean(np.std, accuracy)


def _over_mean(spread, accuracy):
    accuracy = np.asarray(accuracy, dtype=np.float64)
    mean = accuracy.mean(axis=-1)
    ratio = np.where(mean > 0, spread(accuracy, axis=-1) / np.where(mean > 0, mean, 1.0), np.inf)
    return float(ratio) if ratio.ndim == 0 else ratio


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
        "psc_std": phase_sensitivity_std(accuracy),
        "harmonic_spectrum": harmonic_spectrum(accuracy).tolist(),
        "buckets": bucket_accuracy(accuracy),
    }

"""The per-phase evaluation protocol of the decoders (the paper's, on associative recall).

The evaluation set places the first-queried fact at every position its value can take,
`eval_samples` sequences each, the other facts uniform around it (`recall.placed_starts`).
A trained run is scored on its own sequences, drawn from `eval_seed` and the run's training
seed (`evaluation_set(..., run=seed)`, `evaluate_many(..., seeds=)`), so the seeds of a
design are independent clusters of outcomes; the shared set (`run=None`, from `eval_seed`
alone) serves the interventions, which compare worlds of one run on the same sequences.
The queried fact's positions, hence every label below, are the same in every set. A run's
outcome is, per sequence, whether it predicts every token of that value. `phase_summary`
resolves the outcomes by the value's phase `p mod s` (the stride of the compressed layers),
by the key's phase, by straddling (the fact crosses a window boundary) and by absolute
position, and reuses `idealized.metrics` for `delta_max`, `psc`, the harmonic spectrum and
the buckets. Intervals: one run, 95% Wilson; several runs, the seeds as clusters (a Student-t
interval over the per-seed accuracies, `seed_intervals`; `delta_max` with a t interval over
the seeds' differences and Tukey's noise floor over the seeds, `metrics.cluster_range_floor`).

Facts in the last `query_reach` tokens of the context are within the uncompressed
(sliding or local) window of the first query, so the query can read them without the
compressed entries. Trained decoders answer those differently (less well, in the runs of
`sims/experiments/decoder/position/runs/`), and their share differs between phases, so the phase statistics count
only the facts beyond that reach; the near ones are reported on their own (`near_query`)
and in `position_accuracy`. Compressed design and dense control share the rule (it
depends on the layout and windows, not on the operator).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized import metrics
from weakspots.idealized.decoder.config import LMConfig, RecallTask
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.idealized.decoder.recall import placed_batch, placed_starts, value_starts
from weakspots.sims.decoder.forward import first_query_correct, jit

EVAL_CHUNK = 128  # sequences per forward pass in evaluation (bounds memory)
EVALUATION = "own sequences per seed"  # how `LMResult.outcomes` are drawn (kept in checkpoints)
NOISE_FLOOR_DRAWS = 20000
NOISE_FLOOR_LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class EvaluationSet:
    """Fact starts `(M, P)` (fact 0 queried first) and the first fact's key and value starts `(M,)`."""

    starts: np.ndarray
    key_start: np.ndarray
    value_start: np.ndarray


def evaluation_set(
    task: RecallTask, samples: int, seed: int, run: int | None = None
) -> EvaluationSet:
    """`samples` placements for every value start of `recall.value_starts(task)`.

    From `seed` alone (`run=None`: the shared set), or for the run trained with seed `run`
    from child `run` of `seed`'s `numpy.random.SeedSequence` (its own set). `key_start` and
    `value_start` are the same for every `run`; the other facts' placements differ. Drawn
    once per argument tuple (cached).
    """
    return _evaluation_set(task, samples, seed, run)


@functools.lru_cache(maxsize=32)
def _evaluation_set(task: RecallTask, samples: int, seed: int, run: int | None) -> EvaluationSet:
    entropy = np.random.SeedSequence(seed, spawn_key=() if run is None else (run,))
    rng = np.random.default_rng(entropy)
    values = np.repeat(value_starts(task), samples)
    starts = np.stack([placed_starts(rng, task, int(v) - task.key_len) for v in values])
    return EvaluationSet(starts, values - task.key_len, values)


def config_evaluation_set(config: LMConfig, run: int | None = None) -> EvaluationSet:
    """`evaluation_set` of `config`'s task, `eval_samples` and `eval_seed` (and `run`)."""
    return evaluation_set(config.task, config.eval_samples, config.eval_seed, run)


def token_key(eval_seed, run=None) -> jax.Array:
    """The PRNG key of the evaluation's token draws (chunk `i` folds in `i`): the shared set's
    (`run=None`) or run `run`'s own (an int or a traced integer)."""
    key = jax.random.key(eval_seed)
    if run is None:
        return jax.random.fold_in(key, 1)
    return jax.random.fold_in(jax.random.fold_in(key, 2), run)


@partial(jit, static_argnums=0)
def _outcomes(config: LMConfig, params: nnx.State, starts, chunk_index, runs):
    def per_run(run_params, run_starts, run):
        key = token_key(config.eval_seed, run)

        def chunk(args):
            rows, index = args
            batch = placed_batch(jax.random.fold_in(key, index), config.task, rows)
            return first_query_correct(config, run_params, batch)

        return jax.lax.map(chunk, (run_starts, chunk_index)).reshape(-1)

    if runs is None:
        return jax.vmap(per_run, in_axes=(0, None, None))(params, starts, None)
    return jax.vmap(per_run)(params, starts, runs)


def _chunked(starts: np.ndarray) -> np.ndarray:
    total = starts.shape[0]
    padded = -(-total // EVAL_CHUNK) * EVAL_CHUNK
    rows = np.concatenate([starts, np.repeat(starts[:1], padded - total, axis=0)])
    return rows.reshape(-1, EVAL_CHUNK, starts.shape[1])


def evaluate_many(
    config: LMConfig, params: nnx.State, seeds: Sequence[int] | None = None
) -> np.ndarray:
    """Outcomes `(R, M)` of stacked runs (leading axis R) on the evaluation set.

    Run `r` is scored on the set of training seed `seeds[r]` (`evaluation_set(..., run=)`,
    placements and tokens its own); with `seeds=None` every run is scored on the shared set.
    """
    config = config.static
    total = config_evaluation_set(config).starts.shape[0]
    if seeds is None:
        rows = jnp.asarray(_chunked(config_evaluation_set(config).starts))
        runs = None
    else:
        rows = jnp.asarray(
            np.stack([_chunked(config_evaluation_set(config, int(s)).starts) for s in seeds])
        )
        runs = jnp.asarray(np.asarray(seeds), jnp.int32)
    index = jnp.arange(rows.shape[-3], dtype=jnp.int32)
    return np.asarray(_outcomes(config, params, rows, index, runs))[:, :total]


def seed_intervals(per_seed, samples) -> np.ndarray:
    """95% intervals `(G, 2)` for the mean over seeds of per-seed accuracies `(R, G)`, each
    seed's on `samples[g]` sequences of group g: the seeds as clusters
    (`metrics.cluster_interval`: Student t over the R seeds, at least the pooled sequences'
    Wilson interval); one seed: the Wilson interval of its sequences. Valid when each seed
    has its own sequences."""
    per_seed = np.asarray(per_seed, np.float64)
    return np.array(
        [
            metrics.cluster_interval(per_seed[:, g], max(int(n), 1))[1:]
            for g, n in enumerate(np.asarray(samples).ravel())
        ]
    ).reshape(per_seed.shape[1], 2)


def clustered(outcomes: np.ndarray, labels: np.ndarray, groups: int) -> dict:
    """Per label in `range(groups)`, runs' outcomes `(R, M)` (labels `(M,)`, the same for every
    run; -1 left out): `accuracy` pooled over runs, `samples` pooled, `per_seed` accuracy
    `(R, groups)` and `ci` with the runs as clusters (`seed_intervals`)."""
    outcomes = np.asarray(outcomes, np.float64).reshape(-1, labels.size)
    keep = labels >= 0
    n = np.bincount(labels[keep], minlength=groups)
    hits = np.stack(
        [np.bincount(labels[keep], weights=o[keep], minlength=groups) for o in outcomes]
    )
    per_seed = hits / np.maximum(n, 1)
    return {
        "accuracy": hits.sum(axis=0) / np.maximum(outcomes.shape[0] * n, 1),
        "samples": outcomes.shape[0] * n,
        "per_seed": per_seed,
        "ci": seed_intervals(per_seed, n),
    }


def grouped(outcomes: np.ndarray, labels: np.ndarray, groups: int) -> dict:
    """Accuracy, samples and Wilson interval of `outcomes` per label in `range(groups)`."""
    samples = np.bincount(labels, minlength=groups)
    hits = np.bincount(labels, weights=outcomes.astype(np.float64), minlength=groups)
    counts = np.maximum(samples, 1)
    accuracy = hits / counts
    return {
        "accuracy": accuracy,
        "samples": samples,
        "ci": metrics.wilson_interval(accuracy, counts),
    }


def delta_max_noise_floor(
    accuracy: float, samples, level: float = NOISE_FLOOR_LEVEL, seed: int = 0
) -> float:
    """The `level` quantile of `delta_max` when every phase has the same true accuracy.

    Phases `i` score `Binomial(samples[i], accuracy) / samples[i]` independently (the
    outcomes of one evaluation); Monte Carlo with `NOISE_FLOOR_DRAWS` draws from `seed`.
    A measured `delta_max` below it is within the noise of the evaluation.
    """
    samples = np.asarray(samples, np.int64)
    rng = np.random.default_rng(seed)
    draws = rng.binomial(samples, accuracy, size=(NOISE_FLOOR_DRAWS, samples.size)) / samples
    return float(np.quantile(draws.max(axis=1) - draws.min(axis=1), level))


def seed_noise_floor(per_seed_accuracy, samples) -> float:
    """The 95% noise floor of `delta_max` of the mean over seeds of per-phase accuracies
    `(R, s)`: the seeds as clusters (`metrics.cluster_range_floor`); one seed, the binomial
    floor of its `samples` per phase (`delta_max_noise_floor`)."""
    a = np.asarray(per_seed_accuracy, np.float64)
    if a.shape[1] < 2:  # one phase: delta_max is 0
        return 0.0
    if a.shape[0] > 1:
        return metrics.cluster_range_floor(a, NOISE_FLOOR_LEVEL)
    return pooled_noise_floor(a[0], samples)[1]


def report_noise_floor(accuracy, samples, per_seed=None) -> float:
    """The 95% noise floor of `delta_max` of per-phase `accuracy` (s,) on `samples` (s,)
    sequences pooled over seeds: with the seeds' own accuracies `per_seed` `(R, s)`, the
    seeds as clusters (`seed_noise_floor`); without them (reports recorded before they were
    kept), every sequence as an independent sample (`pooled_noise_floor`)."""
    if per_seed is None:
        return pooled_noise_floor(accuracy, samples)[1]
    per_seed = np.asarray(per_seed, np.float64)
    return seed_noise_floor(per_seed, np.asarray(samples) // per_seed.shape[0])


def seed_phase_statistics(per_seed_accuracy, samples) -> dict:
    """The seed-cluster statistics of per-phase accuracies `(R, s)`, each seed's phase on
    `samples[p]` sequences of its own: `phase_accuracy` (mean over seeds), its 95% intervals
    `phase_accuracy_ci` (`seed_intervals`), `delta_max` with `delta_max_ci` (a Student-t
    interval over the seeds' best-minus-worst differences, at the phases best and worst in
    the mean; None for one seed), `delta_max_noise_floor` (`seed_noise_floor`), the worst and
    best phase and `interval_gap` (best phase's lower bound minus the worst one's upper)."""
    a = np.asarray(per_seed_accuracy, np.float64)
    acc, ci = a.mean(axis=0), seed_intervals(a, samples)
    worst, best = int(np.argmin(acc)), int(np.argmax(acc))
    delta_ci = None
    if a.shape[0] > 1:
        delta_ci = list(metrics.mean_interval(a[:, best] - a[:, worst], -1.0, 1.0)[1:])
    return {
        "phase_accuracy": acc.tolist(),
        "phase_accuracy_ci": ci.tolist(),
        "delta_max": float(acc[best] - acc[worst]),
        "delta_max_ci": delta_ci,
        "delta_max_noise_floor": seed_noise_floor(a, samples),
        "worst_phase": worst,
        "best_phase": best,
        "interval_gap": float(ci[best][0] - ci[worst][1]),
        "seeds": int(a.shape[0]),
    }


def pooled_noise_floor(accuracy, samples) -> tuple[float, float]:
    """The accuracy pooled over phases (per-phase `accuracy` weighted by `samples`) and the
    95% noise floor of `delta_max` at it (`delta_max_noise_floor`)."""
    accuracy, samples = np.asarray(accuracy), np.asarray(samples)
    pooled = float((accuracy * samples).sum() / max(samples.sum(), 1))
    return pooled, delta_max_noise_floor(pooled, samples)


def query_reach(config: LMConfig) -> int:
    """Tokens at the end of the context the first query reaches uncompressed.

    A path through the layers' uncompressed branches (`AbstractLayerKind.local_reach`): each
    sliding layer (`sliding`, `swa`) reaches `window` tokens back, each compressed one
    (`compressed`, `csa`, `hca`) its `local_window`, so the reach is their sum over the layers (0 when there are none). With
    one uncompressed layer it is that layer's window; DeepSeek-V4's design, a local branch in
    every layer, reaches `window + (L - 1) local_window`.
    """
    return sum(layer_kind(kind).local_reach(config) for kind in config.layer_kinds)


def position_spectrum(position_accuracy: np.ndarray, stride: int) -> dict:
    """Amplitude spectrum of accuracy against position, and its dominant period in tokens.

    The first `stride * floor(n / stride)` positions are used, so frequency `1/stride`
    lies on the grid; the mean is removed. `dominant_period` is `1 / argmax frequency`.
    """
    n = (len(position_accuracy) // stride) * stride
    centred = position_accuracy[:n] - position_accuracy[:n].mean()
    amplitude = np.abs(np.fft.rfft(centred)) / n
    frequencies = np.fft.rfftfreq(n)
    top = int(np.argmax(amplitude[1:])) + 1
    return {
        "frequencies": frequencies.tolist(),
        "amplitude": amplitude.tolist(),
        "dominant_period": float(1.0 / frequencies[top]),
    }


def phase_summary(config: LMConfig, outcomes: np.ndarray) -> dict:
    """Every per-phase metric of one run's (or several runs') outcomes, as plain Python values.

    `outcomes`: `(M,)` booleans on `config`'s evaluation set, or `(R, M)` for R runs of one
    task, each on its own set (`evaluate_many(..., seeds=)`). Accuracies are pooled over the
    runs (`phase_samples` counts R times the sequences); with R > 1 the intervals, the noise
    floor and `delta_max_ci` take the seeds as clusters (`seed_phase_statistics`), and
    `phase_accuracy_per_seed` holds each run's. Phase, key-phase, straddle and spectrum
    statistics count the facts beyond `query_reach(config)` (module docstring); `near_query`
    and `position_accuracy` cover the rest.
    """
    data = config_evaluation_set(config)
    outcomes = np.asarray(outcomes, bool).reshape(-1, data.value_start.size)
    runs = outcomes.shape[0]
    s, L = config.stride, config.task.fact_len
    positions = value_starts(config.task)
    position_accuracy = outcomes.reshape(runs, positions.size, -1).mean(axis=(0, 2))
    reach = query_reach(config)
    far_positions = positions < config.task.context_len - reach
    if far_positions.sum() < s:  # the reach covers (nearly) the whole context: count everything
        far_positions[:] = True
    far = data.value_start < positions[far_positions].max() + 1
    near = ~far
    only = lambda labels: np.where(far, labels, -1)  # noqa: E731
    by_value = clustered(outcomes, only(data.value_start % s), s)
    by_key = clustered(outcomes, only(data.key_start % s), s)
    straddling = data.key_start // s != (data.key_start + L - 1) // s
    straddle = clustered(outcomes, only(straddling.astype(np.int64)), 2)
    near_split = clustered(outcomes, np.where(near, 0, -1), 1)
    near_hits, near_samples = int(outcomes[:, near].sum()), int(outcomes[:, near].size)
    acc = by_value["accuracy"]
    report = metrics.phase_report(acc, int(by_value["samples"].min()))
    per_phase = np.asarray(by_value["samples"]) // runs
    stats = seed_phase_statistics(by_value["per_seed"], per_phase)
    out = {
        "phase_accuracy": acc.tolist(),
        "phase_accuracy_ci": by_value["ci"].tolist(),
        "phase_samples": by_value["samples"].tolist(),
        "phase_accuracy_per_seed": by_value["per_seed"].tolist() if runs > 1 else None,
        "interval": "seed clusters" if runs > 1 else "wilson",
        "phase_accuracy_by_key_phase": by_key["accuracy"].tolist(),
        "phase_accuracy_by_key_phase_ci": by_key["ci"].tolist(),
        "straddle_accuracy": {
            name: {
                "accuracy": float(straddle["accuracy"][i]),
                "samples": int(straddle["samples"][i]),
                "ci": straddle["ci"][i].tolist(),
            }
            for i, name in enumerate(("same_window", "straddling"))
        },
        "mean_accuracy": report["mean_accuracy"],
        "delta_max": report["delta_max"],
        "delta_max_ci": stats["delta_max_ci"],
        "delta_max_noise_floor": stats["delta_max_noise_floor"],
        "worst_phase": stats["worst_phase"],
        "best_phase": stats["best_phase"],
        "interval_gap": stats["interval_gap"],
        "psc": report["psc"],
        "harmonic_spectrum": report["harmonic_spectrum"],
        "buckets": report["buckets"],
        "near_query": {
            "reach": reach,
            "first_value_start": int(positions[~far_positions].min()) if near.any() else None,
            "accuracy": near_hits / near_samples if near_samples else None,
            "samples": near_samples,
            "ci": near_split["ci"][0].tolist() if near_samples else None,
        },
        "position_accuracy": {
            "value_start": positions.tolist(),
            "accuracy": position_accuracy.tolist(),
            "samples": runs * config.eval_samples,
        },
        "position_spectrum": position_spectrum(position_accuracy[far_positions], s),
    }
    return out


def seed_spread(per_seed_phase_accuracy) -> dict:
    """Mean and standard deviation over seeds of each phase's accuracy (`(R, s)` in)."""
    a = np.asarray(per_seed_phase_accuracy, np.float64)
    return {
        "mean": a.mean(axis=0).tolist(),
        "std": (a.std(axis=0, ddof=1) if a.shape[0] > 1 else np.zeros(a.shape[1])).tolist(),
    }

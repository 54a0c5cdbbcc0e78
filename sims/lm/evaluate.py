"""The per-phase evaluation protocol of the decoders (the paper's, on associative recall).

The evaluation set places the first-queried fact at every position its value can take,
`eval_samples` sequences each, the other facts uniform around it (`recall.placed_starts`),
from `eval_seed` alone: every run of a task sees the same sequences. A run's outcome is,
per sequence, whether it predicts every token of that value. `phase_summary` resolves
the outcomes by the value's phase `p mod s` (the stride of the compressed layers), by the
key's phase, by straddling (the fact crosses a window boundary) and by absolute position,
with 95% Wilson intervals, and reuses `idealized.metrics` for `delta_max`, `psc`, the
harmonic spectrum and the buckets.

Facts in the last `query_reach` tokens of the context are within the uncompressed
(sliding or local) window of the first query, so the query can read them without the
compressed entries. Trained decoders answer those differently (less well, in the runs of
`docs/lm_runs/`), and their share differs between phases, so the phase statistics count
only the facts beyond that reach; the near ones are reported on their own (`near_query`)
and in `position_accuracy`. Compressed design and dense control share the rule (it
depends on the layout and windows, not on the operator).
"""

from __future__ import annotations

import dataclasses
import functools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized import metrics
from weakspots.idealized.lm_config import LMConfig, RecallTask
from weakspots.idealized.recall import placed_batch, placed_starts, value_starts
from weakspots.sims.lm.train import first_query_correct, jit

EVAL_CHUNK = 128  # sequences per forward pass in evaluation (bounds memory)
NOISE_FLOOR_DRAWS = 20000
NOISE_FLOOR_LEVEL = 0.95


@dataclasses.dataclass(frozen=True)
class EvaluationSet:
    """Fact starts `(M, P)` (fact 0 queried first) and the first fact's key and value starts `(M,)`."""

    starts: np.ndarray
    key_start: np.ndarray
    value_start: np.ndarray


@functools.lru_cache(maxsize=8)
def evaluation_set(task: RecallTask, samples: int, seed: int) -> EvaluationSet:
    """`samples` placements for every value start of `recall.value_starts(task)`, from `seed`."""
    rng = np.random.default_rng(seed)
    values = np.repeat(value_starts(task), samples)
    starts = np.stack([placed_starts(rng, task, int(v) - task.key_len) for v in values])
    return EvaluationSet(starts, values - task.key_len, values)


def config_evaluation_set(config: LMConfig) -> EvaluationSet:
    return evaluation_set(config.task, config.eval_samples, config.eval_seed)


@partial(jit, static_argnums=0)
def _outcomes(config: LMConfig, params: nnx.State, starts, chunk_index):
    key = jax.random.fold_in(jax.random.key(config.eval_seed), 1)

    def per_run(run_params):
        def chunk(args):
            rows, index = args
            batch = placed_batch(jax.random.fold_in(key, index), config.task, rows)
            return first_query_correct(config, run_params, batch)

        return jax.lax.map(chunk, (starts, chunk_index)).reshape(-1)

    return jax.vmap(per_run)(params)


def evaluate_many(config: LMConfig, params: nnx.State) -> np.ndarray:
    """Outcomes `(R, M)` of stacked runs (leading axis R) on the evaluation set."""
    config = config.static
    starts = config_evaluation_set(config).starts
    total = starts.shape[0]
    padded = -(-total // EVAL_CHUNK) * EVAL_CHUNK
    rows = np.concatenate([starts, np.repeat(starts[:1], padded - total, axis=0)])
    rows = jnp.asarray(rows.reshape(-1, EVAL_CHUNK, starts.shape[1]))
    index = jnp.arange(rows.shape[0], dtype=jnp.int32)
    return np.asarray(_outcomes(config, params, rows, index))[:, :total]


def wilson(hits: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """95% Wilson intervals `(..., 2)` for `hits / samples`, each with its own sample count."""
    hits, samples = np.asarray(hits, np.float64), np.asarray(samples, np.float64)
    return np.stack(
        [
            metrics.wilson_interval(h / n, int(n))
            for h, n in zip(hits.ravel(), samples.ravel(), strict=True)
        ]
    ).reshape(*hits.shape, 2)


def grouped(outcomes: np.ndarray, labels: np.ndarray, groups: int) -> dict:
    """Accuracy, samples and Wilson interval of `outcomes` per label in `range(groups)`."""
    samples = np.bincount(labels, minlength=groups)
    hits = np.bincount(labels, weights=outcomes.astype(np.float64), minlength=groups)
    accuracy = hits / np.maximum(samples, 1)
    return {"accuracy": accuracy, "samples": samples, "ci": wilson(hits, np.maximum(samples, 1))}


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


def pooled_noise_floor(accuracy, samples) -> tuple[float, float]:
    """The accuracy pooled over phases (per-phase `accuracy` weighted by `samples`) and the
    95% noise floor of `delta_max` at it (`delta_max_noise_floor`)."""
    accuracy, samples = np.asarray(accuracy), np.asarray(samples)
    pooled = float((accuracy * samples).sum() / max(samples.sum(), 1))
    return pooled, delta_max_noise_floor(pooled, samples)


def query_reach(config: LMConfig) -> int:
    """Tokens at the end of the context the first query reaches uncompressed.

    The sliding window if some layer is sliding, and the local window of compressed
    layers, whichever is larger (0 when neither exists).
    """
    kinds = config.layer_kinds
    return max(
        config.window if "sliding" in kinds else 0,
        config.local_window if "compressed" in kinds else 0,
    )


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
    """Every per-phase metric of one run's (or pooled runs') outcomes, as plain Python values.

    `outcomes`: `(M,)` booleans on `config`'s evaluation set, or `(R, M)` for R runs of one
    task, pooled (each phase then has R times the samples). Phase, key-phase, straddle and
    spectrum statistics count the facts beyond `query_reach(config)` (module docstring);
    `near_query` and `position_accuracy` cover the rest.
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
    tile = lambda a: np.tile(a[far], runs)  # noqa: E731
    flat = outcomes[:, far].reshape(-1)
    by_value = grouped(flat, tile(data.value_start % s), s)
    by_key = grouped(flat, tile(data.key_start % s), s)
    straddling = tile(data.key_start // s != (data.key_start + L - 1) // s)
    straddle = grouped(flat, straddling.astype(np.int64), 2)
    near_hits, near_samples = int(outcomes[:, near].sum()), int(outcomes[:, near].size)
    acc = by_value["accuracy"]
    report = metrics.phase_report(acc, int(by_value["samples"].min()))
    worst, best = int(np.argmin(acc)), int(np.argmax(acc))
    out = {
        "phase_accuracy": acc.tolist(),
        "phase_accuracy_ci": by_value["ci"].tolist(),
        "phase_samples": by_value["samples"].tolist(),
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
        "delta_max_noise_floor": delta_max_noise_floor(float(flat.mean()), by_value["samples"]),
        "worst_phase": worst,
        "best_phase": best,
        "interval_gap": float(by_value["ci"][best][0] - by_value["ci"][worst][1]),
        "psc": report["psc"],
        "harmonic_spectrum": report["harmonic_spectrum"],
        "buckets": report["buckets"],
        "near_query": {
            "reach": reach,
            "first_value_start": int(positions[~far_positions].min()) if near.any() else None,
            "accuracy": near_hits / near_samples if near_samples else None,
            "samples": near_samples,
            "ci": wilson(np.array(near_hits), np.array(near_samples)).tolist()
            if near_samples
            else None,
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

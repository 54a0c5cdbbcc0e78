"""Plumbing shared by the figure drivers: sizes, the result-store memo, training and
flow wrappers, the agreement-row format."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig
from weakspots.idealized.loss import batch_correct
from weakspots.idealized.task import sample_batch
from weakspots.idealized.xla import filter_jit
from weakspots.sims import store
from weakspots.sims.flow import reduced_flow
from weakspots.sims.train import DTYPE, Hyper, TrainResult, init, train_many

FIGURES = (
    "weak_spots",
    "pooling_dynamics",
    "phase_diagram",
    "growth_rate",
    "specialization_time",
    "support_size",
    "head_ablation",
    "operators",
    "rope_anchoring",
    "mitigations",
    "finite_d_accuracy",
    "learned_gain",
)
# Bump a figure's version when its driver's output changes meaning: stored results are recomputed.
VERSIONS = dict.fromkeys(FIGURES, 1) | {
    "phase_diagram": 2,
    "growth_rate": 2,
    "learned_gain": 5,
    "pooling_dynamics": 3,
    "mitigations": 3,
    "head_ablation": 2,
    "operators": 3,
    "support_size": 5,
}

STRIDE, CHUNKS, DIM, GAIN = 8, 64, 64, 16.0
EVENT_LEVEL = 0.25  # theory.specialization_time's event: delta = 0.25
FLOW_BATCH = 16  # reduced flows are padded to multiples of this: one compilation serves all


@dataclass(frozen=True)
class Size:
    """How much of every experiment to run; the physics (canonical config) is the same at each size."""

    name: str
    seeds: int  # SGD seeds per config
    eval_samples: int  # held-out needles per phase
    position_samples: int  # needles per phase for accuracy against position (figure 1)
    flow_starts: int  # reduced-flow starts per config
    support_samples: int  # isotropic directions in theory.predicted_support_size
    mc_samples: int  # Monte Carlo needles per phase (figure 11)
    ablate_samples: int  # needles per phase for the interventions (figure 7)
    grid: int  # phase-diagram cells per axis
    chunks_sweep: tuple[int, ...]
    stride_sweep: tuple[int, ...]
    init_scales: tuple[float, ...]  # SGD init scales (figure 5)
    heads: tuple[int, ...]
    dims: tuple[int, ...]  # Monte Carlo dimensions (figure 11)
    weight_decays: tuple[float, ...]
    real_keys: bool  # train operators that need the real keys (max_pool, low_rank, deepseek_v4)
    steps: int = 600
    eval_every: int = 10


SIZES = {
    "tiny": Size(
        "tiny", 1, 64, 256, 2, 8, 256, 16, 3, (12, 64), (8,), (0.01,), (1, 2), (16, 64),
        (0.0, 1e-3), False, steps=40, eval_every=20,
    ),
    "quick": Size(
        "quick", 2, 512, 8192, 8, 32, 4096, 128, 10, (12, 24, 64, 256), (4, 8, 16),
        (1e-3, 1e-2, 1e-1), (1, 2, 4, 8), (16, 64, 256), (0.0, 1e-4, 3e-4, 1e-3), False,
    ),
    "full": Size(
        "full", 8, 2048, 32768, 32, 256, 16384, 512, 24, (12, 16, 20, 24, 32, 64, 128, 256),
        (4, 6, 8, 12, 16), (1e-4, 1e-3, 1e-2, 1e-1, 3e-1), (1, 2, 4, 8),
        (16, 32, 64, 128, 256, 1024), (0.0, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3), True,
    ),
}  # fmt: skip


def plain(x):
    """Numpy/jax values inside dicts and lists as JSON-able Python (lists, floats, ints)."""
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray | jax.Array):
        return plain(np.asarray(x).tolist())
    if isinstance(x, np.generic):
        return x.item()
    return x


def _store_key(kind: str, name: str, size: Size) -> dict:
    return {
        "kind": kind,
        "figure": name,
        "size": json.dumps(dataclasses.asdict(size), sort_keys=True),
        "version": VERSIONS[name],
    }


def stored(store_dir, kind: str, name: str, size: Size) -> bool:
    """Whether `cached(store_dir, kind, name, size, ...)` would read the store."""
    return store_dir is not None and store.has_run(
        store_dir, store.config_hash(_store_key(kind, name, size))
    )


def cached(store_dir, kind: str, name: str, size: Size, compute: Callable[[], dict]) -> dict:
    """`compute()` once per (kind, figure, size, VERSIONS[figure]); later calls read the store."""
    if store_dir is None:
        return plain(compute())
    config = _store_key(kind, name, size)
    run_hash = store.config_hash(config)
    if store.has_run(store_dir, run_hash):
        table = store.load(store_dir, on_damaged="skip")
        hit = table[table["hash"] == run_hash]
        if len(hit):
            return json.loads(hit["results_json"].iloc[0])
    out = plain(compute())
    store.write_run(store_dir, config, {"results_json": json.dumps(out)})
    return out


_TRAINED: dict[TrainConfig, TrainResult] = {}


def train(configs: Sequence[TrainConfig]) -> list[TrainResult]:
    """train_many with an in-process memo: figures that share a run train it once.

    A figure module that trains declares its runs in `configs_<name>(size)`, so a caller
    making several figures can train all of them in one call first
    (`sims.experiments.train_planned`): runs of one `TrainConfig.static` then share one
    compiled program whichever figures ask for them. A run's numbers do not depend on the
    runs it is batched with (checked bit for bit in tests/test_train.py).
    """
    missing = [c for c in dict.fromkeys(configs) if c not in _TRAINED]
    if missing:
        _TRAINED.update(zip(missing, train_many(missing), strict=True))
    return [_TRAINED[c] for c in configs]


def base_config(size: Size, **changes) -> TrainConfig:
    """The canonical config at this size (stride 8, 64 chunks, d 64, gain 16, lr 2, 600 steps)."""
    return TrainConfig(
        steps=size.steps, eval_every=size.eval_every, eval_samples=size.eval_samples
    ).replace(**changes)


def order_parameter(weights) -> np.ndarray:
    """delta = |log alpha - mean log alpha| over (heads, phases) (theory.specialization_order)."""
    logw = np.log(np.asarray(weights, float))
    centred = logw - logw.mean(axis=-1, keepdims=True)
    return np.sqrt(np.sum(centred**2, axis=(-2, -1)))


def crossing_time(times, values, level) -> float:
    """First time `values` reaches `level`, linearly interpolated (inf if never)."""
    times, values = np.asarray(times, float), np.asarray(values, float)
    above = np.nonzero(values >= level)[0]
    if not above.size:
        return math.inf
    i = int(above[0])
    if i == 0:
        return float(times[0])
    f = (level - values[i - 1]) / (values[i] - values[i - 1])
    return float(times[i - 1] + f * (times[i] - times[i - 1]))


FLOW_SAVES = 128  # every reduced flow saves this many times: one compilation per (s, H)


def _save_grid(ts) -> tuple[np.ndarray, np.ndarray]:
    """The requested save times (strictly increasing) padded to FLOW_SAVES points by halving
    the widest gaps, and the indices of the requested ones in the padded grid."""
    grid = np.asarray(ts, float)
    if grid.size > FLOW_SAVES:
        raise ValueError(f"at most {FLOW_SAVES} save times, got {grid.size}")
    while grid.size < FLOW_SAVES:
        i = int(np.argmax(np.diff(grid)))
        grid = np.insert(grid, i + 1, 0.5 * (grid[i] + grid[i + 1]))
    return grid, np.searchsorted(grid, np.asarray(ts, float))


def flow(
    *, stride, heads=1, starts, chunks, gain, ts, learn_gain=0.0, weight_decay=0.0, gain_param="log"
):
    """reduced_flow from given starting logits `(B, H, s)`, in batches of exactly FLOW_BATCH runs
    saved at FLOW_SAVES times, so every call with the same (s, H) shares one compilation.

    chunks, gain, learn_gain, weight_decay: scalars or (B,); ts (T,) increasing, T <= FLOW_SAVES.
    Returns numpy {times (T,), pooling_weights (B, T, H, s), gain (B, T, H),
    specialization_time (B,)}.
    """
    starts = np.asarray(starts, float)
    batch = starts.shape[0]
    padded = -(-batch // FLOW_BATCH) * FLOW_BATCH
    grid, where = _save_grid(ts)

    def pad(x):
        x = np.broadcast_to(np.asarray(x, float), (batch,))
        return np.concatenate([x, np.repeat(x[-1:], padded - batch)])

    starts = np.concatenate([starts, np.repeat(starts[-1:], padded - batch, axis=0)])
    per_run = [pad(x) for x in (chunks, gain, learn_gain, weight_decay)]
    parts = []
    for lo in range(0, padded, FLOW_BATCH):
        sl = slice(lo, lo + FLOW_BATCH)
        chunk_, gain_, learn_, wd_ = (x[sl] for x in per_run)
        parts.append(
            reduced_flow(
                stride=stride,
                heads=heads,
                init_pooling_logits=starts[sl],
                chunks=chunk_,
                gain=gain_,
                learn_gain=learn_,
                weight_decay=wd_,
                ts=grid,
                rtol=1e-7,
                atol=1e-9,
                gain_parametrisation=gain_param,
            )
        )

    def stack(field):
        return np.concatenate([np.asarray(getattr(p, field)) for p in parts])[:batch]

    return {
        "times": np.asarray(ts, float),
        "pooling_weights": stack("pooling_weights")[:, where],
        "gain": stack("gain")[:, where],
        "specialization_time": stack("specialization_time"),
    }


def random_starts(count, heads, stride, scale, seed) -> np.ndarray:
    """Initial pooling logits scale * N(0, 1), `(count, H, s)`, from a fixed numpy seed."""
    return scale * np.random.default_rng(seed).standard_normal((count, heads, stride))


def sgd_start(config: TrainConfig) -> np.ndarray:
    """The SGD run's own initial pooling logits `(H, s)`, so the flow starts where SGD did."""
    hyper = jax.tree.map(lambda x: x[0], Hyper.stack([config]))
    return np.asarray(init(config.static, hyper).model.compressor.pooling_logits, float)


def row(name, config, predicted, ode=None, sgd=None, tolerance=0.05, floor=1e-12) -> dict:
    """One agreement row: rel_error = max |measured - predicted| / max(|predicted|, floor)."""
    measured = [m for m in (ode, sgd) if m is not None and np.isfinite(m)]
    missing = any(m is not None and not np.isfinite(m) for m in (ode, sgd))
    if measured and not missing:
        rel = max(abs(m - predicted) for m in measured) / max(abs(predicted), floor)
    else:
        rel = math.inf
    return {
        "name": name,
        "config": config,
        "predicted": float(predicted),
        "ode": None if ode is None else float(ode),
        "sgd": None if sgd is None else float(sgd),
        "rel_error": float(rel),
        "tolerance": float(tolerance),
        "pass": bool(rel <= tolerance),
    }


@functools.cache
def support_prediction(stride, chunks, gain, samples) -> tuple:
    """theory.predicted_support_size, memoised in-process (several figures ask for the same)."""
    return theory.predicted_support_size(stride, chunks, gain, samples=samples)


def _mode(values) -> float:
    values, counts = np.unique(np.asarray(values), return_counts=True)
    return float(values[np.argmax(counts)])


@filter_jit
def correct_at_phase(model, key, config, samples, phase):
    batch = sample_batch(key, config, samples, keys=False, phase=phase, dtype=DTYPE)
    return batch_correct(model, batch), batch.target

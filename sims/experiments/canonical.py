"""The canonical physics every experiment starts from, and the simulations they share.

Canonical config: stride 8, 64 chunks, d = 64, gain 16, SGD lr 2, batch 256, 600 steps
(so gradient-flow time t = lr x steps = 1200). `train` is the SGD run memo shared by
experiments; `reduced_flows` integrates the reduced flow from given starts in batches
that share one compiled program.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from weakspots.idealized.config import TrainConfig
from weakspots.idealized.loss import batch_correct
from weakspots.idealized.task import sample_batch
from weakspots.idealized.xla import filter_jit
from weakspots.sims.experiments.experiment import Budget
from weakspots.sims.flow import reduced_flow
from weakspots.sims.train import DTYPE, TrainResult, train_many

STRIDE, CHUNKS, DIM, GAIN = 8, 64, 64, 16.0
EVENT_LEVEL = 0.25  # theory.specialization_time's event: delta = 0.25


def base_config(budget: Budget, **changes) -> TrainConfig:
    """The canonical config with this budget's steps and held-out needles, then `changes`."""
    return TrainConfig(
        steps=budget.steps, eval_every=budget.eval_every, eval_samples=budget.eval_samples
    ).replace(**changes)


_TRAINED: dict[TrainConfig, TrainResult] = {}


def train(configs: Sequence[TrainConfig]) -> list[TrainResult]:
    """train_many with an in-process memo: experiments that share a run train it once.

    An experiment declares the runs it trains in `Experiment.configs`, so a caller running
    several can train all of them in one call first (`sims.experiments.train_planned`):
    runs of one `TrainConfig.static` then share one compiled program. A run's numbers do
    not depend on the runs it is batched with (tests/test_train.py, bit for bit).
    """
    missing = [c for c in dict.fromkeys(configs) if c not in _TRAINED]
    if missing:
        _TRAINED.update(zip(missing, train_many(missing), strict=True))
    return [_TRAINED[c] for c in configs]


FLOW_BATCH = 16  # reduced flows are padded to multiples of this: one compilation serves all
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


def reduced_flows(
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


@filter_jit
def correct_at_phase(model, key, config, samples, phase):
    """Whether each of `samples` needles at `phase` is retrieved, and their target chunks."""
    batch = sample_batch(key, config, samples, keys=False, phase=phase, dtype=DTYPE)
    return batch_correct(model, batch), batch.target

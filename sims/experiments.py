"""Experiment drivers for the paper's theory figures: one `run_<name>` and `predict_<name>` each.

`run_<name>(size, store_dir)` returns what the simulations measured (SGD on the finite-d
model, the reduced flow of THEORY 5, Monte Carlo), `predict_<name>(size, results)` what
`theory/` says about the same quantities, and `rows_<name>(results, predictions)` the
agreement rows (the `weakspots check` format: name, config, predicted, ode, sgd,
rel_error, tolerance, pass). Everything returned is plain JSON-able data (lists, floats,
strings), so `figures/` only reads it and the result store (`sims.store`) keeps it:
`cached(...)` reuses a stored result whose figure, size and driver version match.

Conventions shared by every figure: canonical physics (stride 8, 64 chunks, d = 64, gain
16, SGD lr 2, batch 256, 600 steps, so gradient-flow time t = lr x steps = 1200); the
order parameter delta = |log alpha - mean log alpha| (theory.specialization_order); a phase
is covered when its pooling weight exceeds 1/(2s) (idealized.metrics.support_size).

Adapters for predictions `theory/` does not have yet (THEORY 6.6, learned gain): the
gain's equilibrium under weight decay at uniform pooling (`equilibrium_gain`) and the
linear-regime race between gain growth and the instability (`race_growth`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import theory
from idealized.compression import LinearPool
from idealized.config import TrainConfig
from idealized.loss import batch_correct
from idealized.metrics import harmonic_spectrum, specialization_index, support_size
from idealized.model import init_model
from idealized.task import sample_batch
from sims import store
from sims.flow import reduced_flow
from sims.train import DTYPE, Hyper, TrainResult, evaluate, init, train_many
from theory import interventions as tint

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
VERSIONS = dict.fromkeys(FIGURES, 1) | {"learned_gain": 4, "pooling_dynamics": 2, "mitigations": 2}

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


# ----------------------------------------------------------------------------- plumbing


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


def cached(store_dir, kind: str, name: str, size: Size, compute: Callable[[], dict]) -> dict:
    """`compute()` once per (kind, figure, size, VERSIONS[figure]); later calls read the store."""
    if store_dir is None:
        return plain(compute())
    config = {
        "kind": kind,
        "figure": name,
        "size": json.dumps(dataclasses.asdict(size), sort_keys=True),
        "version": VERSIONS[name],
    }
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
    """train_many with an in-process memo: figures that share a run train it once."""
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


# ----------------------------------------------------------------------------- 1. weak spots


@eqx.filter_jit
def _correct_at_phase(model, key, config, samples, phase):
    batch = sample_batch(key, config, samples, keys=False, phase=phase, dtype=DTYPE)
    return batch_correct(model, batch), batch.target


def position_accuracy(config: TrainConfig, model, samples: int, shown: int, seed=2024):
    """Accuracy and needle counts by (chunk, phase) for the first `shown` chunks, `(shown, s)`.

    Needles fall in uniformly random chunks, so each (chunk, phase) cell holds about
    samples / N of the `samples` needles drawn at that phase.
    """
    hits = np.zeros((shown, config.stride))
    counts = np.zeros((shown, config.stride))
    for phase in range(config.stride):
        key = jax.random.fold_in(jax.random.key(seed), phase)
        ok, target = _correct_at_phase(model, key, config.model, samples, jnp.asarray(phase))
        ok, target = np.asarray(ok), np.asarray(target)
        for c in range(shown):
            counts[c, phase] = np.sum(target == c)
            hits[c, phase] = np.sum(ok[target == c])
    return hits, counts


def run_weak_spots(size: Size, store_dir=None) -> dict:
    """SGD at N = 64 (past N_c) and N = 12 (below): accuracy by needle position over 4 chunks."""

    def compute():
        out = {"shown_chunks": 4, "runs": []}
        chunk_list = (CHUNKS, 12)
        results = train([base_config(size, chunks=n) for n in chunk_list])
        for r in results:
            hits, counts = position_accuracy(r.config, r.model, size.position_samples, 4)
            summary = r.summary()
            out["runs"].append(
                {
                    "chunks": r.config.chunks,
                    "hits": hits,
                    "counts": counts,
                    "phase_accuracy": summary["phase_accuracy"],
                    "eval_samples": r.config.eval_samples,
                    "pooling_weights": summary["pooling_weights"],
                    "mean_accuracy": summary["mean_accuracy"],
                }
            )
        return out

    return cached(store_dir, "run", "weak_spots", size, compute)


def predict_weak_spots(size: Size, results: dict, store_dir=None) -> dict:
    """Exact finite-d accuracy (theory.phase_accuracy) of each run's learned pooling weights."""
    del size, store_dir
    return {
        "runs": [
            {
                "chunks": run["chunks"],
                "phase_accuracy": theory.phase_accuracy(
                    np.asarray(run["pooling_weights"])[0], GAIN, run["chunks"], DIM
                ).tolist(),
                "critical_chunks": float(theory.critical_chunks(GAIN, STRIDE)),
            }
            for run in results["runs"]
        ]
    }


def rows_weak_spots(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for run, pred in zip(results["runs"], predictions["runs"], strict=True):
        measured = np.asarray(run["phase_accuracy"])
        predicted = np.asarray(pred["phase_accuracy"])
        rows.append(
            row(
                "delta_max from learned weights (exact formula)",
                f"s=8 N={run['chunks']} d=64 gain=16 seed 0",
                theory.delta_max(predicted),
                sgd=theory.delta_max(measured),
                tolerance=0.1,
                floor=1.0,
            )
        )
    return rows


# ----------------------------------------------------------------------------- 2. pooling dynamics


POOLING_INIT = 0.3


def run_pooling_dynamics(size: Size, store_dir=None) -> dict:
    """SGD pooling weights at d = 64 and d = 1024, and the reduced flow from each run's own start."""

    def compute():
        dims = (DIM, 1024)
        # Init scale 0.3 (THEORY 6.10): the start, not early SGD noise, then picks the support,
        # so SGD and the flow from the same start can be compared phase by phase.
        configs = [
            base_config(size, dim=d, seed=s, init_scale=POOLING_INIT)
            for d in dims
            for s in range(size.seeds)
        ]
        results = train(configs)
        starts = np.stack([sgd_start(c) for c in configs])
        times = np.asarray(results[0].history.times, float)
        ode = flow(stride=STRIDE, starts=starts, chunks=CHUNKS, gain=GAIN, ts=times)
        runs = []
        for i, (c, r) in enumerate(zip(configs, results, strict=True)):
            sgd = np.asarray(r.history.pooling_weights, float)[:, 0]
            runs.append(
                {
                    "dim": c.dim,
                    "seed": c.seed,
                    "sgd": sgd,
                    "ode": ode["pooling_weights"][i][:, 0],
                }
            )
        return {"times": times, "runs": runs, "init_scale": POOLING_INIT}

    return cached(store_dir, "run", "pooling_dynamics", size, compute)


def predict_pooling_dynamics(size: Size, results: dict, store_dir=None) -> dict:
    """Uniform pooling 1/s, the growth rate, and the predicted final support size."""

    def compute():
        sizes, probs, admissible = support_prediction(STRIDE, CHUNKS, GAIN, size.support_samples)
        return {
            "uniform": 1.0 / STRIDE,
            "growth_rate": float(theory.growth_rate(STRIDE, CHUNKS, GAIN)),
            "support_sizes": sizes,
            "support_probabilities": probs,
            "admissible": admissible,
        }

    return cached(store_dir, "predict", "pooling_dynamics", size, compute)


def rows_pooling_dynamics(results: dict, predictions: dict) -> list[dict]:
    k_pred = float(
        predictions["support_sizes"][int(np.argmax(predictions["support_probabilities"]))]
    )
    rows = []
    for dim in sorted({r["dim"] for r in results["runs"]}):
        runs = [r for r in results["runs"] if r["dim"] == dim]
        ode_k = _mode([support_size(np.asarray(r["ode"])[-1:]).item() for r in runs])
        sgd_k = _mode([support_size(np.asarray(r["sgd"])[-1:]).item() for r in runs])
        rows.append(
            row(
                "support size k (most probable)",
                f"s=8 N=64 gain=16 d={dim}, flow from the SGD starts",
                k_pred,
                ode=ode_k,
                sgd=sgd_k,
                tolerance=0.0,
            )
        )
    return rows


# ----------------------------------------------------------------------------- 3. phase diagram


def run_phase_diagram(size: Size, store_dir=None) -> dict:
    """Specialisation index of the reduced flow at t = 1200 over (N, gain/stride); SGD points on top."""

    def compute():
        chunks = np.unique(np.round(np.geomspace(4, 512, size.grid)).astype(int))
        ratios = np.linspace(1.0, 5.0, size.grid)
        nn, rr = np.meshgrid(chunks, ratios, indexing="ij")
        t_end = float(size.steps * 2.0)
        starts = random_starts(nn.size, 1, STRIDE, 0.01, seed=3)
        ode = flow(
            stride=STRIDE,
            starts=starts,
            chunks=nn.ravel(),
            gain=STRIDE * rr.ravel(),
            ts=np.linspace(0.0, t_end, 3),
        )
        index = specialization_index(ode["pooling_weights"][:, -1, 0]).reshape(nn.shape)
        points = [(n, GAIN) for n in size.chunks_sweep] + [(CHUNKS, g) for g in (12.0, 24.0, 32.0)]
        configs = [base_config(size, chunks=n, gain=g) for n, g in points]
        sgd = []
        for c, r in zip(configs, train(configs), strict=True):
            w = np.asarray(r.model.pooling_weights(), float)
            sgd.append(
                {
                    "chunks": c.chunks,
                    "ratio": c.gain / c.stride,
                    "index": float(specialization_index(w)[0]),
                    "support": int(support_size(w)[0]),
                }
            )
        return {
            "chunks": chunks,
            "ratios": ratios,
            "index": index,
            "t_end": t_end,
            "sgd": sgd,
        }

    return cached(store_dir, "run", "phase_diagram", size, compute)


def predict_phase_diagram(size: Size, results: dict, store_dir=None) -> dict:
    """The critical curve N_c = 1 + 2 exp(gain/stride) (THEORY 6.3)."""
    del size, store_dir
    ratios = np.linspace(min(results["ratios"]), max(results["ratios"]), 200)
    return {"ratios": ratios.tolist(), "critical_chunks": (1 + 2 * np.exp(ratios)).tolist()}


def rows_phase_diagram(results: dict, predictions: dict) -> list[dict]:
    """SGD bracket of N_c at gain 16: largest N that stays uniform, smallest that specialises."""
    del predictions
    at_gain = [p for p in results["sgd"] if abs(p["ratio"] - GAIN / STRIDE) < 1e-9]
    uniform = [p["chunks"] for p in at_gain if p["support"] == STRIDE]
    special = [p["chunks"] for p in at_gain if p["support"] < STRIDE]
    if not uniform or not special:
        return []
    lo, hi = max(uniform), min(special)
    predicted = float(theory.critical_chunks(GAIN, STRIDE))
    mid, half = 0.5 * (lo + hi), 0.5 * abs(hi - lo)
    return [
        row(
            f"N_c inside the SGD bracket [{lo}, {hi}]",
            "s=8 gain=16 d=64; sgd = bracket midpoint, tolerance = half-width",
            predicted,
            sgd=mid,
            tolerance=half / predicted if hi > lo else 0.0,
        )
    ]


# ----------------------------------------------------------------------------- 4. growth rate


def _growth_configs(size: Size) -> list[tuple[int, int, float, int]]:
    """(stride, chunks, gain, heads) of the growth-rate panel."""
    configs = [(STRIDE, n, g, 1) for n in (20, 32, 64, 128, 256) for g in (12.0, 16.0, 24.0)]
    if size.name == "full":
        configs += [(s, 64, g, 1) for s in (4, 16) for g in (8.0, 16.0, 24.0)]
        configs += [(STRIDE, n, GAIN, 2) for n in (32, 64, 256)]
    return [c for c in configs if theory.growth_rate(c[0], c[1], c[2], c[3]) > 1e-3]


THRESHOLD_CHUNKS = (12.0, 14.0, 15.0, 15.5, 16.0, 16.5, 17.0, 18.0, 20.0)


def measure_growth_rate(stride, chunks, gain, heads, starts, lam_guess) -> np.ndarray:
    """Exponential rate of delta(t) in the reduced flow from tiny starts, per start (least squares).

    Fits log delta against t over the second half of a window where delta stays below 1e-3
    (for several heads the fastest mode then dominates).
    """
    horizon = min(math.log(1e3) / max(abs(lam_guess), 1e-6), 3e4)
    ts = np.linspace(0.0, horizon, 81)
    out = flow(stride=stride, heads=heads, starts=starts, chunks=chunks, gain=gain, ts=ts)
    delta = order_parameter(out["pooling_weights"])  # (B, T)
    rates = []
    for d in delta:
        keep = (ts >= horizon / 2) & (d < 1e-3)
        rates.append(np.polyfit(ts[keep], np.log(d[keep]), 1)[0] if keep.sum() > 3 else np.nan)
    return np.asarray(rates)


def run_growth_rate(size: Size, store_dir=None) -> dict:
    """Measured growth rates of delta in the reduced flow: across configs and across N at gain 16."""

    def compute():
        configs = []
        for i, (s, n, g, h) in enumerate(_growth_configs(size)):
            starts = random_starts(size.flow_starts, h, s, 1e-6, seed=10 + i)
            lam = float(theory.growth_rate(s, n, g, h))
            rates = measure_growth_rate(s, n, g, h, starts, lam)
            configs.append({"stride": s, "chunks": n, "gain": g, "heads": h, "rates": rates})
        sweep = []
        for i, n in enumerate(THRESHOLD_CHUNKS):
            starts = random_starts(size.flow_starts, 1, STRIDE, 1e-6, seed=100 + i)
            lam = float(theory.growth_rate(STRIDE, n, GAIN))
            rates = measure_growth_rate(STRIDE, n, GAIN, 1, starts, lam)
            sweep.append({"chunks": n, "rates": rates})
        return {"configs": configs, "threshold_sweep": sweep}

    return cached(store_dir, "run", "growth_rate", size, compute)


def predict_growth_rate(size: Size, results: dict, store_dir=None) -> dict:
    """lambda of THEORY 6.2 (differential rate for several heads) and N_c of THEORY 6.3."""
    del size, store_dir
    chunks = np.linspace(min(THRESHOLD_CHUNKS), max(THRESHOLD_CHUNKS), 200)
    return {
        "configs": [
            float(theory.growth_rate(c["stride"], c["chunks"], c["gain"], c["heads"]))
            for c in results["configs"]
        ],
        "sweep_chunks": chunks.tolist(),
        "sweep_rate": theory.growth_rate(STRIDE, chunks, GAIN).tolist(),
        "critical_chunks": float(theory.critical_chunks(GAIN, STRIDE)),
    }


def measured_critical_chunks(sweep) -> float:
    """N where the measured growth rate changes sign (linear interpolation), nan if it does not."""
    n = np.array([p["chunks"] for p in sweep])
    lam = np.array([np.nanmean(p["rates"]) for p in sweep])
    cross = np.nonzero((lam[:-1] < 0) & (lam[1:] >= 0))[0]
    if not cross.size:
        return math.nan
    i = int(cross[0])
    return float(n[i] - lam[i] * (n[i + 1] - n[i]) / (lam[i + 1] - lam[i]))


def rows_growth_rate(results: dict, predictions: dict) -> list[dict]:
    rows = [
        row(
            "growth rate lambda",
            f"s={c['stride']} N={c['chunks']} gain={c['gain']:g} H={c['heads']}",
            lam,
            ode=float(np.nanmean(c["rates"])),
            tolerance=0.01,
        )
        for c, lam in zip(results["configs"], predictions["configs"], strict=True)
    ]
    rows.append(
        row(
            "critical chunks N_c",
            "s=8 gain=16; ode = sign change of the measured rate",
            predictions["critical_chunks"],
            ode=measured_critical_chunks(results["threshold_sweep"]),
            tolerance=0.01,
        )
    )
    return rows


# ----------------------------------------------------------------------------- 5. time to specialise


def run_specialization_time(size: Size, store_dir=None) -> dict:
    """Time for delta to reach 0.25 against init scale: reduced flow (per start) and SGD (d = 64)."""

    def compute():
        scales = np.geomspace(1e-5, 0.3, 7 if size.name != "tiny" else 3)
        ode = []
        for i, scale in enumerate(scales):
            starts = random_starts(size.flow_starts, 1, STRIDE, scale, seed=200 + i)
            t_max = float(theory.specialization_time(STRIDE, CHUNKS, GAIN, scale)) * 2.0 + 200.0
            out = flow(
                stride=STRIDE,
                starts=starts,
                chunks=CHUNKS,
                gain=GAIN,
                ts=np.linspace(0.0, t_max, 3),
            )
            ode.append({"init_scale": scale, "times": out["specialization_time"]})
        configs = [
            base_config(size, init_scale=a, seed=s)
            for a in size.init_scales
            for s in range(size.seeds)
        ]
        sgd = []
        for c, r in zip(configs, train(configs), strict=True):
            delta = order_parameter(np.asarray(r.history.pooling_weights, float))
            sgd.append(
                {
                    "init_scale": c.init_scale,
                    "seed": c.seed,
                    "time": crossing_time(r.history.times, delta, EVENT_LEVEL),
                    "t_end": float(r.history.times[-1]),
                }
            )
        return {"ode": ode, "sgd": sgd}

    return cached(store_dir, "run", "specialization_time", size, compute)


def predict_specialization_time(size: Size, results: dict, store_dir=None) -> dict:
    """t* = (log 0.25 - E log delta_0)/lambda + tau (theory.specialization_time), over init scales."""

    def compute():
        scales = np.geomspace(1e-5, 0.3, 25)
        return {
            "init_scales": scales,
            "time": [theory.specialization_time(STRIDE, CHUNKS, GAIN, a) for a in scales],
            "at_runs": [
                theory.specialization_time(STRIDE, CHUNKS, GAIN, p["init_scale"])
                for p in results["ode"]
            ],
            "at_sgd": {
                str(a): theory.specialization_time(STRIDE, CHUNKS, GAIN, a)
                for a in sorted({p["init_scale"] for p in results["sgd"]})
            },
        }

    return cached(store_dir, "predict", "specialization_time", size, compute)


def rows_specialization_time(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for p, t in zip(results["ode"], predictions["at_runs"], strict=True):
        if abs(p["init_scale"] - 1e-2) / 1e-2 > 0.5 and abs(p["init_scale"] - 1e-4) / 1e-4 > 0.5:
            continue
        sgd = [q["time"] for q in results["sgd"] if abs(q["init_scale"] - p["init_scale"]) < 1e-12]
        rows.append(
            row(
                "time to specialise t*",
                f"s=8 N=64 gain=16 init {p['init_scale']:.2g}; mean over starts",
                t,
                ode=float(np.mean(p["times"])),
                sgd=float(np.mean(sgd)) if sgd else None,
                tolerance=0.15,
            )
        )
    return rows


# ----------------------------------------------------------------------------- 6. support size


def _support_points(size: Size) -> list[tuple[str, int, int]]:
    return [("chunks", STRIDE, n) for n in size.chunks_sweep] + [
        ("stride", s, CHUNKS) for s in size.stride_sweep
    ]


def run_support_size(size: Size, store_dir=None) -> dict:
    """Final support size and delta_max of SGD (d = 64, gain 16) against N and against s."""

    def compute():
        points = _support_points(size)
        configs = [
            base_config(size, stride=s, chunks=n, seed=seed)
            for _, s, n in points
            for seed in range(size.seeds)
        ]
        results = train(configs)
        out = []
        for axis, s, n in points:
            runs = list(
                {
                    r.config: r for r in results if (r.config.stride, r.config.chunks) == (s, n)
                }.values()
            )
            out.append(
                {
                    "axis": axis,
                    "stride": s,
                    "chunks": n,
                    "support": [int(r.summary()["support_size"][0]) for r in runs],
                    "delta_max": [r.summary()["delta_max"] for r in runs],
                }
            )
        return {"points": out}

    return cached(store_dir, "run", "support_size", size, compute)


def predict_support_size(size: Size, results: dict, store_dir=None) -> dict:
    """Support-size distribution from near-uniform starts (theory.predicted_support_size), the
    admissible set, and delta_max of the most probable k-state at d = 64 (theory.accuracy)."""

    def compute():
        out = []
        for p in results["points"]:
            s, n = p["stride"], p["chunks"]
            sizes, probs, admissible = support_prediction(s, n, GAIN, size.support_samples)
            k = int(sizes[np.argmax(probs)])
            profile = theory.phase_accuracy_profile(s, n, k, DIM, dropped_weight=1e-3)
            out.append(
                {
                    "stride": s,
                    "chunks": n,
                    "sizes": sizes,
                    "probabilities": probs,
                    "admissible": admissible,
                    "k": k,
                    "delta_max": float(theory.delta_max(profile)),
                }
            )
        return {"points": out}

    return cached(store_dir, "predict", "support_size", size, compute)


def rows_support_size(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for p, q in zip(results["points"], predictions["points"], strict=True):
        cfg = f"s={p['stride']} N={p['chunks']} gain=16 d=64"
        rows.append(
            row("support size k (SGD mode)", cfg, q["k"], sgd=_mode(p["support"]), tolerance=0.0)
        )
        rows.append(
            row(
                "delta_max of the k-state",
                cfg,
                q["delta_max"],
                sgd=float(np.mean(p["delta_max"])),
                tolerance=0.1,
                floor=1.0,
            )
        )
    return rows


# ----------------------------------------------------------------------------- 7. head ablation


def run_head_ablation(size: Size, store_dir=None) -> dict:
    """Ablation maps (accuracy drop when head h is removed, per phase) for H = 1, 2, 4, 8."""
    from sims.analysis import ablate

    def compute():
        configs = [base_config(size, heads=h) for h in size.heads]
        out = []
        for c, r in zip(configs, train(configs), strict=True):
            res = ablate(c, r.model, samples=size.ablate_samples)
            out.append(
                {
                    "heads": c.heads,
                    "effect": res["effect"],
                    "effect_ci": res["effect_ci"],
                    "predicted_effect": res.get("predicted_effect"),
                    "phase_accuracy": res["phase_accuracy"],
                    "pooling_weights": res["pooling_weights"],
                    "samples": res["samples"],
                }
            )
        return {"maps": out}

    return cached(store_dir, "run", "head_ablation", size, compute)


def predict_head_ablation(size: Size, results: dict, store_dir=None) -> dict:
    """Best-head rule of theory.interventions applied to each model's pooling weights."""
    del size, store_dir
    return {
        "maps": [{"heads": m["heads"], "effect": m["predicted_effect"]} for m in results["maps"]]
    }


def rows_head_ablation(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for m, p in zip(results["maps"], predictions["maps"], strict=True):
        if p["effect"] is None:
            continue
        measured, predicted = np.asarray(m["effect"]), np.asarray(p["effect"])
        # Compare the total ablation effect; the per-cell worst error is in the config column.
        worst = float(np.max(np.abs(measured - predicted)))
        rows.append(
            row(
                "total ablation effect (sum over heads, phases)",
                f"H={m['heads']} s=8 N=64 d=64 gain=16; worst cell |err| {worst:.3f}",
                float(predicted.sum()),
                sgd=float(measured.sum()),
                tolerance=0.15,
                floor=0.5,
            )
        )
    return rows


# ----------------------------------------------------------------------------- 8. operators

GRAM_OPERATORS = ("softmax_pool", "mean_pool", "linear")
KEY_OPERATORS = ("max_pool", "low_rank", "deepseek_v4")


def run_operators(size: Size, store_dir=None) -> dict:
    """delta_max, psc and mean accuracy of each compression operator, same budget, over seeds."""
    from sims.analysis import compare_operators

    def compute():
        ops = GRAM_OPERATORS + (KEY_OPERATORS if size.real_keys else ())
        seeds = list(range(size.seeds))
        out = compare_operators(base_config(size), ops, seeds)
        return {
            "operators": list(ops),
            "results": out,
            "skipped": [o for o in KEY_OPERATORS if o not in ops],
        }

    return cached(store_dir, "run", "operators", size, compute)


def predict_operators(size: Size, results: dict, store_dir=None) -> dict:
    """softmax_pool: the most probable k-state (THEORY 6.4) at d = 64; mean_pool: uniform pooling."""

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
                "psc": float(theory.psc(acc)),
                "mean_accuracy": float(np.mean(acc)),
            }
        return out

    return cached(store_dir, "predict", "operators", size, compute)


def rows_operators(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for op, pred in predictions.items():
        res = results["results"].get(op, {})
        if "delta_max" not in res:
            continue
        for metric in ("delta_max", "mean_accuracy"):
            rows.append(
                row(
                    f"{metric} ({op})",
                    "s=8 N=64 d=64 gain=16, 600 SGD steps; mean over seeds",
                    pred[metric],
                    sgd=res[metric]["mean"],
                    tolerance=0.1,
                    floor=1.0,
                )
            )
    return rows


# ----------------------------------------------------------------------------- 9. RoPE anchoring

ROPE_DIM = 64


def run_rope_anchoring(size: Size, store_dir=None) -> dict:
    """Per-phase accuracy with RoPE-anchored compressed keys: fixed mean pooling (no training)
    and, at full size, trained softmax pooling."""

    def compute():
        out = {"rope_dim": ROPE_DIM, "cases": []}
        fixed = base_config(size, operator="mean_pool", rope_anchor=True, rope_dim=ROPE_DIM)
        hyper = jax.tree.map(lambda x: x[0], Hyper.stack([fixed]))
        model = init(fixed.static, hyper).model
        acc, _ = evaluate(fixed.static, model)
        out["cases"].append(
            {
                "name": "mean_pool (fixed)",
                "phase_accuracy": np.asarray(acc),
                "pooling_weights": np.full((1, STRIDE), 1.0 / STRIDE),
                "samples": fixed.eval_samples,
            }
        )
        if size.real_keys:
            trained_cfg = base_config(size, rope_anchor=True, rope_dim=ROPE_DIM)
            (r,) = train([trained_cfg])
            out["cases"].append(
                {
                    "name": "softmax_pool (trained)",
                    "phase_accuracy": r.summary()["phase_accuracy"],
                    "pooling_weights": r.summary()["pooling_weights"],
                    "samples": trained_cfg.eval_samples,
                }
            )
        return out

    return cached(store_dir, "run", "rope_anchoring", size, compute)


def predict_rope_anchoring(size: Size, results: dict, store_dir=None) -> dict:
    """kappa(phi) attenuation (theory.interventions.rope_phase_scale) and the accuracy it implies;
    for the trained case, the reduced flow of the anchored loss from the run's own start."""
    from sims.analysis import predicted_phase_accuracy

    def compute():
        out = {"kappa": tint.rope_phase_scale(np.arange(STRIDE), DIM, ROPE_DIM), "cases": []}
        for case in results["cases"]:
            if case["name"].startswith("mean_pool"):
                acc = tint.phase_accuracy(
                    np.asarray(case["pooling_weights"]), GAIN, CHUNKS, DIM, rope_dim=ROPE_DIM
                )
            else:
                acc = predicted_phase_accuracy(
                    base_config(size, rope_anchor=True, rope_dim=ROPE_DIM)
                )
            out["cases"].append(
                {"name": case["name"], "phase_accuracy": acc, "spectrum": harmonic_spectrum(acc)}
            )
        return out

    return cached(store_dir, "predict", "rope_anchoring", size, compute)


def rows_rope_anchoring(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for case, pred in zip(results["cases"], predictions["cases"], strict=True):
        measured, predicted = np.asarray(case["phase_accuracy"]), np.asarray(pred["phase_accuracy"])
        se = math.sqrt(0.25 / case["samples"])
        worst = int(np.argmax(np.abs(measured - predicted)))
        rows.append(
            row(
                f"RoPE per-phase accuracy, worst phase |error| ({case['name']})",
                f"s=8 N=64 d=64 rope_dim={ROPE_DIM}; at phase {worst}",
                float(predicted[worst]),
                sgd=float(measured[worst]),
                tolerance=0.02 + 3 * se,
                floor=1.0,
            )
        )
        rows.append(
            row(
                f"RoPE delta_max ({case['name']})",
                f"s=8 N=64 d=64 rope_dim={ROPE_DIM}",
                float(theory.delta_max(predicted)),
                sgd=float(theory.delta_max(measured)),
                tolerance=0.1,
                floor=1.0,
            )
        )
    return rows


# ----------------------------------------------------------------------------- 10. mitigations


def run_mitigations(size: Size, store_dir=None) -> dict:
    """Each mitigation of sims.analysis.MITIGATIONS with 2 heads: measured and predicted, and cost."""
    from sims.analysis import MITIGATIONS, compare_mitigations

    def compute():
        base = base_config(size, heads=2)
        out = compare_mitigations(base, MITIGATIONS, list(range(size.seeds)))
        return {"heads": 2, "mitigations": out}

    return cached(store_dir, "run", "mitigations", size, compute)


def predict_mitigations(size: Size, results: dict, store_dir=None) -> dict:
    """The predictions are computed with the runs (reduced flow from each run's own start)."""
    del size, store_dir
    return {
        name: {
            "delta_max": m["predicted_delta_max"],
            "mean_accuracy": m["predicted_mean_accuracy"],
            "cost": m["cost"],
        }
        for name, m in results["mitigations"].items()
    }


def rows_mitigations(results: dict, predictions: dict) -> list[dict]:
    return [
        row(
            f"delta_max with {name}",
            "s=8 N=64 d=64 gain=16 H=2; flow from each run's start",
            predictions[name]["delta_max"]["mean"],
            sgd=m["delta_max"]["mean"],
            tolerance=0.15,
            floor=1.0,
        )
        for name, m in results["mitigations"].items()
    ]


# ----------------------------------------------------------------------------- 11. finite-d accuracy


def finite_d_cases() -> list[dict]:
    """Pooling weights whose accuracy figure 11 checks: uniform (N = 12, 64) and the 3-phase state."""
    three = theory.support_weights(STRIDE, 3)
    three = np.where(three > 0, three, 1e-3)
    return [
        {
            "label": "uniform, N=12",
            "chunks": 12,
            "weights": np.full(STRIDE, 1 / STRIDE),
            "phase": 0,
        },
        {
            "label": "uniform, N=64",
            "chunks": 64,
            "weights": np.full(STRIDE, 1 / STRIDE),
            "phase": 0,
        },
        {
            "label": "3-phase state, covered",
            "chunks": 64,
            "weights": three / three.sum(),
            "phase": 0,
        },
        {
            "label": "3-phase state, dropped",
            "chunks": 64,
            "weights": three / three.sum(),
            "phase": 7,
        },
    ]


def monte_carlo_accuracy(weights, chunks, dim, phase, samples, seed=0) -> float:
    """Fraction of needles retrieved by one head with fixed pooling `weights` (Monte Carlo)."""
    config = TrainConfig(operator="linear", chunks=chunks, dim=dim).model
    model = init_model(jax.random.key(0), config, GAIN, 0.0, DTYPE)
    model = eqx.tree_at(
        lambda m: m.compressor, model, LinearPool(jnp.asarray(weights, DTYPE)[None])
    )
    key = jax.random.fold_in(jax.random.key(seed), dim)
    ok, _ = _correct_at_phase(model, key, config, samples, jnp.asarray(phase))
    return float(np.mean(np.asarray(ok)))


def run_finite_d_accuracy(size: Size, store_dir=None) -> dict:
    """Monte Carlo accuracy of fixed pooling weights at several d (inner-product sampler)."""

    def compute():
        out = []
        for case in finite_d_cases():
            acc = [
                monte_carlo_accuracy(
                    case["weights"], case["chunks"], d, case["phase"], size.mc_samples
                )
                for d in size.dims
            ]
            out.append({**case, "dims": list(size.dims), "accuracy": acc})
        return {"cases": out, "samples": size.mc_samples}

    return cached(store_dir, "run", "finite_d_accuracy", size, compute)


def predict_finite_d_accuracy(size: Size, results: dict, store_dir=None) -> dict:
    """Exact chi-conditioned formula (THEORY 6.12) and THEORY 7's Gaussian approximation."""
    del size, store_dir
    dims = np.unique(np.round(np.geomspace(8, 2048, 40)).astype(int))
    out = []
    for case in results["cases"]:
        w, n, phi = np.asarray(case["weights"]), case["chunks"], case["phase"]
        out.append(
            {
                "dims": dims,
                "exact": [theory.phase_accuracy(w, GAIN, n, d)[phi] for d in dims],
                "gaussian": [theory.phase_accuracy_gaussian(w, GAIN, n, d)[phi] for d in dims],
                "at_runs": [theory.phase_accuracy(w, GAIN, n, d)[phi] for d in case["dims"]],
            }
        )
    return {"cases": out}


def rows_finite_d_accuracy(results: dict, predictions: dict) -> list[dict]:
    """Tolerance: 3 Monte Carlo standard errors (plus 0.5 points), relative to the prediction."""
    rows = []
    n = results["samples"]
    for case, pred in zip(results["cases"], predictions["cases"], strict=True):
        for d, mc, p in zip(case["dims"], case["accuracy"], pred["at_runs"], strict=True):
            se = math.sqrt(max(p * (1 - p), 1e-4) / n)
            rows.append(
                row(
                    "finite-d accuracy (exact formula vs Monte Carlo)",
                    f"{case['label']} d={d}",
                    p,
                    sgd=mc,
                    tolerance=(3 * se + 0.005) / max(p, 0.05),
                    floor=0.05,
                )
            )
    return rows


# ----------------------------------------------------------------------------- 12. learned gain


def _gain_slope(beta, stride, chunks, weight_decay):
    """dL/dbeta at uniform pooling, L = c (1 - sigma_N(beta/s))^2 + wd/2 beta^2 (THEORY 5, 6.6)."""
    c = chunks / (chunks - 1.0)
    sig = 1.0 / (1.0 + (chunks - 1.0) * np.exp(-np.asarray(beta, float) / stride))
    return -2.0 * c * sig * (1.0 - sig) ** 2 / stride + weight_decay * beta


def equilibrium_gain(stride, chunks, weight_decay, start=1.0) -> float:
    """Adapter (not yet in theory/): the gain a flow from `start` settles at under uniform pooling.

    The first zero of dL/dbeta above `start` where it turns from negative to positive
    (bisection); inf for wd = 0 (the gain then grows without bound).
    """
    grid = np.geomspace(start, 1e4, 4000)
    slope = _gain_slope(grid, stride, chunks, weight_decay)
    up = np.nonzero((slope[:-1] < 0) & (slope[1:] > 0))[0]
    if not up.size:
        return math.inf
    lo, hi = grid[up[0]], grid[up[0] + 1]
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _gain_slope(mid, stride, chunks, weight_decay) < 0 else (lo, mid)
    return float(0.5 * (lo + hi))


def race_growth(stride, chunks, weight_decay, start_gain, t_end) -> tuple[np.ndarray, np.ndarray]:
    """Adapter (not yet in theory/): the race of THEORY 6.6 in the linear regime.

    While pooling is near uniform the gain follows dbeta/dt = -dL/dbeta at uniform pooling
    (the linear gain parametrisation of THEORY 6.6) and the perturbation delta grows as
    exp(int lambda(beta(t)) dt), lambda of THEORY 6.2 (negative once beta > beta_c).
    Returns (times, cumulative growth exponent); delta is predicted to reach 0.25 when
    log delta_0 + max_t growth >= log 0.25.
    """
    beta, t, times, growth, total = float(start_gain), 0.0, [0.0], [0.0], 0.0

    def rate(b):
        return -float(_gain_slope(b, stride, chunks, weight_decay))

    while t < t_end:
        dt = min(max(0.25, 0.002 * t), t_end - t)
        lam0 = float(theory.growth_rate(stride, chunks, beta))
        k1 = rate(beta)
        k2 = rate(beta + 0.5 * dt * k1)
        k3 = rate(beta + 0.5 * dt * k2)
        k4 = rate(beta + dt * k3)
        beta += dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        lam1 = float(theory.growth_rate(stride, chunks, beta))
        total += 0.5 * dt * (lam0 + lam1)
        t += dt
        times.append(t)
        growth.append(total)
    return np.asarray(times), np.asarray(growth)


def run_learned_gain(size: Size, store_dir=None) -> dict:
    """Reduced flow with the gain learned from 1.0 under weight decay wd: gain and specialisation."""

    def compute():
        wds = np.asarray(size.weight_decays, float)
        ts = np.concatenate([[0.0], np.geomspace(1.0, 2e5, 120)])
        starts = random_starts(len(wds), 1, STRIDE, 0.01, seed=7)
        out = flow(
            stride=STRIDE,
            starts=starts,
            chunks=CHUNKS,
            gain=1.0,
            ts=ts,
            learn_gain=1.0,
            weight_decay=wds,
            gain_param="linear",
        )
        w = out["pooling_weights"][:, :, 0]
        return {
            "times": ts,
            "weight_decays": wds,
            "gain": out["gain"][:, :, 0],
            "specialization_index": specialization_index(w),
            "support": support_size(w[:, -1]),
            "start_order": order_parameter(np.exp(starts)),  # softmax up to a constant
            "start_gain": 1.0,
            "event_time": out["specialization_time"],
        }

    return cached(store_dir, "run", "learned_gain", size, compute)


def predict_learned_gain(size: Size, results: dict, store_dir=None) -> dict:
    """beta_c (THEORY 6.3), the uniform-state equilibrium gain per wd, and the race: the
    instability wins (pooling specialises) when log delta_0 + max_t int lambda(beta(t)) dt
    reaches log 0.25 (the event of theory.specialization_time) along the uniform-state gain path."""

    def compute():
        beta_c = float(theory.critical_gain(CHUNKS, STRIDE))
        t_end = float(results["times"][-1])
        out = {"critical_gain": beta_c, "equilibrium_gain": [], "specialises": [], "margin": []}
        for wd, d0 in zip(results["weight_decays"], results["start_order"], strict=True):
            _, growth = race_growth(STRIDE, CHUNKS, wd, results["start_gain"], t_end)
            margin = math.log(d0) + float(growth.max()) - math.log(EVENT_LEVEL)
            out["equilibrium_gain"].append(equilibrium_gain(STRIDE, CHUNKS, wd))
            out["margin"].append(margin)
            out["specialises"].append(bool(margin >= 0))
        return out

    return cached(store_dir, "predict", "learned_gain", size, compute)


def rows_learned_gain(results: dict, predictions: dict) -> list[dict]:
    """The race (does delta reach 0.25?) and, for runs that end uniform, the equilibrium gain."""
    rows = []
    for i, wd in enumerate(results["weight_decays"]):
        reached = math.isfinite(results["event_time"][i])
        rows.append(
            row(
                "learned gain race: delta reaches 0.25 (1) or not (0)",
                f"s=8 N=64 gain0=1 wd={wd:g}; margin {predictions['margin'][i]:+.2f}",
                float(predictions["specialises"][i]),
                ode=float(reached),
                tolerance=0.0,
                floor=1.0,
            )
        )
        eq = predictions["equilibrium_gain"][i]
        if results["support"][i] == STRIDE and math.isfinite(eq):
            rows.append(
                row(
                    "learned gain: uniform-state equilibrium",
                    f"s=8 N=64 wd={wd:g}; ode = gain at t=2e5",
                    eq,
                    ode=float(results["gain"][i][-1]),
                    tolerance=0.02,
                )
            )
    return rows


# ----------------------------------------------------------------------------- registry


def experiment(name: str):
    """(run, predict, rows) of figure `name`."""
    if name not in FIGURES:
        raise KeyError(f"unknown figure {name!r}; one of {', '.join(FIGURES)}")
    g = globals()
    return g[f"run_{name}"], g[f"predict_{name}"], g[f"rows_{name}"]


def agreement_rows(name: str, results: dict, predictions: dict) -> list[dict]:
    """The agreement rows of one figure's runs (the `weakspots check` row format)."""
    return experiment(name)[2](results, predictions)

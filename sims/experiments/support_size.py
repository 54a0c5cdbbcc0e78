"""Figure 6, support size: simulations (`run`), theory (`predict`), agreement rows (`rows`)."""

from __future__ import annotations

import functools

import numpy as np

from weakspots import theory
from weakspots.idealized.config import TrainConfig
from weakspots.sims.experiments._common import (
    CHUNKS,
    DIM,
    GAIN,
    STRIDE,
    Size,
    _mode,
    base_config,
    cached,
    row,
    support_prediction,
    train,
)

DELTA_MAX_TOLERANCE = 0.1  # absolute, for the specialised k-states (k < s)
# k = s: the row passes inside this central interval of the predicted seed-mean delta_max
# (95%: a false alarm in one such row in 20 runs of the table).
NOISE_FLOOR_LEVEL = 0.95


def _support_points(size: Size) -> list[tuple[str, int, int]]:
    return [("chunks", STRIDE, n) for n in size.chunks_sweep] + [
        ("stride", s, CHUNKS) for s in size.stride_sweep
    ]


UNIFORM_SEEDS = 4  # at least this many SGD seeds where uniform pooling is stable


def _seeds(size: Size, stride: int, chunks: int) -> int:
    """SGD seeds at one point. Below the threshold the row compares a seed mean with the
    noise floor, whose 95% interval for a mean of 2 runs is too wide to say much (one
    outlying run moves it): there it takes at least UNIFORM_SEEDS."""
    below = chunks < float(theory.critical_chunks(GAIN, stride))
    return max(size.seeds, UNIFORM_SEEDS) if below else size.seeds


def configs_support_size(size: Size) -> list[TrainConfig]:
    """SGD at every (s, N) point of the two sweeps, `_seeds` seeds each."""
    return [
        base_config(size, stride=s, chunks=n, seed=seed)
        for _, s, n in _support_points(size)
        for seed in range(_seeds(size, s, n))
    ]


def run_support_size(size: Size, store_dir=None) -> dict:
    """Final support size and delta_max of SGD (d = 64, gain 16) against N and against s."""

    def compute():
        points = _support_points(size)
        results = train(configs_support_size(size))
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


def uniform_noise_floor(size: Size, stride: int, chunks: int) -> dict:
    """theory.noise_floor for SGD at uniform pooling with this size's runs (config and seeds)."""
    c = base_config(size, stride=stride, chunks=chunks)
    return theory.noise_floor(
        stride,
        chunks,
        DIM,
        GAIN,
        c.lr,
        c.batch,
        c.steps,
        c.eval_samples,
        c.loss,
        c.init_scale,
        seeds=_seeds(size, stride, chunks),
        level=NOISE_FLOOR_LEVEL,
    )


def finite_d_starts(size: Size) -> int:
    """Isotropic starts of the d = 64 flow: half the d = inf count (each costs ~10x more; the
    finite-d outcome is measured to be a near-single k at every point), at least 16."""
    return max(16, size.support_samples // 2)


@functools.cache
def finite_d_support(stride, chunks, samples) -> tuple:
    """theory.predicted_support_size under L_d at d = DIM, memoised in-process."""
    return theory.predicted_support_size(stride, chunks, GAIN, samples=samples, dim=DIM)


def metastable_uniform(stride, chunks, admissible) -> bool:
    """Uniform stable at d = DIM, but an admissible (s-1)-phase state lies below it in L_d."""
    return stride - 1 in admissible and theory.finite_d_support_loss(
        stride, chunks, GAIN, DIM, stride - 1
    ) < theory.finite_d_support_loss(stride, chunks, GAIN, DIM, stride)


ESCAPE_SAMPLES = 2**14  # Monte Carlo problems for the gradient noise along the escape path


ESCAPE_CHAINS = 256  # chains of theory.escape_fraction_discrete (binomial error ~0.03)


def uniform_escape(size: Size, stride: int, chunks: int) -> dict:
    """P(a run has left the uniform well by the end of training).

    p_escape: theory.escape_fraction_discrete, the SGD recursion on L_d with the escape
    path's gradient noise (all zero-sum modes, discrete steps); p_passage: the 1-D
    first-passage model (theory.escape_rate, continuous time), kept for comparison (it
    over-predicts at lr 2: 0.72 against SGD's ~0.3-0.4). The path's loss and curvatures are
    L_d's (theory.escape_path_finite_d), its noise Monte Carlo. Returns escape_rate's dict
    with p_passage and p_escape added.
    """
    c = base_config(size, stride=stride, chunks=chunks)
    path = theory.escape_path_finite_d(stride, chunks, DIM, GAIN, samples=ESCAPE_SAMPLES)
    escape = theory.escape_rate(path, stride, c.lr, c.batch)
    discrete = theory.escape_fraction_discrete(
        path, stride, chunks, DIM, GAIN, c.lr, c.batch, c.steps, c.init_scale, ESCAPE_CHAINS
    )
    passage = theory.escape_probability(escape["rate"], c.lr * c.steps)
    return escape | {"p_passage": passage, "p_escape": discrete}


def predict_support_size(size: Size, results: dict, store_dir=None) -> dict:
    """Support-size distribution from near-uniform starts and delta_max of the state reached.

    The distribution comes from the flow of the finite-d expected loss L_d at d = 64, the
    SGD runs' dimension (theory.predicted_support_size(dim=64), admissible sizes at d = 64);
    the d = inf flow's distribution is kept beside it (sizes_inf, probabilities_inf). delta_max
    is that of the most probable k-state at d = 64 (theory.accuracy). Where uniform pooling
    is stable (k = s) the k-state's delta_max is 0 and what SGD shows is its noise floor
    (theory.noise_floor): the prediction is the expected delta_max, and the tolerance the
    predicted 95% interval of the mean over this size's seeds (its wider side). Where at
    d = 64 uniform is only metastable (an (s-1)-phase state is admissible too and lower past
    a saddle), runs escape with uniform_escape's p_escape (theory.escape_fraction_discrete),
    and the prediction is the mixture of floor and escaped state (theory.delta_max_with_escape);
    a run's most probable support (`mode`) is then s - 1 where p_escape > 1/2 (at --full,
    s=8 N=16: p_escape 0.99, SGD's mode 7), else the flow's k.
    """

    def compute():
        out = []
        for p in results["points"]:
            s, n = p["stride"], p["chunks"]
            sizes_inf, probs_inf, admissible_inf = support_prediction(
                s, n, GAIN, size.support_samples
            )
            sizes, probs, admissible = finite_d_support(s, n, finite_d_starts(size))
            k = int(sizes[np.argmax(probs)])
            profile = theory.phase_accuracy_profile(s, n, k, DIM, dropped_weight=1e-3)
            point = {
                "stride": s,
                "chunks": n,
                "sizes": sizes,
                "probabilities": probs,
                "admissible": admissible,
                "sizes_inf": sizes_inf,
                "probabilities_inf": probs_inf,
                "admissible_inf": admissible_inf,
                "k": k,
                "mode": k,  # the most probable support of a run, escapes included
                "delta_max": float(theory.delta_max(profile)),
                "delta_max_tolerance": DELTA_MAX_TOLERANCE,
            }
            if k == s:
                floor = uniform_noise_floor(size, s, n)
                mean = floor["delta_max_mean"]
                low, high = floor["mean_of_seeds_interval"]
                point["noise_floor"] = floor
                if metastable_uniform(s, n, admissible):
                    escape = uniform_escape(size, s, n)
                    escaped = theory.phase_accuracy_profile(s, n, s - 1, DIM, dropped_weight=1e-3)
                    mixture = theory.delta_max_with_escape(
                        floor,
                        s,
                        escape["p_escape"],
                        float(theory.delta_max(escaped)),
                        seeds=_seeds(size, s, n),
                        level=NOISE_FLOOR_LEVEL,
                    )
                    mean = mixture["delta_max_mean"]
                    low, high = mixture["mean_of_seeds_interval"]
                    point["escape"] = escape
                    if escape["p_escape"] > 0.5:  # most runs leave uniform, for s - 1 phases
                        point["mode"] = s - 1
                point["delta_max"] = mean
                point["delta_max_tolerance"] = max(high - mean, mean - low)
            out.append(point)
        return {"points": out}

    return cached(store_dir, "predict", "support_size", size, compute)


def rows_support_size(results: dict, predictions: dict) -> list[dict]:
    rows = []
    for p, q in zip(results["points"], predictions["points"], strict=True):
        cfg = f"s={p['stride']} N={p['chunks']} gain=16 d=64"
        name = "support size k (SGD mode; L_d flow at d=64)"
        if "escape" in q:
            name = "support size k (SGD mode; L_d flow at d=64, escapes to s - 1 phases)"
        rows.append(row(name, cfg, q["mode"], sgd=_mode(p["support"]), tolerance=0.0))
        if "escape" in q:
            name = "delta_max: floor + escapes (k = s metastable; P(escape) of the L_d recursion)"
            esc = q["escape"]
            cfg += f" P(escape)={esc['p_escape']:.2f} (1-D passage {esc['p_passage']:.2f})"
        elif q["k"] == p["stride"]:
            name = "delta_max noise floor (k = s)"
        else:
            name = "delta_max of the k-state"
        rows.append(
            row(
                name,
                cfg,
                q["delta_max"],
                sgd=float(np.mean(p["delta_max"])),
                tolerance=q.get("delta_max_tolerance", DELTA_MAX_TOLERANCE),
                floor=1.0,
            )
        )
    return rows

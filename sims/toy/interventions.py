"""Interventions on trained models, phase by phase, and operator and mitigation comparisons.

Interventions (on one trained model, on fixed held-out needles, all paired: every
intervention sees the same needles as the intact model):

* ablation: drop head h from the head average, `Pbar = mean_{g != h} P_g`;
* pooling patch: set head h's weight on the slot holding a phase-phi needle to 0 or to
  1/s (no renormalising), evaluated on phase-phi needles;
* activation patching: a corrupted context replaces the needle's key by a fresh one (the
  query is unchanged, so no key matches it); head h's compressed keys of the entry holding
  the needle are restored from the clean context (equivalently its logit there, which
  depends on nothing else).

Each comes with the theory's prediction (`theory.interventions`) from the pooling weights.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.metrics import (
    delta_max,
    paired_interval,
    phase_sensitivity,
    runs_interval,
    wilson_interval,
)
from weakspots.idealized.operators.registry import lookup
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.compression import LinearPool
from weakspots.idealized.toy.config import ModelConfig, TrainConfig
from weakspots.idealized.toy.loss import batch_logits
from weakspots.idealized.toy.model import RetrievalModel, initial_pooling_logits
from weakspots.idealized.toy.task import Batch, sample_batch
from weakspots.idealized.xla import filter_jit, jit
from weakspots.sims.toy.train import DTYPE, TrainingDiverged, train_many
from weakspots.theory import interventions as theory

SLICE = 256  # needles per evaluation slice (bounds memory on the real-key path)


@functools.partial(jit, static_argnums=(1, 2, 3))
def _needle_slice(key, task: ModelConfig, size: int, keys: bool, phase) -> Batch:
    return sample_batch(key, task, size, keys=keys, phase=phase, dtype=DTYPE)


def _needles(config: TrainConfig, phase: int, samples: int, keys: bool) -> list[Batch]:
    size = math.gcd(samples, SLICE)
    base = jax.random.fold_in(jax.random.key(config.eval_seed + 7), phase)
    # The needles depend on the task's shape alone (sample_batch reads no head or pooling
    # field): one compiled sampler serves every head count and variant of that shape.
    m = config.model
    task = ModelConfig(
        stride=m.stride, chunks=m.chunks, dim=m.dim, rope_dim=m.rope_dim, rope_anchor=m.rope_anchor
    )
    return [
        _needle_slice(jax.random.fold_in(base, i), task, size, keys, phase)
        for i in range(samples // size)
    ]


def _corrupt(batch: Batch, key) -> Batch:
    rows = jnp.arange(batch.target.shape[0])
    fresh = jax.random.normal(key, batch.query.shape, batch.keys.dtype) / jnp.sqrt(
        jnp.asarray(batch.query.shape[1], batch.keys.dtype)
    )
    return Batch(
        target=batch.target,
        phase=batch.phase,
        keys=batch.keys.at[rows, batch.target, batch.phase].set(fresh),
        query=batch.query,
    )


def _correct(probs, target):
    return jnp.argmax(probs, axis=-1) == target


def _slot(model: RetrievalModel, config: TrainConfig, head: int, phase: int) -> int:
    offset = model.head_offsets(config.stride)[head]
    head_phase = (phase - offset) % config.stride
    return config.stride + head_phase if config.overlap else head_phase


def _patched(model: RetrievalModel, head: int, slot: int, value: float) -> RetrievalModel:
    weights = model.compressor.phase_weights()
    return eqx.tree_at(lambda m: m.compressor, model, LinearPool(weights.at[head, slot].set(value)))


@filter_jit
def _intervene(model, batch, clean_keys, corrupted_keys):
    logits = batch_logits(model, batch)
    probs = jax.nn.softmax(logits, axis=-1)
    heads = probs.shape[1]
    total = jnp.sum(probs, axis=1)
    full = _correct(total, batch.target)
    ablated = jax.vmap(lambda h: _correct(total - probs[:, h], batch.target))(jnp.arange(heads))
    clean = batch_logits(model, clean_keys)
    corrupt = batch_logits(model, corrupted_keys)
    rows = jnp.arange(batch.target.shape[0])

    def restore(h):
        z = corrupt.at[rows, h, batch.target].set(clean[rows, h, batch.target])
        return _correct(jnp.mean(jax.nn.softmax(z, axis=-1), axis=1), batch.target)

    corrupted = _correct(jnp.mean(jax.nn.softmax(corrupt, axis=-1), axis=1), batch.target)
    return full, ablated, corrupted, jax.vmap(restore)(jnp.arange(heads))


@filter_jit
def _accuracy(model, batch):
    probs = jnp.mean(jax.nn.softmax(batch_logits(model, batch), axis=-1), axis=1)
    return _correct(probs, batch.target)


def _paired(drop: np.ndarray) -> tuple[float, list[float]]:
    # drop: per-needle differences in {-1, 0, 1}; a normal interval on their mean.
    mean, lo, hi = paired_interval(drop)
    return mean, [lo, hi]


def effect_specialization(effect) -> np.ndarray:
    """Per head, `1 - entropy(e+ / sum e+) / log(s)` of its positive ablation effects (or 0)."""
    e = np.clip(np.asarray(effect, float), 0.0, None)
    total = e.sum(axis=-1, keepdims=True)
    p = np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    logs = np.log(np.where(p > 0, p, 1.0))
    entropy = -np.sum(p * logs, axis=-1)
    return np.where(total[:, 0] > 0, 1.0 - entropy / math.log(e.shape[-1]), 0.0)


def _variant(config: TrainConfig, model: RetrievalModel) -> dict:
    return {
        "offsets": np.asarray(model.head_offsets(config.stride)),
        "overlap": config.overlap,
        "rope_dim": config.rope_dim if config.rope_anchor else 0,
    }


PREDICTIONS = ("phase_accuracy", "effect", "activation_patch", "patch")


def ablate(
    config: TrainConfig,
    model: RetrievalModel,
    samples: int | None = None,
    predictions: Sequence[str] = PREDICTIONS,
    pooling_patches: bool = True,
) -> dict:
    """Every intervention on one trained model, measured and predicted, as plain values.

    Returns `phase_accuracy` (s,), `effect` (H, s) ablation drop with `effect_ci` (H, s, 2),
    `predicted_effect`, `patch_zero` / `patch_uniform` (H, s) pooling-patch drops with
    their predictions (phase-weighted operators only, else None), `activation_patch`
    (H, s) accuracy restored over the corrupted context (`corrupted_accuracy` (s,)) and
    its prediction, `specialization` (H,) from the effect matrix, `pooling_weights`.
    `predictions`: which of PREDICTIONS to compute (`predicted_<name>`; "patch" gives
    `predicted_patch_zero` and `predicted_patch_uniform`), each a few readout_accuracy calls.
    `pooling_patches=False` skips the pooling patches (2 H s evaluations; their entries None).
    """
    samples = samples or config.eval_samples
    heads, stride = config.heads, config.stride
    phase_weighted = model.compressor.phase_weighted
    patching = phase_weighted and pooling_patches
    acc = np.zeros(stride)
    effect = np.zeros((heads, stride))
    effect_ci = np.zeros((heads, stride, 2))
    corrupted_acc = np.zeros(stride)
    restored = np.zeros((heads, stride))
    patch = {0: np.zeros((heads, stride)), 1: np.zeros((heads, stride))}
    for phase in range(stride):
        keys = _needles(config, phase, samples, keys=True)
        batches = keys if not model.uses_gram else _needles(config, phase, samples, keys=False)
        outs = []
        for i, (batch, clean) in enumerate(zip(batches, keys, strict=True)):
            corrupted = _corrupt(
                clean, jax.random.fold_in(jax.random.key(config.eval_seed + 11), i)
            )
            outs.append(_intervene(model, batch, clean, corrupted))
        full, ablated, corrupt, restore = (
            np.concatenate([np.asarray(o[k]) for o in outs], axis=-1) for k in range(4)
        )
        acc[phase] = full.mean()
        corrupted_acc[phase] = corrupt.mean()
        for h in range(heads):
            effect[h, phase], effect_ci[h, phase] = _paired(
                full.astype(float) - ablated[h].astype(float)
            )
            restored[h, phase] = restore[h].mean() - corrupt.mean()
            if patching:
                slot = _slot(model, config, h, phase)
                for which, value in ((0, 0.0), (1, 1.0 / stride)):
                    patched = _patched(model, h, slot, value)
                    hits = np.concatenate([np.asarray(_accuracy(patched, b)) for b in batches])
                    patch[which][h, phase] = full.mean() - hits.mean()
    weights = model.pooling_weights()
    weights = None if weights is None else np.asarray(weights, float)
    gain = np.asarray(model.gain, float)
    out = {
        "phase_accuracy": acc.tolist(),
        "phase_accuracy_ci": wilson_interval(acc, samples).tolist(),
        "effect": effect.tolist(),
        "effect_ci": effect_ci.tolist(),
        "specialization": effect_specialization(effect).tolist(),
        "corrupted_accuracy": corrupted_acc.tolist(),
        "activation_patch": restored.tolist(),
        "pooling_weights": None if weights is None else weights.tolist(),
        "patch_zero": patch[0].tolist() if patching else None,
        "patch_uniform": patch[1].tolist() if patching else None,
        "samples": samples,
    }
    if weights is not None and lookup(config.operator).phase_weighted:
        variant = _variant(config, model)
        args = (weights, gain, config.chunks, config.dim)
        predict = {
            "phase_accuracy": theory.readout_accuracy,
            "effect": theory.ablation_effect,
            "activation_patch": theory.activation_patch_effect,
        }
        for name, predict_fn in predict.items():
            if name in predictions:
                out[f"predicted_{name}"] = predict_fn(*args, **variant).tolist()
        if "patch" in predictions and not (config.stagger or config.overlap or config.rope_anchor):
            out["predicted_patch_zero"] = theory.pooling_patch_effect(*args, 0.0).tolist()
            out["predicted_patch_uniform"] = theory.pooling_patch_effect(
                *args, 1.0 / stride
            ).tolist()
    return out


def _interval(values, low=-math.inf, high=math.inf, samples: int | None = None) -> dict:
    """Mean over runs and its 95% interval inside [low, high] (idealized.metrics): a
    proportion measured on `samples` trials per run by `proportion_interval`, anything
    else by the t interval. Returns {"mean", "ci": [lo, hi] (nan with one run), "values"}."""
    values = [float(v) for v in values]
    mean, lo, hi = runs_interval(values, low, high, samples)
    return {"mean": mean, "ci": [lo, hi], "values": values}


def aggregate(summaries: Sequence[dict], samples: int) -> dict:
    """Across seeds: mean and 95% interval of `delta_max`, `psc` and mean accuracy.

    samples: held-out needles behind one run's mean accuracy (stride x eval_samples).
    """
    return {
        "delta_max": _interval([s["delta_max"] for s in summaries], 0.0, 1.0),
        "psc": _interval([s["psc"] for s in summaries], 0.0),
        "mean_accuracy": _interval([s["mean_accuracy"] for s in summaries], samples=samples),
        "phase_accuracy": np.mean([s["phase_accuracy"] for s in summaries], axis=0).tolist(),
        "wall_seconds": float(np.mean([s["wall_seconds"] for s in summaries])),
    }


def operator_configs(
    base: TrainConfig, operators: Sequence[str], seeds: Sequence[int]
) -> dict[str, list[TrainConfig]]:
    """The runs `compare_operators` trains: per operator, `base` at each seed."""
    return {op: [base.replace(operator=op, seed=s) for s in seeds] for op in operators}


def compare_operators(
    base: TrainConfig,
    operators: Sequence[str],
    seeds: Sequence[int],
    progress=None,
    train: Callable[[list[TrainConfig]], list] | None = None,
) -> dict:
    """Train every operator under the same budget (steps, batch, lr) over seeds; aggregate each.

    `train` trains a list of configs (default `train_many`; the figure drivers pass their
    memo, which may hold the runs already).
    """
    train = train or functools.partial(train_many, progress=progress)
    out = {}
    for operator, configs in operator_configs(base, operators, seeds).items():
        try:
            summaries = [r.summary() for r in train(configs)]
        except TrainingDiverged as error:
            out[operator] = {"diverged": str(error)}
            continue
        out[operator] = aggregate(summaries, base.stride * base.eval_samples)
    return out


MITIGATIONS = {
    "baseline": {},
    "phase_entropy": {"phase_entropy": 0.02},
    "stagger": {"stagger": True},
    "overlap": {"overlap": True},
    "offset_ensemble": {"offset_ensemble": 8},
}


def predicted_phase_accuracy(config: TrainConfig) -> np.ndarray:
    """Reduced flow from the run's own start to t = lr * steps, then the accuracy formula."""
    a0 = np.asarray(
        initial_pooling_logits(config.seed, config.heads, config.slots, config.init_scale), float
    )
    offsets = [
        (h * config.stride // config.heads if config.stagger else 0) for h in range(config.heads)
    ]
    rope = (config.dim, config.rope_dim) if config.rope_anchor else None
    weights = theory.reduced_flow_weights(
        a0,
        config.gain,
        config.chunks,
        config.lr * config.steps,
        loss=config.loss,
        offsets=offsets,
        overlap=config.overlap,
        rope=rope,
        entropy_weight=config.phase_entropy,
    )
    return theory.readout_accuracy(
        weights,
        config.gain,
        config.chunks,
        config.dim,
        offsets=np.asarray(offsets),
        overlap=config.overlap,
        rope_dim=config.rope_dim if config.rope_anchor else 0,
        ensemble=config.offset_ensemble,
    )


def mitigation_configs(
    base: TrainConfig, mitigations: dict, seeds: Sequence[int]
) -> dict[str, list[TrainConfig]]:
    """The runs `compare_mitigations` trains: per mitigation, `base` with its overrides."""
    return {
        name: [base.replace(seed=s, **overrides) for s in seeds]
        for name, overrides in mitigations.items()
    }


def compare_mitigations(
    base: TrainConfig,
    mitigations: dict,
    seeds: Sequence[int],
    progress=None,
    train: Callable[[list[TrainConfig]], list] | None = None,
) -> dict:
    """Each mitigation over seeds: measured and predicted `delta_max`, mean accuracy and costs.

    `mitigations` maps a name to config overrides (e.g. `MITIGATIONS`). Predictions run the
    reduced flow of the variant from each run's own start (`predicted_phase_accuracy`).
    `train` as in `compare_operators`.
    """
    train = train or functools.partial(train_many, progress=progress)
    out = {}
    for name, configs in mitigation_configs(base, mitigations, seeds).items():
        overrides = mitigations[name]
        summaries = [r.summary() for r in train(configs)]
        predicted = [predicted_phase_accuracy(c) for c in configs]
        row = aggregate(summaries, base.stride * base.eval_samples)
        row["predicted_delta_max"] = _interval([delta_max(p) for p in predicted], 0.0, 1.0)
        row["predicted_mean_accuracy"] = _interval([float(np.mean(p)) for p in predicted], 0.0, 1.0)
        row["predicted_psc"] = _interval([phase_sensitivity(p) for p in predicted], 0.0)
        row["cost"] = theory.chunking_cost(
            base.stride,
            base.heads,
            configs[0].overlap,
            configs[0].offset_ensemble,
            configs[0].stagger,
        )
        row["overrides"] = overrides
        out[name] = row
    return out


float64_module(__name__)  # 64-bit types inside these functions only

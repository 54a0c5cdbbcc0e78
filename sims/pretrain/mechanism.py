"""The paper's mechanism measurements on pretrained backbones (PAPER.md §4; issue 51).

* **Knockout by mean replacement** (`knockout`): at the prompt's last position only, the
  outputs of the query heads that read one KV head (grouped queries: heads
  `g H/G .. (g+1) H/G - 1`), or of every head of one layer, are replaced by their mean over
  a calibration set of lookup prompts disjoint from the evaluation set (checked); the
  lookup is scored by residue; per residue the accuracy change against the intact model,
  absolute and relative to the intact accuracy, with intervals (seeds as clusters).
* **Gate concentration** (`gate_concentration`, `gate_trajectory`): for every key and value
  gate of every compressed layer, the static effective number of offsets
  `exp(H(E[alpha]))` and the per-window `E[exp(H(alpha))]` (`idealized.induction.
  effective_offsets`), alpha the softmax over the W offsets, on held-out corpus text (the
  distribution the gates were trained on; `corpus_tokens`), at one checkpoint or at every
  checkpoint a run kept (`sims.pretrain.train.pretrain(..., keep_checkpoints=True)`).
* **Gate cycling** (`cycle`, `cycle_prediction`, `cycling`): the offset-specific gate
  parameters shifted cyclically, `Z_i, b_i <- Z_{i-delta}, b_{i-delta}`, payload maps `C_i`
  fixed; the prediction `A_delta(r) = A_0((r - delta) mod S)` on the phase profile, and R^2
  of observed against predicted per-residue changes with and without the boundary phase
  `S - 1` (PAPER.md §1), per seed and over seeds.

Checkpoints are `(config, params)` pairs (`sims.pretrain.checkpoint.load`), one per seed;
every one is scored on the same prompts.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized import metrics
from weakspots.idealized.induction import effective_offsets
from weakspots.idealized.pretrain import corpus
from weakspots.idealized.pretrain.attention import windows_of
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.sims.pretrain import checkpoint, lookup, train

Checkpoint = tuple[PretrainConfig, nnx.State]
CALIBRATION_SEED_OFFSET = 1_000_003  # the calibration design's seed: the evaluation's + this
BRANCHES = ("key", "value")
POOLINGS = {"key": "key_pooling", "value": "value_pooling"}
GATE_PARAMETERS = ("gate", "gate_bias")  # Z_i and b_i; the payload C_i is left alone


# ----------------------------------------------------------------------------- forward passes


@functools.lru_cache(maxsize=8)
def _compiled(config: PretrainConfig):
    """The jitted last-position forwards of one model structure (every seed and every
    cycled copy of it shares them: one compile)."""
    graph = nnx.split(
        nnx.eval_shape(lambda: train.merge(config, checkpoint.abstract_params(config)))
    )[0]

    def last_logits(state, tokens, mask, values):
        return nnx.merge(graph, state)(tokens, head_override=(mask, values))[:, -1]

    def plain_last_logits(state, tokens):
        return nnx.merge(graph, state)(tokens)[:, -1]

    def last_heads(state, tokens):
        model = nnx.merge(graph, state)
        inputs = model.attention_inputs(tokens)
        heads = [layer.self_attn.heads(inputs[i])[:, -1] for i, layer in enumerate(model.layers)]
        return jnp.stack(heads)  # (L, B, H, hd)

    return jax.jit(last_logits), jax.jit(plain_last_logits), jax.jit(last_heads)


class Scorer:
    """One checkpoint's compiled forward passes: the last position's logits with an optional
    head override, and every layer's head outputs at the last position."""

    def __init__(self, config: PretrainConfig, params: nnx.State):
        self.config = config
        self.state = nnx.split(train.merge(config, params))[1]
        self._last_logits, self._plain, self._last_heads = _compiled(config.static)

    @property
    def shape(self) -> tuple[int, int, int]:
        """`(layers, query heads, head width)`: the shape of an override's values."""
        c = self.config
        return c.layers, c.heads, c.head_dim

    def logits(self, tokens, mask=None, values=None) -> np.ndarray:
        """`(B, V)` at the last position; `mask (L, H)`, `values (L, H, hd)`: the override."""
        tokens = jnp.asarray(tokens, jnp.int32)
        if mask is None:
            return np.asarray(self._plain(self.state, tokens))
        return np.asarray(self._last_logits(self.state, tokens, jnp.asarray(mask), values))

    def heads(self, tokens) -> np.ndarray:
        """`(L, B, H, hd)`: every layer's query-head outputs at the last position."""
        return np.asarray(self._last_heads(self.state, jnp.asarray(tokens, jnp.int32)))


def calibration_means(scorer: Scorer, prompts: Sequence[lookup.Prompt], batch: int = 64):
    """`(L, H, hd)`: every query head's output at the last position, averaged over `prompts`."""
    total, count = 0.0, 0
    for start in range(0, len(prompts), batch):
        tokens = np.stack([p.tokens for p in prompts[start : start + batch]])
        total = total + scorer.heads(tokens).astype(np.float64).sum(axis=1)
        count += tokens.shape[0]
    return (total / count).astype(np.float32)


# ----------------------------------------------------------------------------- knockout


def knockout_units(config: PretrainConfig) -> list[dict]:
    """Every (layer, KV head) with the query heads that read it, then every whole layer."""
    per_kv = config.heads // config.kv_heads
    units = [
        {"unit": "head", "layer": layer, "kv_head": g,
         "query_heads": list(range(g * per_kv, (g + 1) * per_kv))}
        for layer in range(config.layers) for g in range(config.kv_heads)
    ]  # fmt: skip
    units += [
        {"unit": "layer", "layer": layer, "kv_head": None, "query_heads": list(range(config.heads))}
        for layer in range(config.layers)
    ]
    return units


def unit_mask(config: PretrainConfig, unit: dict) -> np.ndarray:
    """`(L, H)` bool: the query heads a knockout unit replaces."""
    mask = np.zeros((config.layers, config.heads), dtype=bool)
    mask[unit["layer"], unit["query_heads"]] = True
    return mask


def calibration_design(
    padding: str, per_residue: int, *, seed: int = 0, **design: int | float | None
) -> list[lookup.Prompt]:
    """Lookup prompts for the calibration means: the evaluation's design at another seed
    (`seed + CALIBRATION_SEED_OFFSET`), `per_residue` prompts in each residue group."""
    return lookup.design(
        padding, prompts_per_residue=per_residue, seed=seed + CALIBRATION_SEED_OFFSET, **design
    )


def check_disjoint(calibration: Sequence[lookup.Prompt], evaluation: Sequence[lookup.Prompt]):
    """Raise ValueError when a calibration prompt is also an evaluation prompt (same tokens)."""
    seen = {p.tokens.tobytes() for p in evaluation}
    shared = sum(p.tokens.tobytes() in seen for p in calibration)
    if shared:
        raise ValueError(f"--calibration: {shared} calibration prompts are evaluation prompts")


def _correct(logits_fn, prompts, batch: int) -> np.ndarray:
    return np.asarray(lookup.evaluate(logits_fn, prompts, batch=batch)["correct"], dtype=np.float64)


def difference_interval(per_seed: np.ndarray, pooled: np.ndarray) -> tuple[float, float, float]:
    """Mean change of one residue over seeds and its interval: Student t over the seeds'
    mean changes `per_seed` `(R,)` (in [-1, 1]), widened to hold the normal interval of the
    pooled paired per-prompt differences `pooled` (`metrics.paired_interval`), as
    `metrics.cluster_interval` holds the pooled Wilson; one seed: the paired interval."""
    mean = float(np.mean(per_seed))
    _, plo, phi = metrics.paired_interval(pooled)
    if per_seed.size < 2:
        return mean, max(plo, -1.0), min(phi, 1.0)
    _, lo, hi = metrics.mean_interval(per_seed, -1.0, 1.0)
    return mean, max(min(lo, plo), -1.0), min(max(hi, phi), 1.0)


def _none_if_nan(x):
    return [[None if not math.isfinite(v) else v for v in row] for row in np.asarray(x).tolist()]


def knockout(
    checkpoints: Sequence[Checkpoint],
    evaluation: Sequence[lookup.Prompt],
    calibration: Sequence[lookup.Prompt],
    *,
    batch: int = 64,
    units: Sequence[dict] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Mean-replacement knockout of every unit (`knockout_units`) on every checkpoint.

    Each unit's query heads output, at the last position, their mean over `calibration`
    (disjoint from `evaluation`: checked); everything else runs intact. Returns `units`,
    `intact` (`lookup.report` of the intact checkpoints), per unit and residue `change`
    (knocked-out minus intact accuracy, mean over seeds) with `change_interval`
    (`difference_interval`), `hurt_residues` per unit, `relative_change` = change / intact
    accuracy of the residue (the intact mean treated as fixed; None where it is 0) with
    `relative_interval`, the per-seed `accuracy` `(seeds, units, residues)`, and the
    calibration's size.
    `progress(done, total)` after each evaluation.
    """
    if not checkpoints:
        raise ValueError("--checkpoint: knockout needs at least one checkpoint")
    check_disjoint(calibration, evaluation)
    config = checkpoints[0][0]
    units = list(units or knockout_units(config))
    residue = np.array([p.residue for p in evaluation])
    modulus = int(residue.max()) + 1
    total, done = len(checkpoints) * (len(units) + 1), 0
    intact_results, diffs, accuracy = [], [], []
    for config_s, params in checkpoints:
        if (config_s.layers, config_s.heads, config_s.kv_heads) != (
            config.layers, config.heads, config.kv_heads
        ):  # fmt: skip
            raise ValueError("--checkpoint: every checkpoint must have the same layers and heads")
        scorer = Scorer(config_s, params)
        means = calibration_means(scorer, calibration, batch)
        intact = lookup.evaluate(scorer.logits, evaluation, batch=batch)
        intact_results.append(intact)
        base = np.asarray(intact["correct"], dtype=np.float64)
        done += 1
        if progress is not None:
            progress(done, total)
        seed_diffs, seed_accuracy = [], []
        for unit in units:
            mask = unit_mask(config_s, unit)
            hit = _correct(
                lambda t, m=mask, s=scorer, v=means: s.logits(t, m, v), evaluation, batch
            )
            seed_diffs.append(hit - base)
            seed_accuracy.append(
                np.bincount(residue, hit, modulus) / np.bincount(residue, None, modulus)
            )
            done += 1
            if progress is not None:
                progress(done, total)
        diffs.append(seed_diffs)
        accuracy.append(seed_accuracy)
    diffs = np.asarray(diffs)  # (R, U, prompts)
    intact_report = lookup.report(intact_results)
    intact_mean = np.asarray(intact_report["residue_mean"])
    change = np.zeros((len(units), modulus))
    interval = np.zeros((len(units), modulus, 2))
    for u in range(len(units)):
        for r in range(modulus):
            rows = diffs[:, u, residue == r]
            mean, lo, hi = difference_interval(rows.mean(axis=1), rows.ravel())
            change[u, r], interval[u, r] = mean, (lo, hi)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(intact_mean > 0, intact_mean, np.nan)
        relative = change / scale
        relative_interval = interval / scale[None, :, None]
    return {
        "attention": config.attention,
        "units": units,
        "intact": intact_report,
        "change": change.tolist(),
        "change_interval": interval.tolist(),
        "hurt_residues": hurt_residues({"change_interval": interval}),
        "relative_change": _none_if_nan(relative),
        "relative_interval": [_none_if_nan(x) for x in relative_interval],
        "accuracy": np.asarray(accuracy).tolist(),
        "calibration_prompts": len(calibration),
        "evaluation_prompts": len(evaluation),
    }


def hurt_residues(result: dict) -> list[list[int]]:
    """Per knockout unit, the residues whose change interval lies wholly below 0 (the
    knockout costs them accuracy beyond the interval): how many phases a head carries."""
    interval = np.asarray(result["change_interval"])  # (units, residues, 2)
    return [np.flatnonzero(row[:, 1] < 0).tolist() for row in interval]


# ----------------------------------------------------------------------------- gates


def corpus_tokens(
    batch: int = 8,
    length: int = 512,
    seed: int = train.VALIDATION_SEED,
    config: PretrainConfig | None = None,
):
    """`(batch, length)` int32 of held-out corpus text (the validation stream's first batch),
    in the corpus of `config`'s recipe (its vocabulary and word distribution; default: the
    default corpus)."""
    config = config or PretrainConfig()
    rows = corpus.batch_at(train.tokenizer_of(config), seed, 0, batch, length, config.zipf)
    return np.asarray(rows[:, :length], np.int32)


@functools.lru_cache(maxsize=8)
def _compiled_gates(config: PretrainConfig):
    graph = nnx.split(
        nnx.eval_shape(lambda: train.merge(config, checkpoint.abstract_params(config)))
    )[0]

    def weights(state, tokens):
        model = nnx.merge(graph, state)
        inputs = model.attention_inputs(tokens)
        out = {}
        for branch in BRANCHES:
            pools = [getattr(layer.self_attn, POOLINGS[branch]) for layer in model.layers]
            if pools[0] is None:
                continue
            windows = [windows_of(inputs[i], config) for i in range(len(pools))]
            out[branch] = jnp.stack(
                [p.pooling_weights(w) for p, w in zip(pools, windows, strict=True)]
            )
        return out

    return jax.jit(weights)


def gate_weights(params: nnx.State, config: PretrainConfig, tokens) -> dict[str, np.ndarray]:
    """Per branch (`key`, and `value` unless tied), alpha of every compressed layer on every
    complete window of `tokens`: `(L, B, C, W, E)` (E = KV heads, or KV heads x head width
    for vector gates)."""
    if config.attention != "compressed":
        raise ValueError(f"--checkpoint: gates need compressed attention, got {config.attention!r}")
    state = nnx.split(train.merge(config, params))[1]
    weights = _compiled_gates(config.static)
    return {k: np.asarray(v) for k, v in weights(state, jnp.asarray(tokens, jnp.int32)).items()}


def concentration(alpha) -> tuple[np.ndarray, np.ndarray]:
    """`alpha` `(..., N, W, E)`: per gate (leading axes and E), the static `exp(H(E[alpha]))`
    and per-window `E[exp(H(alpha))]` over the N windows (`induction.effective_offsets`)."""
    a = jnp.asarray(alpha)
    a = jnp.moveaxis(a, -1, -3)  # (..., E, N, W)
    flat = a.reshape(-1, *a.shape[-2:])
    static, per_window = jax.vmap(effective_offsets)(flat)
    shape = a.shape[:-2]
    return np.asarray(static).reshape(shape), np.asarray(per_window).reshape(shape)


def gate_concentration(params: nnx.State, config: PretrainConfig, tokens=None) -> dict:
    """Static and per-window effective numbers of offsets of every key and value gate of
    every compressed layer on `tokens` (default: `corpus_tokens(length=seq_len)`).

    Returns per branch `static`, `per_window` `(L, E)` and `mean_gate` `(L, W, E)` (alpha
    averaged over windows: where a static preference peaks), `windows` (per layer), the
    window and stride; `peaks` (`gate_peaks`). Uniform gates give W and W; a one-hot gate 1
    and 1.
    """
    tokens = corpus_tokens(length=config.seq_len, config=config) if tokens is None else tokens
    alphas = gate_weights(params, config, tokens)
    out = {"window": config.window, "stride": config.stride, "gate": config.gate,
           "layers": config.layers, "branches": {}}  # fmt: skip
    for branch, alpha in alphas.items():
        layers, batch, count, window, e = alpha.shape
        windows = alpha.reshape(layers, batch * count, window, e)
        static, per_window = concentration(windows)
        out["branches"][branch] = {
            "static": static.tolist(),
            "per_window": per_window.tolist(),
            "mean_gate": windows.mean(axis=1).tolist(),
            "windows": batch * count,
        }
    out["peaks"] = gate_peaks(out) if "key" in out["branches"] else None
    return out


def gate_peaks(result: dict) -> list[list[dict]]:
    """Per compressed layer and gate (KV head or channel), the offset where the key and the
    value gates' window-averaged weights peak (`gate_concentration`'s `mean_gate`), and
    whether the value's peak is one offset after the key's (mod W), as PAPER.md §4 reports
    for statically concentrated heads. Tied values: the key's peak alone."""
    key = np.asarray(result["branches"]["key"]["mean_gate"])  # (L, W, E)
    value = result["branches"].get("value")
    value = None if value is None else np.asarray(value["mean_gate"])
    window = key.shape[1]
    out = []
    for layer in range(key.shape[0]):
        rows = []
        for e in range(key.shape[2]):
            k = int(np.argmax(key[layer, :, e]))
            row = {"key_peak": k}
            if value is not None:
                v = int(np.argmax(value[layer, :, e]))
                row |= {"value_peak": v, "value_after_key": v == (k + 1) % window}
            rows.append(row)
        out.append(rows)
    return out


def kept_checkpoints(run_dir: str | Path) -> list[tuple[int, list[Path]]]:
    """`(step, seed directories)` of every checkpoint a run kept (`checkpoints/step-<n>/`),
    in step order; the run's final seeds when it kept none."""
    run_dir = Path(run_dir)
    kept = []
    for step_dir in (run_dir / train.KEPT).glob("step-*"):
        kept.append((int(step_dir.name.split("-")[1]), checkpoint.seed_checkpoints(step_dir)))
    if not kept:
        history = run_dir / checkpoint.HISTORY
        steps = json.loads(history.read_text()).get("steps") if history.exists() else None
        step = steps[-1] if steps else checkpoint.read_config(run_dir).steps
        kept = [(int(step), checkpoint.seed_checkpoints(run_dir))]
    return sorted(kept)


def gate_trajectory(run_dir: str | Path, tokens=None, progress=None) -> dict:
    """`gate_concentration` at every kept checkpoint of a run, seed by seed: per branch
    `static`, `per_window` `(steps, seeds, L, E)`, and `steps`, `seeds`."""
    kept = kept_checkpoints(run_dir)
    steps, per_branch, seeds = [], {}, None
    for i, (step, dirs) in enumerate(kept):
        rows = []
        for directory in dirs:
            config, params = checkpoint.load(directory)
            if tokens is None:
                tokens = corpus_tokens(length=config.seq_len, config=config)
            rows.append(gate_concentration(params, config, tokens))
        seeds = [checkpoint.read_config(d).seed for d in dirs]
        steps.append(step)
        for branch in rows[0]["branches"]:
            entry = per_branch.setdefault(branch, {"static": [], "per_window": []})
            for key in ("static", "per_window"):
                entry[key].append([r["branches"][branch][key] for r in rows])
        if progress is not None:
            progress(i + 1, len(kept))
    return {"steps": steps, "seeds": seeds, "branches": per_branch}


# ----------------------------------------------------------------------------- cycling


def _gate_path(path) -> bool:
    names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
    return len(names) >= 2 and names[-1] in GATE_PARAMETERS and names[-2] in POOLINGS.values()


def cycle(params: nnx.State, config: PretrainConfig, delta: int) -> nnx.State:
    """The parameters with every compressed layer's gate parameters (Z_i and b_i, key and
    value branches) shifted cyclically over the offsets, `Z_i <- Z_{i - delta}`; payload
    maps and everything else unchanged."""
    if config.attention != "compressed" or config.gate == "uniform":
        raise ValueError("cycling needs compressed attention with learned gates (not uniform)")

    def shift(path, leaf):
        return jnp.roll(leaf, delta, axis=0) if _gate_path(path) else leaf

    return jax.tree_util.tree_map_with_path(shift, params)


def phase_profile(accuracy, stride: int) -> np.ndarray:
    """`(..., S)`: residue accuracies `(..., M)` averaged over the residues of each phase
    `r mod S` (M a multiple of S)."""
    a = np.asarray(accuracy, dtype=np.float64)
    modulus = a.shape[-1]
    if modulus % stride:
        raise ValueError(f"--modulus: {modulus} is not a multiple of the stride {stride}")
    return a.reshape(*a.shape[:-1], modulus // stride, stride).mean(axis=-2)


def cycle_prediction(accuracy, delta: int, stride: int) -> np.ndarray:
    """`A_delta(r) = A_0((r - delta) mod S)`: per residue r (mod M) the intact phase
    profile (`phase_profile`) at phase `(r - delta) mod S`."""
    phases = phase_profile(accuracy, stride)
    modulus = np.asarray(accuracy).shape[-1]
    return phases[..., (np.arange(modulus) - delta) % stride]


def r_squared(observed, predicted) -> float:
    """`1 - sum (o - p)^2 / sum (o - mean o)^2`; NaN when the observed values are constant."""
    o, p = np.asarray(observed, np.float64), np.asarray(predicted, np.float64)
    total = np.sum((o - o.mean()) ** 2)
    return float(1.0 - np.sum((o - p) ** 2) / total) if total > 0 else math.nan


def cycle_fit(intact, cycled, delta: int, stride: int) -> dict:
    """One seed's observed against predicted per-residue changes of one cycle: the changes
    `A_delta(r) - A_0(r)` and `A_0((r - delta) mod S) - A_0(r)`, R^2 over all residues
    (`r_squared`) and without the boundary phase (residues with `r mod S = S - 1`); also
    R^2 of the accuracies themselves."""
    intact, cycled = np.asarray(intact, np.float64), np.asarray(cycled, np.float64)
    predicted = cycle_prediction(intact, delta, stride)
    inside = np.arange(intact.size) % stride != stride - 1
    observed_change, predicted_change = cycled - intact, predicted - intact
    return {
        "observed_change": observed_change.tolist(),
        "predicted_change": predicted_change.tolist(),
        "r_squared": r_squared(observed_change, predicted_change),
        "r_squared_without_boundary": r_squared(observed_change[inside], predicted_change[inside]),
        "r_squared_accuracy": r_squared(cycled, predicted),
        "boundary_accuracy": float(np.mean(cycled[~inside])),
    }


def _over_seeds(values) -> list:
    v = np.asarray([x for x in values if math.isfinite(x)])
    if v.size == 0:
        return [None, None, None]
    mean, lo, hi = metrics.mean_interval(v, -math.inf, 1.0)
    return [mean, None if math.isnan(lo) else lo, None if math.isnan(hi) else hi]


def cycling(
    checkpoints: Sequence[Checkpoint],
    prompts: Sequence[lookup.Prompt],
    deltas: Sequence[int] = (-3, -2, -1, 1, 2, 3),
    *,
    batch: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> dict:
    """Every checkpoint scored intact and with its gates cycled by each delta (W = S only).

    Returns `intact` (`lookup.report`), the boundary phase S - 1, and per delta: `report`
    (`lookup.report` of the cycled checkpoints), per seed `cycle_fit`, and over seeds the
    mean and Student-t interval `[mean, lo, hi]` of each R^2 and of the boundary accuracy.
    """
    if not checkpoints:
        raise ValueError("--checkpoint: cycling needs at least one checkpoint")
    config = checkpoints[0][0]
    if config.attention != "compressed" or config.window != config.stride:
        raise ValueError(
            "--checkpoint: the cycling prediction holds for compressed designs with W = S, "
            f"got {config.attention} W{config.window}/S{config.stride}"
        )
    stride = config.stride
    total, done = len(checkpoints) * (len(deltas) + 1), 0
    intact, cycled = [], {d: [] for d in deltas}
    for config_s, params in checkpoints:
        if (config_s.window, config_s.stride) != (config.window, config.stride):
            raise ValueError("--checkpoint: every checkpoint must have the same window and stride")
        intact.append(lookup.evaluate(Scorer(config_s, params).logits, prompts, batch=batch))
        done += 1
        if progress is not None:
            progress(done, total)
        for delta in deltas:
            scorer = Scorer(config_s, cycle(params, config_s, delta))
            cycled[delta].append(lookup.evaluate(scorer.logits, prompts, batch=batch))
            done += 1
            if progress is not None:
                progress(done, total)
    out = {"stride": stride, "boundary_phase": stride - 1, "intact": lookup.report(intact),
           "deltas": {}}  # fmt: skip
    for delta in deltas:
        fits = [
            cycle_fit(a["residue_accuracy"], b["residue_accuracy"], delta, stride)
            for a, b in zip(intact, cycled[delta], strict=True)
        ]
        out["deltas"][str(delta)] = {
            "report": lookup.report(cycled[delta]),
            "seeds": fits,
            **{key: _over_seeds([f[key] for f in fits]) for key in (
                "r_squared", "r_squared_without_boundary", "r_squared_accuracy",
                "boundary_accuracy")},
        }  # fmt: skip
    return out


def load_checkpoints(dirs: Sequence[str | Path]) -> list[Checkpoint]:
    """`checkpoint.load` of every seed directory (a run directory stands for its seeds)."""
    out = []
    for directory in dirs:
        for seed_dir in checkpoint.seed_checkpoints(directory) or [Path(directory)]:
            out.append(checkpoint.load(seed_dir))
    return out

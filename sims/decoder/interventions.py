"""Causal interventions on trained decoders, resolved by layer, head and the queried value's phase.

The decoder side of `weakspots ablate`. Every intervention is model surgery on a live
decoder (`idealized.decoder.model.Decoder`), measured on the evaluation set of
`sims.decoder.evaluate` (the same sequences for every run and every intervention, so each
drop is paired with the intact model sequence by sequence):

* the edits of `sims.decoder.edits` (a head or a layer ablated, the position bias zeroed or
  rolled, RoPE or one branch of a compressed layer switched off), each applied to a copy
  of the decoder;
* activation patching (`patch_entries`): each evaluation sequence runs beside a copy of
  itself with the queried fact moved to another phase of the same value window (the
  "source" world; every other token identical), on one batch axis; the compressed
  entries of the windows either copy of the fact touches are copied from the source
  world into the clean one before the query reads them (`edits.PatchEntries`).

Parameter edits share one compiled program (a leading "world" axis of edited states); an
edit that changes the program compiles once. Statistics count the facts beyond the first
query's uncompressed reach (`sims.decoder.evaluate.query_reach`), as the phase metrics do; drops are
`clean - intervened` accuracy with 95% normal intervals on the paired per-sequence
differences, outcomes pooled over seeds (per-seed drops beside them). Accuracies (intact and
intervened) carry intervals with the seeds as clusters (`evaluate.clustered`). Every run is
scored on the shared evaluation set (`evaluate.evaluation_set` with `run=None`), so that
worlds and runs compare on the same sequences; the seed-cluster intervals then leave out
the share of the noise that the sequences themselves carry (common to every seed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.decoder.recall import RecallBatch, placed_batch
from weakspots.idealized.metrics import paired_interval
from weakspots.idealized.stagger import stagger_offsets
from weakspots.sims.decoder import edits
from weakspots.sims.decoder.edits import Edit, apply_edits
from weakspots.sims.decoder.evaluate import (
    EVAL_CHUNK,
    clustered,
    config_evaluation_set,
    grouped,
    query_reach,
    value_starts,
)
from weakspots.sims.decoder.train import first_query_hits, graphdef, jit, merge
from weakspots.sims.progress import Progress


def edited_parameters(config: LMConfig, params: nnx.State, edit: Edit | None) -> nnx.State:
    """The parameter state after a parameter edit (`edit.changes_program` False; None: unchanged).

    `params` may be stacked over runs (leading axes); the edit acts on every run.
    """
    if edit is None:
        return params
    if edit.changes_program:
        raise ValueError(f"{edit.kind} changes the program, not only parameter values")
    return nnx.split(edit.apply(nnx.merge(graphdef(config.decoder), params)))[1]


def component_interventions(config: LMConfig) -> list[Edit]:
    """Every component edit that applies to the design, layer by layer.

    Sliding layers: removed (`AblateLayer`). Compressed layers: the compressed branch
    removed (`AblateLayer` without a local window, else `NoCompressedBranch`, and
    `NoLocalWindow`), RoPE off the compressed keys, the learned position bias zeroed and
    rolled. Dense layers: removed.
    """
    out: list[Edit] = []
    for layer, name in enumerate(config.layer_kinds):
        kind = layer_kind(name)
        if not (kind.pooled_by_operator and kind.reads_compressed(config)):
            out.append(edits.AblateLayer(layer))
            continue
        candidates = [
            edits.NoCompressedBranch(layer) if config.local_window else edits.AblateLayer(layer),
            edits.NoLocalWindow(layer),
            edits.NoRopeCompressed(layer),
            edits.ZeroPositionBias(layer),
            edits.RollPositionBias(layer),
        ]
        out.extend(e for e in candidates if e.applies(config))
    return out


# ----------------------------------------------------------------------------- evaluation


def first_query_correct_from_model(model: Decoder, batch: RecallBatch) -> jax.Array:
    """Per sequence `(B,)`: every value token of the first query predicted (argmax) by `model`
    (an edited decoder) reading the whole sequence (`sims.decoder.forward.first_query_hits`;
    `forward.first_query_correct` scores a config's parameters, unedited, on the query
    section alone)."""
    return first_query_hits(model(batch.tokens), batch.targets, batch.first_query)


def evaluation_key(config: LMConfig, index):
    """The PRNG key of chunk `index` of the evaluation set (drawn as `sims.decoder.evaluate` draws it)."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(config.eval_seed), 1), index)


@partial(jit, static_argnums=(0, 1))
def _world_outcomes(config: LMConfig, switches: tuple, worlds: nnx.State, starts, index):
    """Outcomes `(W, R, K * chunk)` of W edited states of R runs, after the edits `switches`
    that change the program.

    Worlds and runs share one vmapped axis of `W * R` states. Two nested vmaps would give
    the per-head pooling of the compressed layer rank-7 intermediates
    `(W, R, B, H, C, s, hd)`, and XLA:CPU's YNNPACK fusions crash (segfault at run time)
    on a rank-7 reduction of a product with one unit axis (W = 1 or R = 1), such as
    `deepseek_v4`'s window pool `sum_p e[p] kv[p]`
    (`python -m weakspots.benchmarks.xla_rank7_reduce` checks the installed jaxlib).
    """
    leading = jax.tree.leaves(worlds)[0].shape[:2]
    states = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), worlds)

    def per_run(params):
        model = apply_edits(merge(config.decoder, params), switches)

        def chunk(args):
            rows, i = args
            return first_query_correct_from_model(
                model, placed_batch(evaluation_key(config, i), config.task, rows)
            )

        return jax.lax.map(chunk, (starts, index)).reshape(-1)

    return jax.vmap(per_run)(states).reshape(*leading, -1)


@partial(jit, static_argnums=(0, 1))
def patched_outcomes(
    config: LMConfig, layers: tuple[int, ...], params: nnx.State, starts, sources, windows, index
):
    """Clean rows with patched entries and the source rows: two `(R, K * chunk)` outcome arrays.

    `starts`, `sources` `(K, chunk, P)`: the clean rows' fact starts and their sources' (same
    draws, facts moved); `windows`: one `(K, chunk, C)` array per layer of `layers`, the
    entries of that layer copied from the source (`edits.PatchEntries`).
    """

    def per_run(run_params):
        def chunk(args):
            rows, source_rows, patch, i = args
            key = evaluation_key(config, i)
            clean = placed_batch(key, config.task, rows)
            source = placed_batch(key, config.task, source_rows)  # same draws, fact moved
            both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), clean, source)
            made = [edits.PatchEntries(layer, w) for layer, w in zip(layers, patch, strict=True)]
            model = apply_edits(merge(config.decoder, run_params), made)
            correct = first_query_correct_from_model(model, both)
            return correct[: rows.shape[0]], correct[rows.shape[0] :]

        patched, source = jax.lax.map(chunk, (starts, sources, windows, index))
        return patched.reshape(-1), source.reshape(-1)

    return jax.vmap(per_run)(params)


@dataclasses.dataclass(frozen=True)
class Rows:
    """The evaluation sequences an intervention study scores (the far facts' chunks).

    `starts` `(K, chunk, P)` fact starts, `index` `(K,)` their chunk numbers in the
    evaluation set (which fix their random draws), `value_start` / `key_start` `(K * chunk,)`
    of the queried fact, `far` `(K * chunk,)` True where the fact counts (beyond the query's
    reach; padding rows are False).
    """

    starts: np.ndarray
    index: np.ndarray
    value_start: np.ndarray
    key_start: np.ndarray
    far: np.ndarray


def evaluation_rows(config: LMConfig) -> Rows:
    """The evaluation set of `config` in its chunks, keeping only chunks with a fact that counts."""
    data = config_evaluation_set(config)
    total = data.starts.shape[0]
    padded = -(-total // EVAL_CHUNK) * EVAL_CHUNK
    pad = padded - total
    starts = np.concatenate([data.starts, np.repeat(data.starts[:1], pad, axis=0)])
    value = np.concatenate([data.value_start, np.full(pad, -1)])
    key = np.concatenate([data.key_start, np.full(pad, -1)])
    positions = value_starts(config.task)
    reach = query_reach(config)
    limit = config.task.context_len - reach
    if (positions < limit).sum() < config.stride:  # as evaluate.phase_summary: count everything
        limit = config.task.context_len + 1
    far = (value >= 0) & (value < limit)
    chunks = far.reshape(-1, EVAL_CHUNK).any(axis=1)
    keep = lambda a: a.reshape(-1, EVAL_CHUNK, *a.shape[1:])[chunks]  # noqa: E731
    return Rows(
        starts=keep(starts).astype(np.int32),
        index=np.nonzero(chunks)[0].astype(np.int32),
        value_start=keep(value).reshape(-1),
        key_start=keep(key).reshape(-1),
        far=keep(far).reshape(-1),
    )


def world_outcomes(
    config: LMConfig,
    params: nnx.State,
    interventions: Sequence[Edit | None],
    rows: Rows | None = None,
) -> np.ndarray:
    """Outcomes `(len(interventions), R, K * chunk)` of stacked runs under each edit.

    `params`: parameter states stacked over R runs of `config.static`. None in
    `interventions` is the intact model. Parameter edits run as worlds of one program;
    each edit that changes the program runs on its own.
    """
    config = config.static
    rows = rows or evaluation_rows(config)
    starts, index = jnp.asarray(rows.starts), jnp.asarray(rows.index)
    out: list[np.ndarray | None] = [None] * len(interventions)
    batched = [i for i, v in enumerate(interventions) if v is None or not v.changes_program]
    if batched:
        states = [edited_parameters(config, params, interventions[i]) for i in batched]
        worlds = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
        outcomes = np.asarray(_world_outcomes(config, (), worlds, starts, index))
        for j, i in enumerate(batched):
            out[i] = outcomes[j]
    for i, intervention in enumerate(interventions):
        if out[i] is None:
            worlds = jax.tree.map(lambda x: x[None], params)
            out[i] = np.asarray(_world_outcomes(config, (intervention,), worlds, starts, index))[0]
    return np.stack(out)


def switched_outcomes(config: LMConfig, params: nnx.State, switches: Sequence[Edit], rows: Rows):
    """Outcomes `(R, K * chunk)` of stacked runs with every edit of `switches` applied together
    (each may change the program)."""
    config = config.static
    worlds = jax.tree.map(lambda x: x[None], params)
    out = _world_outcomes(
        config, tuple(switches), worlds, jnp.asarray(rows.starts), jnp.asarray(rows.index)
    )
    return np.asarray(out)[0]


def paired_drop(clean: np.ndarray, intervened: np.ndarray) -> tuple[float, list[float]]:
    """Mean of `clean - intervened` (0/1 outcomes, paired) and its 95% normal interval."""
    mean, lo, hi = paired_interval(clean.astype(np.float64) - intervened.astype(np.float64))
    return mean, [lo, hi]


def phase_drops(clean: np.ndarray, intervened: np.ndarray, phase: np.ndarray, stride: int) -> dict:
    """Per phase, the paired drop pooled over runs, its interval and each run's drop.

    `clean`, `intervened`: `(R, M)` outcomes; `phase`: `(M,)` labels in `range(stride)`
    (rows with label -1 are left out). Returns `drop` (s,), `drop_ci` (s, 2),
    `drop_per_seed` (R, s), `accuracy` (s,), `accuracy_ci` (s, 2) (with R > 1 the runs as
    clusters, `evaluate.clustered`) and `accuracy_per_seed` (R, s) of the intervened model.
    """
    drop, ci = np.zeros(stride), np.zeros((stride, 2))
    per_seed = np.zeros((clean.shape[0], stride))
    for p in range(stride):
        sel = phase == p
        drop[p], ci[p] = paired_drop(clean[:, sel].ravel(), intervened[:, sel].ravel())
        per_seed[:, p] = clean[:, sel].astype(float).mean(axis=1) - intervened[:, sel].astype(
            float
        ).mean(axis=1)
    acc = clustered(intervened, phase, stride)
    return {
        "drop": drop.tolist(),
        "drop_ci": ci.tolist(),
        "drop_per_seed": per_seed.tolist(),
        "accuracy": acc["accuracy"].tolist(),
        "accuracy_ci": acc["ci"].tolist(),
        "accuracy_per_seed": acc["per_seed"].tolist(),
    }


def source_starts(
    config: LMConfig, starts: np.ndarray, value_start: np.ndarray, phase: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The queried fact moved so its value starts at `phase` of the same value window.

    `starts` `(M, P)` (fact 0 queried first), `value_start` `(M,)`. Returns the moved
    starts `(M, P)`, `valid` `(M,)` (the moved fact stays in the context and clear of the
    other facts) and the patched windows `(M, C)`: every window either placement touches.
    """
    task, s = config.task, config.stride
    kl, length = task.key_len, task.fact_len
    moved_value = (value_start // s) * s + phase
    moved = starts.copy()
    moved[:, 0] = moved_value - kl
    lo, hi = moved[:, :1], moved[:, :1] + length
    others_lo, others_hi = starts[:, 1:], starts[:, 1:] + length
    clear = np.all((others_hi <= lo) | (others_lo >= hi), axis=1)
    valid = (moved[:, 0] >= 0) & (moved[:, 0] + length <= task.context_len) & clear
    moved[~valid] = starts[~valid]
    first = np.minimum(starts[:, 0], moved[:, 0]) // s
    last = (np.maximum(starts[:, 0], moved[:, 0]) + length - 1) // s
    windows = np.arange(config.seq_len // s)[None, :]
    touched = (windows >= first[:, None]) & (windows <= last[:, None]) & valid[:, None]
    return moved.astype(np.int32), valid, touched


def patch_entries(
    config: LMConfig, params: nnx.State, layer: int, rows: Rows | None = None
) -> dict:
    """Activation patching of compressed entries from a world where the fact sits at another phase.

    For every source phase p' (the value moved to phase p' of its own window) and every
    clean phase p: the accuracy with the touched entries of `layer` copied from the source
    world (`patched[p][p']`), the source world's own accuracy (`source[p][p']`) and the
    clean accuracy on the same sequences (`clean[p][p']`), pooled over runs, with counts
    and 95% Wilson intervals; `restored[p][p'] = (patched - clean) / (source - clean)`
    where the denominator exceeds its own interval (else None). Where p' = p the source
    world equals the clean one, so patched = clean exactly (a check of the machinery).
    """
    config = config.static
    rows = rows or evaluation_rows(config)
    s = config.stride
    chunk = rows.starts.shape[1]
    flat_starts = rows.starts.reshape(-1, rows.starts.shape[-1])
    clean_out = world_outcomes(config, params, [None], rows)[0]
    phase = np.where(rows.far, rows.value_start % s, -1)
    shape = (s, s)
    patched, source, clean = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    counts = np.zeros(shape, np.int64)
    patched_ci, source_ci = np.zeros((*shape, 2)), np.zeros((*shape, 2))
    restored: list[list[float | None]] = [[None] * s for _ in range(s)]
    for target in range(s):
        moved, valid, windows = source_starts(config, flat_starts, rows.value_start, target)
        out_patched, out_source = patched_outcomes(
            config,
            (layer,),
            params,
            jnp.asarray(rows.starts),
            jnp.asarray(moved.reshape(rows.starts.shape)),
            (jnp.asarray(windows.reshape(-1, chunk, windows.shape[-1])),),
            jnp.asarray(rows.index),
        )
        out_patched, out_source = np.asarray(out_patched), np.asarray(out_source)
        for p in range(s):
            sel = (phase == p) & valid
            n = int(sel.sum()) * clean_out.shape[0]
            counts[p, target] = n
            if n == 0:
                continue
            hits = [a[:, sel].sum() for a in (out_patched, out_source, clean_out)]
            patched[p, target], source[p, target], clean[p, target] = (h / n for h in hits)
            ci = grouped(
                np.concatenate([out_patched[:, sel].ravel(), out_source[:, sel].ravel()]),
                np.repeat([0, 1], n),
                2,
            )["ci"]
            patched_ci[p, target], source_ci[p, target] = ci
            gap = source[p, target] - clean[p, target]
            _, gap_ci = paired_drop(out_source[:, sel].ravel(), clean_out[:, sel].ravel())
            if gap_ci[0] > 0 or gap_ci[1] < 0:
                restored[p][target] = float((patched[p, target] - clean[p, target]) / gap)
    return {
        "layer": layer,
        "patched": patched.tolist(),
        "patched_ci": patched_ci.tolist(),
        "source": source.tolist(),
        "source_ci": source_ci.tolist(),
        "clean": clean.tolist(),
        "samples": counts.tolist(),
        "restored": restored,
    }


def shifted_log_probs(model: Decoder, tokens, offsets: Sequence[int], stride: int) -> jax.Array:
    """Mean over chunkings of the log-probabilities `(B, T, V)` of `tokens` `(B, T)`.

    Chunking `o` (`0 <= o < stride`) puts `o` filler tokens (id 0) before the sequence and
    `stride - o` after it (the length stays a multiple of the stride; a causal model never
    sees the ones after), so every token moves `o` positions on and its phase with it.
    """
    length = tokens.shape[1]
    fill = jnp.zeros((tokens.shape[0], stride), tokens.dtype)
    padded = jnp.concatenate([fill, tokens, fill], axis=1)
    total = 0.0
    for o in offsets:
        shifted = jax.lax.slice_in_dim(padded, stride - o, stride - o + length + stride, axis=1)
        total = total + jax.nn.log_softmax(model(shifted)[:, o : o + length], axis=-1)
    return total / len(offsets)


@partial(jit, static_argnums=(0, 1))
def _offset_outcomes(config: LMConfig, offsets: tuple, params: nnx.State, starts, index):
    """Outcomes `(R, K * chunk)` with the readout averaged over shifted chunkings."""

    def per_run(run_params):
        model = merge(config.decoder, run_params)

        def chunk(args):
            rows, i = args
            batch = placed_batch(evaluation_key(config, i), config.task, rows)
            logp = shifted_log_probs(model, batch.tokens, offsets, config.stride)
            return first_query_hits(logp, batch.targets, batch.first_query)

        return jax.lax.map(chunk, (starts, index)).reshape(-1)

    return jax.vmap(per_run)(params)


def offset_ensemble(
    config: LMConfig, params: nnx.State, ensemble: int, rows: Rows | None = None
) -> dict:
    """The offset-ensemble mitigation at inference: each sequence read under K chunkings.

    Chunking k shifts every token `o_k = k s // K` positions on (o_k filler tokens before
    the sequence, `s - o_k` after it, so the length stays a multiple of s), which moves a
    fact at phase p to phase `(p + o_k) mod s`; the value is predicted from the mean
    log-probability over the K readouts. `params` stacked over R runs. Returns the per-phase
    drop against the intact model (`phase_drops`: negative where the ensemble helps),
    `offsets`, and `cost`: forward passes per sequence (K).
    """
    config = config.static
    rows = rows or evaluation_rows(config)
    s = config.stride
    offsets = stagger_offsets(s, ensemble)
    starts, index = jnp.asarray(rows.starts), jnp.asarray(rows.index)
    clean = world_outcomes(config, params, [None], rows)[0]
    out = np.asarray(_offset_outcomes(config, offsets, params, starts, index))
    phase = np.where(rows.far, rows.value_start % s, -1)
    return {"offsets": list(offsets), "cost": ensemble, **phase_drops(clean, out, phase, s)}


def ablate_lm(
    config: LMConfig,
    params: nnx.State,
    *,
    patch: bool = True,
    progress: Progress | None = None,
) -> dict:
    """Every intervention on stacked runs of one design, as plain values (`weakspots lm ablate --json`).

    `params`: states stacked over R runs of `config.static` (their seeds). Returns
    `phase_accuracy` (s,) of the intact runs (far facts, pooled), `phase_accuracy_ci` (seeds
    as clusters), `phase_accuracy_per_seed` `(R, s)`;
    `effect` `(L, H, s)`: accuracy drop when head h of layer l is ablated, `effect_ci`
    `(L, H, s, 2)`, `effect_per_seed` `(R, L, H, s)`; `components`: one entry per
    component intervention (`name`, `kind`, `layer`, `drop`, `drop_ci`, `drop_per_seed`,
    `accuracy`, `accuracy_ci`); `patch` (`patch_entries` on the first compressed layer,
    None when there is none or `patch=False`); `pooling_weights` per layer `(R, H, s)`
    or None; `samples` per phase; the first query's `straddle` split of the intact runs.
    """
    config = config.static
    rows = evaluation_rows(config)
    s, layers, heads = config.stride, config.layers, config.heads
    phase = np.where(rows.far, rows.value_start % s, -1)
    heads_list = [edits.AblateHead(layer, h) for layer in range(layers) for h in range(heads)]
    components = component_interventions(config)
    planned = [None, *heads_list, *components]
    compressed = [i for i, k in enumerate(config.layer_kinds) if layer_kind(k).pooled_by_operator]
    do_patch = patch and config.compressed and bool(compressed)
    if progress is not None and progress.total is None:
        progress.plan(2 + len(components) + int(do_patch), warmups=2 + len(components))
    batched = [i for i in planned if i is None or not i.changes_program]
    outcomes = dict(zip(batched, world_outcomes(config, params, batched, rows), strict=True))
    if progress is not None:
        progress.update(2, warmup=True)
    for intervention in planned:
        if intervention not in outcomes:
            outcomes[intervention] = world_outcomes(config, params, [intervention], rows)[0]
            if progress is not None:
                progress.update(1, warmup=True)
    clean = outcomes[None]
    runs = clean.shape[0]
    effect = np.zeros((layers, heads, s))
    effect_ci = np.zeros((layers, heads, s, 2))
    effect_seed = np.zeros((runs, layers, heads, s))
    for item in heads_list:
        d = phase_drops(clean, outcomes[item], phase, s)
        effect[item.layer, item.head] = d["drop"]
        effect_ci[item.layer, item.head] = d["drop_ci"]
        effect_seed[:, item.layer, item.head] = d["drop_per_seed"]
    intact = clustered(clean, phase, s)
    key_phase = np.where(rows.far, rows.key_start % s, -1)
    straddling = rows.key_start // s != (rows.key_start + config.task.fact_len - 1) // s
    split = clustered(clean, np.where(rows.far, straddling, -1).astype(np.int64), 2)
    by_key = clustered(clean, key_phase, s)
    model = merge(config.decoder, params)
    weights = [None if w is None else np.asarray(w).tolist() for w in model.pooling_weights()]
    out = {
        "phase_accuracy": intact["accuracy"].tolist(),
        "phase_accuracy_ci": intact["ci"].tolist(),
        "phase_accuracy_by_key_phase": by_key["accuracy"].tolist(),
        "phase_accuracy_by_key_phase_ci": by_key["ci"].tolist(),
        "samples": intact["samples"].tolist(),
        "phase_accuracy_per_seed": intact["per_seed"].tolist(),
        "interval": "seed clusters" if runs > 1 else "wilson",
        "straddle": {
            name: {
                "accuracy": float(split["accuracy"][i]),
                "samples": int(split["samples"][i]),
                "ci": split["ci"][i].tolist(),
            }
            for i, name in enumerate(("same_window", "straddling"))
        },
        "effect": effect.tolist(),
        "effect_ci": effect_ci.tolist(),
        "effect_per_seed": effect_seed.tolist(),
        "components": [
            {
                "name": item.describe(config),
                "kind": item.kind,
                "layer": item.layer,
                **phase_drops(clean, outcomes[item], phase, s),
            }
            for item in components
        ],
        "pooling_weights": weights,
        "patch": None,
        "runs": runs,
    }
    if do_patch:
        out["patch"] = patch_entries(config, params, compressed[0], rows)
        if progress is not None:
            progress.update(1, warmup=True)
    return out


__all__ = [
    "Rows",
    "ablate_lm",
    "component_interventions",
    "edited_parameters",
    "evaluation_key",
    "evaluation_rows",
    "first_query_correct_from_model",
    "offset_ensemble",
    "paired_drop",
    "patch_entries",
    "phase_drops",
    "shifted_log_probs",
    "source_starts",
    "world_outcomes",
]

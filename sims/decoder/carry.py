"""Where a trained decoder reads a fact from: its own compressed entries, or later ones it was carried into.

The footprint model (`docs/theory.md`, THEORY §9.1) says a local layer of width W copies a fact
into the next `W / s` windows, so the compressed entries after the fact's own hold it too, and
the query may read it there. These are the causal tests of that claim, each an edit of
`sims.decoder.edits` made on every evaluation row (the shared evaluation set of
`sims.decoder.interventions`, so each edited outcome is paired with the intact one):

* `hide_direct`: the fact's direct entries hidden in every compressed layer (the entries
  whose windows pool a token of the fact, `key_start .. value end`: windows `lo // m` to
  `hi // m`, and one more where windows overlap (CSA: entry w pools windows w - 1 and w));
  what is left of accuracy was read from entries the fact was carried into;
* `hide_direct_current`, `hide_direct_previous` (windows that overlap): the fact's direct
  entries split by the half of their window that holds it. CSA's entry w pools its own
  window w (the current half) and window w - 1 (the previous half), so a fact in window w is
  in entry w's current half and entry w + 1's previous half; each test hides one set (the
  entries whose current, or previous, half holds a token of the fact), the other kept.
  Which half the read needs, by phase (`hide_direct_previous` applies only where a
  compressed layer overlaps; without overlap `hide_direct_current` is `hide_direct`);
* `hide_next1`, `hide_next2`: the first one or two entries after the direct ones hidden
  (the fact's own kept): their drop is what the next window's entry carries;
* `hide_carry`: every entry within the local reach after the direct ones hidden (the
  `ceil(W / m)` entries, W the widest local window), the direct ones kept;
* `hide_all`: both (check: the fact must then come from elsewhere, or be lost);
* `resample_direct`, `resample_carry`, `resample_all`: the same entries not hidden but
  copied from a source world where the fact sits far away (`far_sources`: moved by whole
  windows, at least 3 and beyond its own carry, so the copied entries hold no trace of it;
  every other token the same): the entries keep their place in the softmax, only their
  content changes (rows where the fact cannot move so far are left out of these tests);
* `cut_local`: in every layer with a local branch (a sliding layer, a compressed layer's
  local window), the edges from tokens after the fact to the fact's tokens removed: no
  carry, the fact's own entries intact (its tokens still see each other);
* `off_indexer`, `off_sink`, `off_local_window`: a part of DeepSeek-V4's layers (the indexer
  also on the project's compressed layer) switched off at inference in every layer that has
  it (`edits.V4PartOff`), the trained weights kept: the part's effect at inference, beside
  the design trained without it;
* `pair_indexer` (an indexer not paired in training): each entry the indexer keeps read with
  the entry before it at inference (`edits.PairIndexer`; with overlapping windows, a fact's
  entry whose current half holds it comes in with the one whose previous half does): what
  the trained attention does with both halves given, beside the design trained with
  `indexer_pairs`.

With an indexer, `selection` measures the selection model's hit probability (THEORY §9.2):
how often the first query's top-k keeps one of the fact's entries, by phase.

`m` is each layer's own ratio (`stride`; `hca_stride` for hca layers). Statistics count the
facts beyond the query's uncompressed reach, by the queried value's phase, with paired 95%
intervals of each drop (`interventions.phase_drops`) and the seeds as clusters for accuracies.
"""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.layers.registry import lookup as layer_kind
from weakspots.idealized.decoder.model import trace
from weakspots.idealized.decoder.recall import placed_batch
from weakspots.sims.decoder.checkpoint import trained
from weakspots.sims.decoder.edits import (
    CutLocalEdges,
    HideEntries,
    PairIndexer,
    V4PartOff,
    apply_edits,
)
from weakspots.sims.decoder.evaluate import clustered, phase_summary
from weakspots.sims.decoder.interventions import (
    Rows,
    evaluation_key,
    evaluation_rows,
    first_query_correct_from_model,
    paired_drop,
    patched_outcomes,
    phase_drops,
    switched_outcomes,
)
from weakspots.sims.decoder.train import jit, merge, stacked_params
from weakspots.sims.progress import Progress

TESTS = (
    "intact", "hide_direct", "hide_direct_current", "hide_direct_previous", "hide_next1",
    "hide_next2", "hide_carry", "hide_all",
    "resample_direct", "resample_carry", "resample_all", "cut_local",
    "off_indexer", "off_sink", "off_local_window", "pair_indexer",
)  # fmt: skip
"""The tests, in report order (module docstring)."""


def compressed_layers(config: LMConfig) -> list[tuple[int, int, bool]]:
    """Every layer with compressed entries: (layer, its ratio m, whether its windows overlap)."""
    kinds = [layer_kind(kind) for kind in config.layer_kinds]
    return [
        (layer, kind.ratio(config), kind.overlap(config))
        for layer, kind in enumerate(kinds)
        if kind.reads_compressed(config)
    ]


def local_layers(config: LMConfig) -> list[int]:
    """Every layer with a local branch, where `CutLocalEdges` applies."""
    return [layer for layer in range(config.layers) if CutLocalEdges(layer, None).applies(config)]


def part_switches(config: LMConfig, test: str) -> tuple[V4PartOff, ...]:
    """The `V4PartOff` edits of an `off_<part>` test: every layer where the part applies."""
    part = test.removeprefix("off_")
    switches = (V4PartOff(layer, part) for layer in range(config.layers))
    return tuple(edit for edit in switches if edit.applies(config))


def pair_switches(config: LMConfig) -> tuple[PairIndexer, ...]:
    """The `PairIndexer` edits of the `pair_indexer` test: every layer where it applies."""
    switches = (PairIndexer(layer) for layer in range(config.layers))
    return tuple(edit for edit in switches if edit.applies(config))


def local_reach(config: LMConfig) -> int:
    """The widest local window of the design (sliding layers' `window`, compressed `local_window`)."""
    kinds = config.layer_kinds
    widths = [layer_kind(kinds[i]).local_reach(config) for i in local_layers(config)]
    return max(widths, default=0)


def fact_spans(config: LMConfig, rows: Rows) -> np.ndarray:
    """`(M, 2)` token spans `[key_start, value end]` of each row's queried fact (-1 for padding)."""
    hi = rows.value_start + config.value_len - 1
    return np.where(rows.value_start[:, None] >= 0, np.stack([rows.key_start, hi], 1), -1)


def entry_marks(config: LMConfig, spans: np.ndarray, ratio: int, overlap: bool, test: str):
    """`(M, C)` entries of a layer of ratio `ratio` that `test` hides (C = seq_len // ratio)."""
    entries = np.arange(config.seq_len // ratio)[None, :]
    lo, last = spans[:, :1] // ratio, spans[:, 1:] // ratio  # windows of the first, last token
    hi = last + int(overlap)
    reach = -(-local_reach(config) // ratio)
    after = entries - hi
    direct = (entries >= lo) & (entries <= hi)
    marks = {
        "hide_direct": direct,
        "hide_direct_current": (entries >= lo) & (entries <= last),
        "hide_direct_previous": (entries >= lo + 1) & (entries <= last + 1) & overlap,
        "hide_next1": after == 1,
        "hide_next2": (after >= 1) & (after <= 2),
        "hide_carry": (after >= 1) & (after <= reach),
        "hide_all": direct | ((after >= 1) & (after <= reach)),
    }[test]
    return marks & (spans[:, :1] >= 0)


@partial(jit, static_argnums=(0, 1, 2))
def _edited_outcomes(
    config: LMConfig, hide: tuple, cut: tuple, params, starts, hidden, spans, index
):
    """Outcomes `(R, K * chunk)` with `HideEntries(layer, hidden[i])` for the layers in `hide`
    and `CutLocalEdges(layer, spans)` for those in `cut`, each row its own marks."""

    def per_run(run_params):
        def chunk(args):
            rows, marks, span, i = args
            made = [HideEntries(layer, m) for layer, m in zip(hide, marks, strict=True)]
            made += [CutLocalEdges(layer, span) for layer in cut]
            model = apply_edits(merge(config.decoder, run_params), made)
            return first_query_correct_from_model(
                model, placed_batch(evaluation_key(config, i), config.task, rows)
            )

        return jax.lax.map(chunk, (starts, hidden, spans, index)).reshape(-1)

    return jax.vmap(per_run)(params)


@partial(jit, static_argnums=(0, 1))
def _selection_hits(config: LMConfig, layer: int, params, starts, marks, index):
    """Per run and row `(R, K * chunk)`: whether layer `layer`'s indexer keeps, for the position
    that predicts the first queried value, one of the entries in the row's `marks` `(C,)`."""

    def per_run(run_params):
        def chunk(args):
            rows, mark, i = args
            batch = placed_batch(evaluation_key(config, i), config.task, rows)
            _, sown = trace(merge(config.decoder, run_params), batch.tokens)
            flat = dict(nnx.to_flat_state(sown))
            kept = [
                v.get_value()[0]
                for path, v in flat.items()
                if path[-1] == "selected" and f"blocks/{layer}/" in "/".join(map(str, path))
            ]
            query = jnp.argmax(batch.first_query, axis=-1)  # (B,): the first value's predictor
            at_query = kept[0][jnp.arange(query.shape[0]), query]  # (B, C)
            return jnp.any(at_query & mark, axis=-1)

        return jax.lax.map(chunk, (starts, marks, index)).reshape(-1)

    return jax.vmap(per_run)(params)


def selection(config: LMConfig, params: nnx.State, rows: Rows) -> dict | None:
    """How often the indexer keeps the fact, by the queried value's phase: for the first
    indexed layer, the share of far facts one of whose entries (its direct ones, or one within
    the local reach after them: `hide_all`'s) is among the first query's top `indexer_topk`
    (the selection model's hit probability, docs/theory.md §9.5). Returns `hit` `(s,)`,
    `hit_ci` (seeds as clusters), `hit_per_seed` `(R, s)` and the layer; where the layer's
    windows overlap, also `by_half`: the same for the entries whose current half holds the
    fact (`current`) and those whose previous half holds it (`previous`), the sets of
    `hide_direct_current` and `hide_direct_previous`. None without an indexer."""
    indexed = part_switches(config, "off_indexer")  # the layers whose indexer can be switched off
    if not indexed:
        return None
    config = config.static
    layer = indexed[0].layer
    ratio, overlap = {at: (m, o) for at, m, o in compressed_layers(config)}[layer]
    spans = fact_spans(config, rows)
    chunk = rows.starts.shape[1]
    phase = np.where(rows.far, rows.value_start % config.stride, -1)

    def hit_rates(test):
        marks = entry_marks(config, spans, ratio, overlap, test)
        hits = np.asarray(_selection_hits(
            config, layer, params, jnp.asarray(rows.starts),
            jnp.asarray(marks.reshape(-1, chunk, marks.shape[-1])), jnp.asarray(rows.index),
        ))  # fmt: skip
        summary = clustered(hits, phase, config.stride)
        return {
            "hit": summary["accuracy"].tolist(),
            "hit_ci": summary["ci"].tolist(),
            "hit_per_seed": summary["per_seed"].tolist(),
        }

    out = {"layer": layer, **hit_rates("hide_all")}
    if overlap:
        out["by_half"] = {
            "current": hit_rates("hide_direct_current"),
            "previous": hit_rates("hide_direct_previous"),
        }
    return out


def far_sources(config: LMConfig, rows: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Fact starts `(M, P)` with the queried fact moved by `shift` tokens, forward where it fits
    and clear of the other facts, else back, and `valid` `(M,)` where it could move.

    `shift` is whole windows, `max(3, ceil((reach + fact length) / s) + 2)`, so neither the
    moved fact nor anything it is carried into touches the entries the clean fact holds.
    """
    task, s = config.task, config.stride
    starts = rows.starts.reshape(-1, rows.starts.shape[-1])
    shift = max(3, -(-(local_reach(config) + task.fact_len) // s) + 2) * s
    others_lo, others_hi = starts[:, 1:], starts[:, 1:] + task.fact_len

    def fits(lo):
        clear = np.all((others_hi <= lo[:, None]) | (others_lo >= lo[:, None] + task.fact_len), 1)
        return (lo >= 0) & (lo + task.fact_len <= task.context_len) & clear

    forward, back = starts[:, 0] + shift, starts[:, 0] - shift
    valid = (fits(forward) | fits(back)) & (rows.value_start >= 0)
    moved = starts.copy()
    moved[:, 0] = np.where(valid, np.where(fits(forward), forward, back), starts[:, 0])
    return moved.astype(np.int32), valid


def test_outcomes(config: LMConfig, params: nnx.State, test: str, rows: Rows) -> np.ndarray:
    """Outcomes `(R, M)` of stacked runs `params` under one carry test (`TESTS`)."""
    config = config.static
    spans = fact_spans(config, rows)
    chunk = rows.starts.shape[1]
    shape = lambda a: jnp.asarray(a.reshape(-1, chunk, *a.shape[1:]))  # noqa: E731
    hide, hidden, cut = (), (), ()
    if test.startswith("resample_"):
        layers = compressed_layers(config)
        moved, valid = far_sources(config, rows)
        which = "hide_" + test.removeprefix("resample_")
        marks = tuple(
            shape(entry_marks(config, spans, m, o, which) & valid[:, None]) for _, m, o in layers
        )
        clean_rows, _ = patched_outcomes(
            config, tuple(layer for layer, _, _ in layers), params, jnp.asarray(rows.starts),
            shape(moved), marks, jnp.asarray(rows.index),
        )  # fmt: skip
        return np.asarray(clean_rows)
    if test.startswith("hide_"):
        layers = compressed_layers(config)
        hide = tuple(layer for layer, _, _ in layers)
        hidden = tuple(shape(entry_marks(config, spans, m, o, test)) for _, m, o in layers)
    elif test == "cut_local":
        cut = tuple(local_layers(config))
    elif test.startswith("off_"):
        return switched_outcomes(config, params, part_switches(config, test), rows)
    elif test == "pair_indexer":
        return switched_outcomes(config, params, pair_switches(config), rows)
    elif test != "intact":
        raise ValueError(f"carry tests are {', '.join(TESTS)}, got {test!r}")
    out = _edited_outcomes(
        config, hide, cut, params, jnp.asarray(rows.starts), hidden, shape(spans),
        jnp.asarray(rows.index),
    )  # fmt: skip
    return np.asarray(out)


def carry_tests(config: LMConfig, params: nnx.State, tests=TESTS, rows: Rows | None = None) -> dict:
    """Every carry test of stacked runs `params` `(R, ...)` of `config`, by the value's phase.

    Returns `phase_accuracy` (intact, `(s,)`, with `phase_accuracy_ci` and per seed), and per
    test in `tests` but `intact`: `accuracy`, `accuracy_ci` (seeds as clusters), `drop` and
    `drop_ci` (paired, pooled over seeds), `drop_per_seed`, `mean_drop` with its interval;
    `applies` False (and no numbers) where the design has nothing the test edits (no
    compressed or no local layer). Also the layers edited, the local reach and the samples
    per phase.
    """
    config = config.static
    rows = rows or evaluation_rows(config)
    s = config.stride
    phase = np.where(rows.far, rows.value_start % s, -1)
    clean = test_outcomes(config, params, "intact", rows)
    intact = clustered(clean, phase, s)
    out = {
        "selection": selection(config, params, rows),
        "compressed_layers": [list(x) for x in compressed_layers(config)],
        "local_layers": local_layers(config),
        "local_reach": local_reach(config),
        "samples": [int((phase == p).sum()) * clean.shape[0] for p in range(s)],
        "phase_accuracy": intact["accuracy"].tolist(),
        "phase_accuracy_ci": intact["ci"].tolist(),
        "phase_accuracy_per_seed": intact["per_seed"].tolist(),
        "tests": {},
    }
    for test in tests:
        if test == "intact":
            continue
        if test == "hide_direct_previous":  # only windows that overlap have a previous half
            edited_layers = [layer for layer in compressed_layers(config) if layer[2]]
        elif test.startswith(("hide_", "resample_")):
            edited_layers = compressed_layers(config)
        elif test.startswith("off_"):
            edited_layers = part_switches(config, test)
        elif test == "pair_indexer":
            edited_layers = pair_switches(config)
        else:
            edited_layers = local_layers(config)
        if not edited_layers:
            out["tests"][test] = {"applies": False}
            continue
        counted = phase
        if test.startswith("resample_"):  # the rows whose fact could move far enough
            counted = np.where(far_sources(config, rows)[1], phase, -1)
            if any(not np.any(counted == p) for p in range(s)):
                out["tests"][test] = {"applies": False, "why": "no far source at some phase"}
                continue
        edited = test_outcomes(config, params, test, rows)
        result = phase_drops(clean, edited, counted, s)
        far = counted >= 0
        mean, ci = paired_drop(clean[:, far].ravel(), edited[:, far].ravel())
        out["tests"][test] = {
            "applies": True, **result, "mean_drop": mean, "mean_drop_ci": ci,
            "samples": [int((counted == p).sum()) * clean.shape[0] for p in range(s)],
        }  # fmt: skip
    return out


def report(config: LMConfig, results) -> dict:
    """`weakspots lm carry --json`: the config, seeds, the per-phase evaluation of the runs on
    their own sequences (`evaluate.phase_summary`, seeds as clusters: `pooled`) and every
    carry test on the shared set (`carry_tests`), and each seed's pooling weights per layer
    (`(H, s)`, None for a layer without). `results`: the `LMResult`s of `config`'s seeds."""
    params = stacked_params(results)
    seeds = [r.config.seed for r in results]
    pooled = phase_summary(config, np.stack([r.outcomes for r in results]))
    weights = [[None if w is None else np.asarray(w).tolist() for w in r.model.pooling_weights()]
               for r in results]  # fmt: skip
    return {
        "config": config.replace(seed=seeds[0]).asdict(),
        "seeds": seeds,
        "pooled": pooled,
        "final_eval_accuracy": [float(r.history.eval_accuracy[-1]) for r in results],
        "pooling_weights": weights,
        **carry_tests(config, params),
    }


def command(config: LMConfig, seeds: int, verb: str = "carry") -> str:
    """The `weakspots lm <verb>` line that trains `config` at seeds `0 .. seeds-1` (every field
    that differs from `LMConfig`'s default spelled out, no `--design`)."""
    default = LMConfig()
    flags = []
    for field in dataclasses.fields(LMConfig):
        value, base = getattr(config, field.name), getattr(default, field.name)
        if field.name == "seed" or value == base:
            continue
        flag = "--" + field.name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag[2:])
        else:
            flags.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    return f"weakspots lm {verb} {' '.join(flags)} --seeds {seeds} --json --quiet"


def measure(config: LMConfig, seeds: int, progress: Progress | None = None) -> dict:
    """Train (or load from the cache) `config` at `seeds` seeds and report it (`carry.report`)."""
    results = trained([config.replace(seed=s) for s in range(seeds)], progress=progress)
    return report(config, results)

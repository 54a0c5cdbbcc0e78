"""Emergence during pretraining: in-context copying on held-out corpus text, and a small lookup.

Two numbers per seed, measured every `emergence_every` steps of `weakspots lm pretrain` and
written to its `history.json` (docs/pretraining.md, "Emergence"):

* **copy accuracy**: top-1 on every name that follows its animal where the same (animal,
  name) pair already came earlier in the document, on held-out documents of the run's own
  corpus (`COPY_ROWS` rows of the validation stream at batch index `COPY_STEP`, which no
  validation loss reads). Only looking back in context predicts such a name: the
  induction the lookup needs.
* **contested copy accuracy**: the same on the positions where at least `CONTESTED` distinct
  names came earlier in the document, beside the chance of naming the right one by picking
  uniformly among them (`copy_chance_contested` in `describe()`): a model that recalls "a
  name from this document" without matching the key scores that chance; only key-specific
  copying (induction) rises above it. The lookup needs the key-specific kind.
* **lookup accuracy**: the lookup (`sims.pretrain.lookup`) under both paddings, sized to the
  training context (`probe_shape`: fewer records and demonstrations when `seq_len` is
  short), `PROBE_PER_RESIDUE` prompts per residue modulo `PROBE_MODULUS`.

`induction_law_tokens(batch, seq_len)` is the emergence law this is compared with.
"""

from __future__ import annotations

import dataclasses
import json
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.pretrain import corpus
from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.idealized.pretrain.model import merge
from weakspots.idealized.pretrain.tokenizer import Tokenizer
from weakspots.sims.pretrain import checkpoint, lookup

COPY_STEP = 1_000_003  # the validation stream's batch index of the copy set
COPY_ROWS = 64
CONTESTED = 3  # distinct earlier names at a contested copy position
PROBE_MODULUS = 8  # a multiple of every stride the minimal sweep runs (4 and 8)
PROBE_PER_RESIDUE = 8  # a multiple of the modulus: equal means by residue
PROBE_SEED = 7
LAW_LOG10_CONSTANT = 5.7  # induction heads at 10^5.7 sqrt(B C) tokens (arXiv 2511.16893)


def induction_law_tokens(batch: int, seq_len: int) -> float:
    """Training tokens by which induction heads form: `10^5.7 sqrt(B C)`, B sequences of C
    tokens per batch (Aoyama, Wilcox and Schneider 2025: nearly independent of model size)."""
    return 10.0**LAW_LOG10_CONSTANT * float(np.sqrt(batch * seq_len))


@dataclasses.dataclass(frozen=True)
class ProbeShape:
    """A lookup sized to a context: records, demonstrations and the target's spread."""

    records: int
    demonstrations: int
    spread: float

    def design(self, padding: str, per_residue: int = PROBE_PER_RESIDUE, seed: int = PROBE_SEED):
        return lookup.design(
            padding,
            modulus=PROBE_MODULUS,
            prompts_per_residue=per_residue,
            seed=seed,
            spread=self.spread,
            records=self.records,
            demonstrations=self.demonstrations,
        )


# the paper's lookup first, then shorter ones; each keeps the target more than the local
# window (16 tokens) before the query
PROBE_LADDER = (
    ProbeShape(64, 8, 48.0),
    ProbeShape(48, 8, 32.0),
    ProbeShape(32, 8, 24.0),
    ProbeShape(24, 6, 16.0),
    ProbeShape(20, 4, 12.0),
    ProbeShape(16, 4, 12.0),
)


def probe_shape(seq_len: int) -> ProbeShape:
    """The largest rung of `PROBE_LADDER` whose prompts fit in `seq_len` tokens."""
    for shape in PROBE_LADDER:
        if len(shape.design("prefix", per_residue=PROBE_MODULUS)[0].tokens) <= seq_len:
            return shape
    raise ValueError(f"--seq-len: the shortest lookup probe needs more than {seq_len} tokens")


def repeated_pairs(tokens: np.ndarray, tokenizer: Tokenizer) -> np.ndarray:
    """`(rows, T - 1)` bool: position t holds an animal followed by a name, and the same
    (animal, name) pair occurred earlier in the row (its name is predictable by copying)."""
    return copy_sources(tokens, tokenizer) >= 0


def earlier_names(tokens: np.ndarray, tokenizer: Tokenizer) -> np.ndarray:
    """`(rows, T - 1)` int: distinct names (`value_ids`) among tokens `0..t` of the row, the
    candidates a name-recalling model chooses among when it predicts token t + 1."""
    is_name = np.isin(tokens[:, :-1], tokenizer.value_ids)
    out = np.zeros(is_name.shape, dtype=np.int64)
    for row in range(len(tokens)):
        seen: set[int] = set()
        for t in range(is_name.shape[1]):
            if is_name[row, t]:
                seen.add(int(tokens[row, t]))
            out[row, t] = len(seen)
    return out


def copy_sources(tokens: np.ndarray, tokenizer: Tokenizer) -> np.ndarray:
    """`(rows, T - 1)` int: where `repeated_pairs` holds, the position of the same (animal,
    name) pair's latest earlier animal, the key a copy by induction matches (the lookup's
    target key); -1 elsewhere."""
    x, y = tokens[:, :-1], tokens[:, 1:]
    pair = np.isin(x, tokenizer.key_ids) & np.isin(y, tokenizer.value_ids)
    out = np.full(pair.shape, -1, dtype=np.int64)
    for row in range(len(x)):
        latest: dict[tuple[int, int], int] = {}
        for t in np.flatnonzero(pair[row]):
            key = (int(x[row, t]), int(y[row, t]))
            out[row, t] = latest.get(key, -1)
            latest[key] = int(t)
    return out


PHASE_ROWS = 512  # held-out documents of the copy-by-phase profile
PHASE_RESAMPLES = 2000
# Copies whose earlier key sits before this position are left out of the profile: every row
# is one document opening with `<doc>`, so its first sentence puts the first pair's animal at
# fixed positions (2 and 4 most often), and that pair, the document's main character, is
# copied more often and more easily. Full attention (the seq384 recipe at 79,000 steps, 1,024
# documents) showed residue 2 at 0.497 against 0.455-0.484 (p = 0.003) with them and a flat
# profile from position 8 (p = 0.70) and 16 (p = 0.97) on.
PHASE_START = 16


def copy_phase_profile(
    hits: np.ndarray,
    sources: np.ndarray,
    modulus: int,
    *,
    resamples: int = PHASE_RESAMPLES,
    seed: int = 0,
) -> dict:
    """Copy accuracy by the residue of the copied pair's earlier key (`copy_sources`)
    modulo `modulus`.

    `hits` `(R, rows, T - 1)` bool, every seed scored on the same documents; `sources` as
    `copy_sources` gives. Per residue: accuracy pooled over seeds and positions, per seed,
    and a 95% interval from resampling documents (clusters: every seed reads each one) with
    replacement; `delta_max` (best - worst residue) with its interval from the same draws;
    a permutation p-value for "no phase effect", residues shuffled among the copy positions
    of each document; the dominant period of the pooled profile (`lookup.dominant_period`).
    """
    rows, cols = np.nonzero(sources >= 0)
    if rows.size == 0:
        raise ValueError("no copy positions: the documents repeat no (animal, name) pair")
    residue = sources[rows, cols] % modulus
    correct = hits[:, rows, cols].astype(np.float64)  # (R, positions)
    n_rows = sources.shape[0]
    flat = rows * modulus + residue
    counts = np.bincount(flat, minlength=n_rows * modulus).reshape(n_rows, modulus)
    sums = np.bincount(flat, correct.mean(axis=0), n_rows * modulus).reshape(n_rows, modulus)
    if np.any(counts.sum(axis=0) == 0):
        raise ValueError(f"a residue modulo {modulus} has no copy position: use more rows")
    pooled = sums.sum(axis=0) / counts.sum(axis=0)
    per_seed = np.stack(
        [
            np.bincount(residue, c, modulus) / np.bincount(residue, minlength=modulus)
            for c in correct
        ]
    )
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(n_rows, np.full(n_rows, 1.0 / n_rows), size=resamples)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (draws @ sums) / (draws @ counts)
    boot_gap = np.nanmax(boot, axis=1) - np.nanmin(boot, axis=1)
    observed = float(pooled.max() - pooled.min())
    exceed = 0
    position_mean = correct.mean(axis=0)
    for _ in range(resamples):
        shuffled = residue[np.lexsort((rng.random(residue.size), rows))]
        profile = np.bincount(shuffled, position_mean, modulus) / np.bincount(
            shuffled, minlength=modulus
        )
        exceed += profile.max() - profile.min() >= observed - 1e-12
    return {
        "modulus": modulus,
        "rows": n_rows,
        "positions": int(rows.size),
        "residue_counts": counts.sum(axis=0).tolist(),
        "residue_accuracy": pooled.tolist(),
        "residue_interval": np.nanpercentile(boot, [2.5, 97.5], axis=0).T.tolist(),
        "seed_residue_accuracy": per_seed.tolist(),
        "mean_accuracy": float(position_mean.mean()),
        "delta_max": observed,
        "delta_max_interval": np.percentile(boot_gap, [2.5, 97.5]).tolist(),
        "delta_max_p": (1 + exceed) / (1 + resamples),
        "worst_residue": int(np.argmin(pooled)),
        "best_residue": int(np.argmax(pooled)),
        "dominant_period": lookup.dominant_period(pooled),
    }


def copy_phase(
    run_dir, *, modulus: int = PROBE_MODULUS, rows: int = PHASE_ROWS, start: int = PHASE_START
) -> dict:
    """`copy_phase_profile` of a run's last checkpoint (every seed) on `rows` held-out
    documents of its own corpus (the copy set's stream and batch index; a multiple of 8),
    for every copy position whose earlier key is at `start` or later (`PHASE_START`), and
    for the contested ones among them (at least `CONTESTED` names earlier)."""
    if rows <= 0 or rows % 8:
        raise ValueError(f"rows: a positive multiple of 8, got {rows}")
    config, params = stacked_seeds(run_dir)
    tokenizer = Tokenizer.sized(config.open_words)
    held = corpus.batch_at(
        tokenizer, corpus.VALIDATION_SEED, COPY_STEP, rows, config.seq_len, config.zipf
    )
    predicted = np.asarray(predictions_many(config.static, params, held[:, :-1].astype(np.int32)))
    hits = predicted == held[None, :, 1:]
    sources = copy_sources(held, tokenizer)
    sources = np.where(sources >= start, sources, -1)
    contested = np.where(earlier_names(held, tokenizer) >= CONTESTED, sources, -1)
    return {
        "run": str(run_dir),
        "seeds": int(jax.tree.leaves(params)[0].shape[0]),
        "start": start,
        "copy": copy_phase_profile(hits, sources, modulus),
        "contested": copy_phase_profile(hits, contested, modulus),
    }


class Emergence:
    """The held-out copy set and the lookup probe of one run's config, and their scores.

    `measure(params)` takes every seed's parameters stacked `(R, ...)` and returns
    `{"copy_accuracy": [R], "copy_accuracy_contested": [R], "lookup_prefix": [R],
    "lookup_in_sequence": [R]}`.
    """

    def __init__(self, config: PretrainConfig, tokenizer: Tokenizer):
        self.config = config.static
        held = corpus.batch_at(
            tokenizer, corpus.VALIDATION_SEED, COPY_STEP, COPY_ROWS, config.seq_len, config.zipf
        )
        self.copy_inputs = held[:, :-1].astype(np.int32)
        self.copy_targets = held[:, 1:]
        self.copy_mask = repeated_pairs(held, tokenizer)
        self.candidates = earlier_names(held, tokenizer)
        self.contested = self.copy_mask & (self.candidates >= CONTESTED)
        self.shape = probe_shape(config.seq_len)
        self.prompts = {p: self.shape.design(p) for p in lookup.PADDINGS}

    def measure(self, params) -> dict[str, list[float]]:
        predicted = np.asarray(predictions_many(self.config, params, self.copy_inputs))
        hits = predicted == self.copy_targets[None]
        copy = hits[:, self.copy_mask].mean(axis=1)
        contested = hits[:, self.contested].mean(axis=1)
        out = {"copy_accuracy": copy.tolist(), "copy_accuracy_contested": contested.tolist()}
        for padding, prompts in self.prompts.items():
            tokens = np.stack([p.tokens for p in prompts]).astype(np.int32)
            answers = np.array([p.answer for p in prompts])
            last = np.asarray(last_predictions_many(self.config, params, tokens))
            out[f"lookup_{padding.replace('-', '_')}"] = (last == answers).mean(axis=1).tolist()
        return out

    def describe(self) -> dict:
        return {
            "copy_positions": int(self.copy_mask.sum()),
            "copy_chance": float(np.mean(1.0 / self.candidates[self.copy_mask])),
            "contested_positions": int(self.contested.sum()),
            "copy_chance_contested": float(np.mean(1.0 / self.candidates[self.contested])),
            "copy_rows": COPY_ROWS,
            "probe": dataclasses.asdict(self.shape)
            | {
                "modulus": PROBE_MODULUS,
                "prompts_per_residue": PROBE_PER_RESIDUE,
                "length": int(self.prompts["prefix"][0].tokens.size),
            },
        }


def stacked_seeds(run_dir) -> tuple[PretrainConfig, dict]:
    """A run's config (its first seed's) and every seed's parameters stacked `(R, ...)`,
    as `Emergence.measure` takes them."""
    loaded = [checkpoint.load(d) for d in checkpoint.seed_checkpoints(Path(run_dir))]
    params = jax.tree.map(lambda *leaves: np.stack(leaves), *(p for _, p in loaded))
    return loaded[0][0], params


def rescore(run_dir, config: PretrainConfig, tokenizer: Tokenizer) -> dict[str, list]:
    """`Emergence.measure` on a finished run's checkpoints: every kept one
    (`<run_dir>/checkpoints/step-<n>/`, `lm pretrain --keep-checkpoints`) and the last,
    `{"steps": [...], <measure's keys>: [[per seed], ...]}` in step order. For runs recorded
    before a measurement existed (the contested copy accuracy)."""
    run_dir = Path(run_dir)
    kept = sorted(run_dir.glob("checkpoints/step-*"), key=lambda d: int(d.name.split("-")[1]))
    last = json.loads((run_dir / "history.json").read_text())["steps"][-1]
    places = [(int(d.name.split("-")[1]), d) for d in kept]
    if not places or places[-1][0] != last:
        places.append((last, run_dir))
    probe = Emergence(config, tokenizer)
    out: dict[str, list] = {"steps": []}
    for step, directory in places:
        params = stacked_seeds(directory)[1]
        out["steps"].append(step)
        for name, values in probe.measure(params).items():
            out.setdefault(name, []).append(values)
    return out


@partial(jax.jit, static_argnums=0)
def predictions_many(config: PretrainConfig, params, tokens):
    """Every seed's top-1 next token at every position of `tokens` `(n, T)`: `(R, n, T)`,
    eight rows at a time."""
    rows = tokens.reshape(-1, 8, tokens.shape[-1])

    def one(p):
        model = merge(config, p)
        return jax.lax.map(lambda t: jnp.argmax(model(t), axis=-1), rows).reshape(tokens.shape)

    return jax.vmap(one)(params)


@partial(jax.jit, static_argnums=0)
def last_predictions_many(config: PretrainConfig, params, tokens):
    """Every seed's top-1 next token at the last position of each prompt `(n, T)`: `(R, n)`."""
    return jax.vmap(lambda p: jnp.argmax(merge(config, p)(tokens)[:, -1], axis=-1))(params)


__all__ = [
    "Emergence",
    "copy_phase",
    "copy_phase_profile",
    "copy_sources",
    "PROBE_LADDER",
    "ProbeShape",
    "induction_law_tokens",
    "probe_shape",
    "rescore",
    "repeated_pairs",
    "stacked_seeds",
]

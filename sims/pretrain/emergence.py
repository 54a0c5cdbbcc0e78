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
    x, y = tokens[:, :-1], tokens[:, 1:]
    pair = np.isin(x, tokenizer.key_ids) & np.isin(y, tokenizer.value_ids)
    repeated = np.zeros_like(pair)
    for row in range(len(x)):
        seen = set()
        for t in np.flatnonzero(pair[row]):
            repeated[row, t] = (int(x[row, t]), int(y[row, t])) in seen
            seen.add((int(x[row, t]), int(y[row, t])))
    return repeated


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
        seeds = [checkpoint.load(d)[1] for d in checkpoint.seed_checkpoints(directory)]
        params = jax.tree.map(lambda *leaves: np.stack(leaves), *seeds)
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
    "PROBE_LADDER",
    "ProbeShape",
    "induction_law_tokens",
    "probe_shape",
    "rescore",
    "repeated_pairs",
]

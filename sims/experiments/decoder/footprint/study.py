"""Decoders held against the footprint and selection models (docs/theory.md §9.4-§9.5).

The designs of experiments `lm_footprint` (figure (h)) and `lm_selection` (figure (i)): the
project's two-layer decoder (a sliding layer of `W` tokens that carries a fact into the
tokens after it, then a compressed layer that reads only entries of `s` tokens), the
shape the footprint model idealises, at several `W / s`, two strides, two lengths at one
fact density and two pooling operators; and the same decoder with the Lightning Indexer's
top-k on its compressed layer, at one `k` over context lengths and at one length over `k`
(the selection model's `N / k`). Each design is reported by `sims.decoder.carry.report` (the JSON of
`weakspots lm carry`: per-phase accuracy of each seed on its own sequences, seeds as
clusters, and the carry tests that hide the fact's own entries or the next one).

Sizes: `tiny` trains tiny versions of some designs (tests of the pipeline); `quick` reads the reports
recorded in `sims/experiments/decoder/footprint/runs/<family>_<design>.json` (each holds its config and the
`command` that reproduces it); `full` retrains them (the same configs). Trained decoders
are kept in the `sims.decoder.checkpoint` cache.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

import numpy as np
from scipy.optimize import least_squares
from scipy.special import expit, logit

from weakspots import theory
from weakspots.idealized.decoder.config import LMConfig
from weakspots.sims.decoder.carry import command, measure

RECORDED = resources.files(__package__) / "runs"  # package data: ships in the wheel

BASE = dict(seq_len=128, pairs=4, steps=1000, eval_every=250, eval_samples=16)
"""Every design's training and evaluation (the project's decoder: 2 layers, d = 64, 2
heads, no MLP; 1000 steps of AdamW keep mean accuracy off the ceiling, so a gap has room)."""

FOOTPRINT: dict[str, dict] = {
    **{f"s4_w{w}": dict(stride=4, window=w) for w in (2, 4, 8, 16)},
    **{f"s8_w{w}": dict(stride=8, window=w) for w in (4, 8, 16, 32)},
    "s8_w16_T256": dict(stride=8, window=16, seq_len=256),
    "softmax_s8_w4": dict(stride=8, window=4, operator="softmax_pool"),
    "softmax_s8_w16": dict(stride=8, window=16, operator="softmax_pool"),
}
"""Footprint designs: mean pooling at `W / s` = 1/2, 1, 2, 4 for s = 4 and 8; s = 8, W = 2s at
twice the length and facts (one fact density); softmax pooling below and above the stride."""

SELECTION_TOPK = 4
SELECTION: dict[str, dict] = {
    **{f"k4_T{t}": dict(stride=4, window=8, seq_len=t, indexer_topk=SELECTION_TOPK)
       for t in (128, 256, 512)},
    **{f"k{k}_T128": dict(stride=4, window=8, indexer_topk=k) for k in (2, 8, 16)},
}  # fmt: skip
"""Selection designs: the s = 4, W = 2s decoder with the indexer's top k on its compressed
layer: k = 4 at contexts of N = 30, 60, 120 entries (`N / k` = 7.5, 15, 30; one fact density,
pairs scale with the length), and N = 30 at k = 2, 8, 16 (`N / k` = 15, 3.75, 1.9)."""

FAMILIES = {"footprint": FOOTPRINT, "selection": SELECTION}

SEEDS = 4
TINY = dict(
    seq_len=36, pairs=2, key_vocab=16, value_vocab=8, filler_vocab=4, d_model=16, steps=4,
    eval_every=2, batch=4, eval_batch=8, eval_samples=1, index_dim=4, index_heads=2, rope_dim=4,
)  # fmt: skip
SIZES = {
    "tiny": dict(
        seeds=2,
        source="train",
        designs=(
            "s4_w2",
            "s4_w8",
            "s8_w16",
            "s8_w16_T256",
            "softmax_s8_w4",
            "softmax_s8_w16",
            "k4_T128",
            "k4_T256",
            "k16_T128",
        ),
    ),  # fmt: skip (one design of each comparison the rows make)
    "quick": dict(seeds=SEEDS, source="recorded"),
    "full": dict(seeds=SEEDS, source="train"),
}


def design_config(family: str, design: str, size: str = "full") -> LMConfig:
    """The `LMConfig` (seed 0) of `design` of `family` at `size` (tiny shrinks every design
    alike but keeps its stride, window and operator; its lengths scale with the design's)."""
    fields = {**BASE, **FAMILIES[family][design]}
    if fields.get("seq_len", 128) != 128:
        fields["pairs"] = BASE["pairs"] * fields["seq_len"] // BASE["seq_len"]
    if size == "tiny":
        scale = fields["seq_len"] // BASE["seq_len"]
        fields.update(TINY, seq_len=TINY["seq_len"] * scale, pairs=TINY["pairs"] * scale)
        fields["window"] = min(fields["window"], 8)
    return LMConfig(**fields)


def recorded_name(family: str, design: str) -> str:
    return f"{family}_{design}.json"


def recorded(family: str, design: str) -> dict:
    """The recorded `lm carry` report of a design, its config checked against today's."""
    path = RECORDED / recorded_name(family, design)
    report = json.loads(path.read_text())
    if LMConfig(**report["config"]).replace(seed=0) != design_config(family, design):
        raise ValueError(f"{path} records another config than design {design}")
    return report


@functools.cache
def run(family: str, size: str) -> dict:
    """Every design of `family` at `size`: `{design: {"command", "source", "report"}}`
    (memoised: an experiment's run and a figure share it)."""
    spec = SIZES[size]
    out = {}
    for design in FAMILIES[family]:
        if design not in spec.get("designs", FAMILIES[family]):
            continue
        config = design_config(family, design, size)
        if spec["source"] == "recorded":
            report, source = recorded(family, design), "recorded"
        else:
            report, source = measure(config, spec["seeds"]), "trained"
        out[design] = dict(command=command(config, spec["seeds"]), source=source, report=report)
    return out


def chunks(config: LMConfig) -> int:
    """N: the compressed entries the first query sees (the whole context's windows)."""
    return config.task.context_len // config.stride


def readout(logit_retrieval, chance: float) -> np.ndarray:
    """Accuracy from the footprint model's read logit `b + logit M`: the value is read with
    probability M, guessed at `chance` otherwise (`c + (1 - c) sigma(.)`)."""
    return chance + (1.0 - chance) * expit(logit_retrieval)


def fitted_accuracy(config: LMConfig, fit: dict, hidden=()) -> np.ndarray:
    """Per-phase accuracy of the footprint model with `fit`'s offset, carry gain and key gain
    (`fit_profile`), the entries `hidden` removed (`theory.footprint_flat_retrieval_logit`)."""
    read = theory.footprint_flat_retrieval_logit(
        config.stride, config.window, chunks(config), fit["carry_gain"], fit["decoy_gain"], hidden
    )
    return readout(fit["offset"] + read, 1.0 / config.value_vocab)


def fit_profile(config: LMConfig, accuracy) -> dict:
    """The footprint model fitted to one per-phase accuracy profile (s,): offset b, carry gain
    g = beta c / s >= 0 and key gain g_D in `acc = c + (1 - c) sigma(b + logit M(phi; g, g_D))`
    (flat carry over the sliding window W, mean pooling, N = `chunks(config)`), least squares
    on the logit scale. Returns {"offset", "carry_gain", "decoy_gain", "residual"} (the
    largest |fitted - measured| accuracy)."""
    chance = 1.0 / config.value_vocab
    acc = np.clip(np.asarray(accuracy, float), chance + 1e-3, 1.0 - 1e-3)
    target = logit((acc - chance) / (1.0 - chance))

    def residual(x):
        return x[0] + theory.footprint_flat_retrieval_logit(
            config.stride, config.window, chunks(config), x[1], x[2]
        ) - target  # fmt: skip

    best = least_squares(residual, x0=[0.0, 0.5 / config.stride, 0.0],
                         bounds=([-np.inf, 0.0, -np.inf], [np.inf, np.inf, np.inf]))  # fmt: skip
    fit = dict(offset=float(best.x[0]), carry_gain=float(best.x[1]), decoy_gain=float(best.x[2]))
    fit["residual"] = float(np.max(np.abs(fitted_accuracy(config, fit) - np.asarray(accuracy))))
    return fit


def per_phase_agreement(predicted, measured, ci) -> tuple[int, bool]:
    """The phase where `predicted` and `measured` (s,) differ most, and whether every phase's
    prediction lies inside its interval `ci` (s, 2)."""
    predicted, measured = np.asarray(predicted, float), np.asarray(measured, float)
    lo, hi = np.asarray(ci, float).T
    worst = int(np.argmax(np.abs(predicted - measured)))
    return worst, bool(np.all((predicted >= lo) & (predicted <= hi)))


def summary(design: str, cell: dict) -> dict:
    """A design's numbers for the rows and the figure: config facts, the pooled evaluation
    (seeds as clusters), the carry tests' intact accuracy and its hide drops, the footprint
    model fitted to the intact accuracy (pooled and per seed) and the compressed layer's
    pooling weights per seed `(R, H, s)`."""
    report = cell["report"]
    config = LMConfig(**report["config"])
    pooled, tests = report["pooled"], report["tests"]
    per_seed = np.asarray(report["phase_accuracy_per_seed"])
    weights = [w for seed in report.get("pooling_weights", []) for w in seed if w is not None]
    return {
        "design": design,
        "command": cell["command"],
        "config": report["config"],
        "stride": config.stride,
        "window": config.window,
        "seq_len": config.seq_len,
        "operator": config.operator,
        "indexer_topk": config.indexer_topk,
        "chunks": chunks(config),
        "seeds": len(report["seeds"]),
        "mean_accuracy": pooled["mean_accuracy"],
        "delta_max": pooled["delta_max"],
        "delta_max_ci": pooled["delta_max_ci"],
        "delta_max_noise_floor": pooled["delta_max_noise_floor"],
        "phase_accuracy": pooled["phase_accuracy"],
        "phase_accuracy_ci": pooled["phase_accuracy_ci"],
        "phase_accuracy_per_seed": pooled["phase_accuracy_per_seed"],
        "shared_accuracy": report["phase_accuracy"],
        "shared_accuracy_ci": report["phase_accuracy_ci"],
        "drops": {k: tests[k].get("drop") for k in ("hide_direct", "hide_next1") if k in tests},
        "drops_ci": {k: tests[k].get("drop_ci") for k in ("hide_direct", "hide_next1") if k in tests},
        "fit": fit_profile(config, report["phase_accuracy"]),
        "seed_fits": [fit_profile(config, a) for a in per_seed],
        "pooling_weights": np.asarray(weights).reshape(len(report["seeds"]), -1, config.stride).tolist()
        if weights else None,
    }  # fmt: skip

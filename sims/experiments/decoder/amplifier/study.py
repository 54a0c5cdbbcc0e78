"""The amplifier study: which part of DeepSeek-V4's attention makes weak spots large.

Every design keeps V4's proportions at small scale: a sliding layer (`swa`) and then a
compressed one whose local branch spans at least 8 of its strides (CSA: ratio 4 with
overlapping windows, the Lightning Indexer's top-k, one shared KV head, q/kv RMSNorm,
sinks; `idealized.decoder.config.V4_DESIGN`). Each part is switched off in training, one at a
time (`ABLATIONS`), beside the dense control (`operator none`). Per design
(`sims.decoder.carry.report`, the JSON of `weakspots lm carry`): per-phase accuracy of
each seed on its own sequences, `delta_max` with its interval and noise floor (seeds as
clusters); the carry tests (which entries the fact is read from); and each part switched
off at inference in the trained design.

V4's design does not leave the bag-of-values plateau at this scale (its values are its keys,
K = V; docs/decoder_runs.md), so its gap says nothing of amplification. The arm `csa_add`
starts from a base that learns the task (V4's CSA layer with every part off, values of their
own, 8 facts per sequence, 1000 steps) and switches one part on at a time (`ADDITIONS`),
beside the same base's dense control: each part's effect on the gap where there is
accuracy for a gap to open in. The arm `csa_add16` repeats the base, the indexer's top-k and
the control at 16 facts per sequence (fact density), where the top-k design sits off the
accuracy ceiling, the top-k design with two-token keys (a straddle test), and the top-k
design trained with each kept entry read beside the one before it (`PAIRINGS`: does the
main attention learn the overlapping window's current half when the indexer gives it
that half's entry?) and with twice the entries kept (`TOPK_SIZES`), and the base at half
the budget, between plateau and ceiling (`BUDGETS`); `hca_add` puts the same base and
control in HCA's layer (ratio 16).

Sizes: `tiny` trains tiny designs (tests of the pipeline); `quick` reads the reports
recorded in `sims/experiments/decoder/amplifier/runs/amplifier_<arm>_<design>.json` (each holds its config and its
`command`, a `weakspots lm carry` line that reproduces it): at CSA, V4's design and its
control with 4 seeds, every part off in turn (top-k, shared KV, q/kv norms, sinks, the
local branch) and two-token keys with 2; at HCA, V4's design and its control with 2; the
`csa_add` arm (base, each part on, dense control, two-token keys) with 4, the base and the
indexer's top-k with 8; the `csa_add16` arm (base, top-k, control, top-k with two-token
keys, the pairing, top-16, the base at 500 steps), the `csa_add20` arm (base, top-k,
control, the base at 500 steps) and the `hca_add` arm (base, control) with 4.
`full` retrains every design at both arms (`csa`: ratio 4; `hca`: ratio 16, phases
counted at 16) and at longer contexts, 4 seeds each. Trained decoders are kept in
the `sims.decoder.checkpoint` cache.
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from weakspots.idealized.decoder.config import LMConfig, with_design
from weakspots.sims.decoder.carry import command, measure

RECORDED = resources.files(__package__) / "runs"  # package data: ships in the wheel

ABLATIONS: dict[str, dict] = {
    "v4": {},
    "no_topk": dict(indexer_topk=0),
    "no_shared_kv": dict(shared_kv=False),
    "no_qk_norm": dict(qk_norm=False),
    "no_sink": dict(sink=False),
    "no_local": dict(local_window=0),
    "dense": dict(operator="none"),
    "key_len2": dict(key_len=2),
}
"""Design name -> the fields it changes from V4's design (`v4`: none; `dense`: the control;
`key_len2`: the task with two-token keys, where a straddling fact is not simply phase 0)."""

ADDITIONS: dict[str, dict] = {
    "base": {},
    "with_topk": dict(indexer_topk=8),
    "with_shared_kv": dict(shared_kv=True),
    "with_sink": dict(sink=True),
    "with_qk_norm": dict(qk_norm=True),
    "with_rope_quarter": dict(rope_fraction=0.25),
    "with_q_rank": dict(q_rank=32),
    "with_o_groups": dict(o_groups=2, o_rank=16),
}
"""Design name -> the one part of V4 it switches on in the `csa_add` arm's base (V4's value
for that part; `base`: none)."""

PAIRINGS: dict[str, dict] = {"with_topk_pairs": dict(indexer_topk=8, indexer_pairs=True)}
"""The intervention on what the indexer gives the main attention in training
(`indexer_pairs`: each kept entry read with the entry before it, so a fact's entry whose
current half holds it comes in with the one whose previous half does), at V4's top-8. (At
top-4, paired or not, the design stays at chance in 1000 steps: docs/decoder_runs.md.)"""

TOPK_SIZES: dict[str, dict] = {"with_topk16": dict(indexer_topk=16)}
"""The indexer's top-k keeping 16 entries, half of the at most 32 a query sees at T = 128
(`with_topk`: 8, a quarter): how the effect of top-k changes with k against the entries."""

BUDGETS: dict[str, dict] = {"base_500steps": dict(steps=500)}
"""The base trained for half the arm's budget (500 steps, its cosine schedule over 500):
between plateau and ceiling, near the top-k design's accuracy at 1000 steps, the
matched-accuracy control for what top-k does to the read."""

COMPARED_WITH: dict[str, tuple[str, ...]] = {
    "with_topk_pairs": ("with_topk",), "with_topk": ("base_500steps",)
}  # fmt: skip
"""Comparisons beside each design's against its arm's reference (gap and current-half
rows): the paired top-k design against the same top-k unpaired, and the top-k design
against the base at half the budget (matched accuracy)."""

AMPLIFIER_DESIGNS: dict[str, dict] = {
    **ABLATIONS, **ADDITIONS, "with_topk_key_len2": dict(indexer_topk=8, key_len=2), **PAIRINGS,
    **TOPK_SIZES, **BUDGETS,
}  # fmt: skip
"""Every design's fields over its arm (`dense` serves both kinds of arm;
`with_topk_key_len2`: the indexer's top-k on the task with two-token keys; `PAIRINGS`,
`TOPK_SIZES`, `BUDGETS`)."""

_CSA_ADD = dict(layers=2, layout="swa,csa", window=32, local_window=32, indexer_topk=0,
                shared_kv=False, sink=False, qk_norm=False, rope_fraction=1.0, q_rank=0,
                o_groups=0, o_rank=0, separate_values=True, pairs=8, steps=1000)  # fmt: skip

ARMS: dict[str, dict] = {
    "csa": dict(layers=2, layout="swa,csa", window=32, local_window=32),
    "hca": dict(layers=2, layout="swa,hca", stride=16, hca_stride=16, window=32,
                local_window=32, indexer_topk=0),
    "csa_add": _CSA_ADD,
    "csa_add16": dict(_CSA_ADD, pairs=16),
    "csa_add20": dict(_CSA_ADD, pairs=20, eval_samples=64),
    "hca_add": dict(_CSA_ADD, layout="swa,hca", stride=16, hca_stride=16),
}  # fmt: skip
"""The compressed layer of each arm: CSA at ratio 4 (local window 8 strides), HCA at 16;
`csa_add`: CSA with every part off, values of their own (not V4's), 8 facts, 1000 steps at
every size (the regime where its base learns); `csa_add16`: the same at 16 facts (the
density at which the indexer's top-k leaves its design off the ceiling); `csa_add20`: at 20
facts, each seed scored on 64 sequences per position (the largest gap the study found:
sims/experiments/decoder/amplifier/runs/large_gap.json); `hca_add`: the same switches in HCA's layer (ratio 16), its base
and control only."""

REFERENCE: dict[str, str] = {
    "csa": "v4", "hca": "v4", "csa_add": "base", "csa_add16": "base", "csa_add20": "base",
    "hca_add": "base",
}  # fmt: skip
"""The design each arm's others are compared with."""

ADD_DESIGNS = (*ADDITIONS, "dense", "key_len2")
"""The `csa_add` arm's designs: the base, each part on, the dense control and the base with
two-token keys (a straddle test: the straddling value phases become 0 and 1)."""

ADD16_DESIGNS = (
    "base", "with_topk", "dense", "with_topk_key_len2", *PAIRINGS, *TOPK_SIZES, *BUDGETS
)  # fmt: skip
"""The `csa_add16` arm's designs: the base, the part with the largest gap at 8 facts, the
control, that part with two-token keys (its straddle test: a straddling fact's value
phases become 0 and 1), the pairing intervention on it (`PAIRINGS`), top-k keeping twice
the entries (`TOPK_SIZES`) and the base at half the budget (`BUDGETS`)."""

ADD20_DESIGNS = ("base", "with_topk", "dense", *BUDGETS)
"""The `csa_add20` arm's designs: the base, the indexer's top-k, the control and the base at
half the budget (`BUDGETS`)."""

HCA_ADD_DESIGNS = ("base", "dense")
"""The `hca_add` arm's designs: the base in HCA's layer and its control."""

ADD_SEEDS = {("csa_add", "base"): 8, ("csa_add", "with_topk"): 8}
"""The `csa_add` cells trained at 8 seeds: the base and the part whose gap stood out at 4."""

SIZES: dict[str, dict] = {
    "tiny": dict(
        config=dict(seq_len=40, pairs=4, key_vocab=16, value_vocab=8, filler_vocab=4,
                    d_model=16, heads=2, window=8, local_window=8, index_dim=4, index_heads=2,
                    q_rank=8, o_rank=4, steps=4, eval_every=2, batch=4, eval_batch=8,
                    eval_samples=1),
        arms=("csa",), designs=("v4", "no_topk", "dense"), seeds={}, default_seeds=1,
        seq_lens=(40,), source="train",
    ),
    "quick": dict(
        config=dict(seq_len=128, steps=2000, eval_every=250, eval_samples=16),
        arms=("csa", "hca", "csa_add", "csa_add16", "csa_add20", "hca_add"),
        designs=tuple(ABLATIONS), seeds={"v4": 4, "dense": 4},
        default_seeds=2, seq_lens=(128,), source="recorded",
        arm_designs={"hca": ("v4", "dense"), "csa_add": ADD_DESIGNS,
                     "csa_add16": ADD16_DESIGNS, "csa_add20": ADD20_DESIGNS,
                     "hca_add": HCA_ADD_DESIGNS},
        arm_seeds={"hca": 2, "csa_add": 4, "csa_add16": 4, "csa_add20": 4, "hca_add": 4},
        arm_seq_lens={"hca": (136,), "hca_add": (144,)},
        cell_seeds=ADD_SEEDS,
    ),
    "full": dict(
        config=dict(steps=4000, eval_every=500, eval_samples=16),
        arms=("csa", "hca", "csa_add", "csa_add16", "csa_add20", "hca_add"),
        designs=tuple(ABLATIONS), seeds={}, default_seeds=4,
        arm_designs={"hca": tuple(d for d in ABLATIONS if d != "key_len2"),
                     "csa_add": ADD_DESIGNS, "csa_add16": ADD16_DESIGNS,
                     "csa_add20": ADD20_DESIGNS, "hca_add": HCA_ADD_DESIGNS},
        seq_lens=(136, 520, 1032),
        arm_seq_lens={"csa_add": (128,), "csa_add16": (128,), "csa_add20": (128,),
                      "hca_add": (144,)},
        cell_seeds=ADD_SEEDS,
        source="train",
    ),
}  # fmt: skip
"""Per size: shared `LMConfig` fields, the arms, designs, seeds (`seeds_of`) and contexts
(`seq_len`s whose context is a multiple of 16, for both arms)."""


def design_config(size: str, arm: str, design: str, seq_len: int | None = None) -> LMConfig:
    """The `LMConfig` (seed 0) of `design` in `arm` at `size` (and context `seq_len`)."""
    spec = SIZES[size]
    given = {**spec["config"], **ARMS[arm], **AMPLIFIER_DESIGNS[design]}
    if size == "tiny":
        given.update(stride=4, hca_stride=4)  # tiny contexts: one small ratio for both arms
        if arm == "hca":
            given.update(local_window=spec["config"]["local_window"])
    if seq_len is not None:
        given["seq_len"] = seq_len
    return LMConfig(**with_design("v4", given, set(given)))


def seeds_of(size: str, design: str, arm: str = "csa") -> int:
    """Seeds of a cell: `cell_seeds[(arm, design)]`, else `arm_seeds[arm]`, else
    `seeds[design]`, else `default_seeds`."""
    spec = SIZES[size]
    if (arm, design) in spec.get("cell_seeds", {}):
        return spec["cell_seeds"][(arm, design)]
    if arm in spec.get("arm_seeds", {}):
        return spec["arm_seeds"][arm]
    return spec["seeds"].get(design, spec["default_seeds"])


def cells(size: str) -> list[tuple[str, str, int]]:
    """Every (arm, design, seq_len) of `size` (an arm may have its own designs, seeds and
    contexts: `arm_designs`, `arm_seeds`, `arm_seq_lens`)."""
    spec = SIZES[size]
    designs = lambda arm: spec.get("arm_designs", {}).get(arm, spec["designs"])  # noqa: E731
    lengths = lambda arm: spec.get("arm_seq_lens", {}).get(arm, spec["seq_lens"])  # noqa: E731
    out = [(a, d, t) for a in spec["arms"] for t in lengths(a) for d in designs(a)]
    return [  # an ablation of a part the arm does not have (HCA's top-k) is its reference
        (a, d, t) for a, d, t in out
        if d == REFERENCE[a]
        or design_config(size, a, d, t) != design_config(size, a, REFERENCE[a], t)
    ]  # fmt: skip


def recorded_name(arm: str, design: str) -> str:
    return f"amplifier_{arm}_{design}.json"


def recorded(arm: str, design: str, expected: LMConfig) -> dict:
    """The recorded `lm carry` report of a quick design, its config checked against `expected`."""
    report = json.loads((RECORDED / recorded_name(arm, design)).read_text())
    if LMConfig(**report["config"]).replace(seed=0) != expected:
        raise ValueError(
            f"{recorded_name(arm, design)} records another config than the quick {design}"
        )
    return report


@functools.cache
def run(size: str) -> dict:
    """Every cell of `size`: `{"cells": [{arm, design, seq_len, command, report}]}` (memoised:
    the two experiments that read the study share one run)."""
    spec = SIZES[size]
    out = []
    for arm, design, seq_len in cells(size):
        config = design_config(size, arm, design, seq_len)
        seeds = seeds_of(size, design, arm)
        if spec["source"] == "recorded":
            report, source = recorded(arm, design, config), "recorded"
        else:
            report, source = measure(config, seeds), "trained"
        out.append(
            dict(arm=arm, design=design, seq_len=seq_len, source=source,
                 command=command(config, seeds), report=report)
        )  # fmt: skip
    return {"cells": out, "chance": 1.0 / config.value_vocab}  # every cell's task alike


def summary(cell: dict) -> dict:
    """A cell's headline numbers: mean accuracy, delta_max with its interval and noise floor,
    interval gap, worst and best phase, per-phase accuracy and intervals, carry drops."""
    pooled = cell["report"]["pooled"]
    tests = cell["report"]["tests"]
    config = cell["report"]["config"]
    return {
        "arm": cell["arm"],
        "design": cell["design"],
        "seq_len": cell["seq_len"],
        "stride": config["stride"],
        "window": config["window"],
        "key_len": config["key_len"],
        "seeds": len(cell["report"]["seeds"]),
        "mean_accuracy": pooled["mean_accuracy"],
        "delta_max": pooled["delta_max"],
        "delta_max_ci": pooled["delta_max_ci"],
        "delta_max_noise_floor": pooled["delta_max_noise_floor"],
        "interval_gap": pooled["interval_gap"],
        "worst_phase": pooled["worst_phase"],
        "best_phase": pooled["best_phase"],
        "phase_accuracy": pooled["phase_accuracy"],
        "phase_accuracy_ci": pooled["phase_accuracy_ci"],
        "drops": {k: v.get("mean_drop") for k, v in tests.items()},
        "drops_ci": {k: v.get("mean_drop_ci") for k, v in tests.items()},
        "accuracy_under": {k: v.get("accuracy") for k, v in tests.items()},
        "phase_drops": {k: v.get("drop") for k, v in tests.items()},
        "phase_drops_ci": {k: v.get("drop_ci") for k, v in tests.items()},
    }

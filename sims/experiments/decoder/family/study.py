"""Paper figure (b): the family, the weak-spot gap by operator x stride x context length.

`configs(size)` lists the runs: for every context length, every operator at every stride,
and the dense control (`--operator none`, trained once per context length and counted
at every stride); `run(size)` trains them (one compile per structure, seeds batched; at
`full` kept in, and loaded from, the `sims.decoder.checkpoint` cache) and
returns one row per (operator, stride, context) with the outcomes pooled over seeds:
`delta_max`, its noise floor, the interval gap (best phase's lower bound minus worst
phase's upper bound: positive when the weak spot is beyond the intervals, seeds as
clusters), the
per-phase accuracy and each seed's `delta_max`.

The named designs of `FAMILY_DESIGNS` (`v4`: DeepSeek-V4's attention, `idealized.decoder.config.with_design`
over the size's shared fields) join the family under `designs`, one row per (design,
stride, context) alike: at `full` trained with the rest; at `tiny` and `quick` read from the
recorded `weakspots lm train --design ...` report of `RECORDINGS` (its config checked against
`design_config(RECORDED_SIZE, ...)`), so those sizes train nothing more.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

from weakspots.idealized.decoder.config import LMConfig, with_design
from weakspots.sims.decoder.checkpoint import trained
from weakspots.sims.decoder.evaluate import phase_summary
from weakspots.sims.progress import Progress

SIZES: dict[str, dict] = {
    "tiny": dict(
        config=dict(pairs=2, d_model=16, heads=2, rope_dim=4, window=4, steps=4, eval_every=2,
                    batch=4, eval_batch=8, eval_samples=1),
        operators=("mean_pool", "deepseek_v4"), strides=(4,), seq_lens=(32,), seeds=1,
    ),
    "quick": dict(
        config=dict(d_model=32, rope_dim=8, window=8, steps=200, eval_every=100, batch=32,
                    eval_samples=4),
        operators=("mean_pool", "deepseek_v4"), strides=(4,), seq_lens=(64,), seeds=1,
    ),
    "full": dict(
        config=dict(steps=2000, eval_every=200, eval_samples=16),
        operators=("mean_pool", "softmax_pool", "max_pool", "low_rank", "deepseek_v4"),
        strides=(4, 8), seq_lens=(128, 256), seeds=4,
    ),
}  # fmt: skip
"""Per size: shared `LMConfig` fields, the grid, and the seeds of every cell."""

FAMILY_DESIGNS = ("v4",)
"""Named designs (`idealized.decoder.config.DESIGNS`) in the family beside the operators."""
RECORDINGS = {"v4": ("family_v4_s4_T64.json", 4, 64)}
"""Per design, read at `tiny` and `quick`: its report in `runs/` and the (stride,
context) of the cell it records; `docs/decoder_runs.md` gives the command."""
RECORDED_SIZE = "quick"
RECORDED = resources.files(__package__) / "runs"  # package data: ships in the wheel
"""The size whose shared fields the recorded design runs use."""


def cells(size: str) -> list[tuple[str, int, int]]:
    """Every (operator, stride, seq_len) of the grid, the control `none` included."""
    spec = SIZES[size]
    ops = (*spec["operators"], "none")
    return [(op, s, T) for T in spec["seq_lens"] for op in ops for s in spec["strides"]]


def cell_config(size: str, operator: str, stride: int, seq_len: int) -> LMConfig:
    """The config of a cell; the control trains at the largest stride (only phases depend on it)."""
    spec = SIZES[size]
    trained_stride = max(spec["strides"]) if operator == "none" else stride
    return LMConfig(**spec["config"], operator=operator, stride=trained_stride, seq_len=seq_len)


def design_config(size: str, design: str, stride: int, seq_len: int) -> LMConfig:
    """The config of a design's cell: the design's choices for every field the size does not
    give (as `weakspots lm train --design` with the size's fields as flags)."""
    given = {**SIZES[size]["config"], "stride": stride, "seq_len": seq_len}
    return LMConfig(**with_design(design, given, given))


def design_cells(size: str) -> list[tuple[str, int, int]]:
    """Every (design, stride, seq_len) of `FAMILY_DESIGNS` the size trains (only `full`)."""
    spec = SIZES[size]
    if size != "full":
        return []
    return [(d, s, T) for T in spec["seq_lens"] for d in FAMILY_DESIGNS for s in spec["strides"]]


def configs(size: str) -> list[LMConfig]:
    unique = dict.fromkeys(cell_config(size, *cell) for cell in cells(size))
    unique.update(dict.fromkeys(design_config(size, *cell) for cell in design_cells(size)))
    return [c.replace(seed=s) for c in unique for s in range(SIZES[size]["seeds"])]


def _pooled(counted: LMConfig, mine: list) -> dict:
    """The pooled phase metrics of the runs `mine`, phases counted as `counted` says."""
    pooled = phase_summary(counted, np.stack([r.outcomes for r in mine]))
    per_seed = [phase_summary(counted, r.outcomes) for r in mine]
    return {
        "seeds": len(mine),
        "delta_max": pooled["delta_max"],
        "delta_max_noise_floor": pooled["delta_max_noise_floor"],
        "interval_gap": pooled["interval_gap"],
        "mean_accuracy": pooled["mean_accuracy"],
        "phase_accuracy": pooled["phase_accuracy"],
        "phase_accuracy_ci": pooled["phase_accuracy_ci"],
        "straddle_accuracy": pooled["straddle_accuracy"],
        "seed_delta_max": [s["delta_max"] for s in per_seed],
        "wall_seconds": float(sum(r.wall_seconds for r in mine)),
    }


def recorded_design(design: str) -> dict:
    """Design `design`'s cell from its recorded `lm train --seeds K --json` report (`RECORDINGS`),
    as `run` gives a trained one, with `source` naming the file; ValueError if the recording
    is of another config than `design_config(RECORDED_SIZE, ...)`."""
    name, stride, seq_len = RECORDINGS[design]
    report = json.loads((RECORDED / name).read_text())
    expected = design_config(RECORDED_SIZE, design, stride, seq_len)
    if LMConfig(**report["config"]).asdict() != expected.asdict():
        raise ValueError(
            f"sims/experiments/decoder/family/runs/{name} records another config than design {design!r}"
        )
    pooled = report["pooled"]
    keys = ("delta_max", "delta_max_noise_floor", "interval_gap", "mean_accuracy",
            "phase_accuracy", "phase_accuracy_ci", "straddle_accuracy")  # fmt: skip
    return {
        "design": design,
        "stride": stride,
        "seq_len": seq_len,
        "seeds": len(report["seeds"]),
        **{k: pooled[k] for k in keys},
        "seed_delta_max": list(report["delta_max"]),
        "source": f"recorded: sims/experiments/decoder/family/runs/{name} ({report['command']})",
    }


def run(size: str, progress: Progress | None = None) -> dict:
    """Train the grid; one row per (operator, stride, context) with the pooled phase metrics,
    and under `designs` one per (design, stride, context) (`recorded_design` below `full`)."""
    results = trained(configs(size), directory=size == "full", progress=progress)
    rows = []
    for operator, stride, seq_len in cells(size):
        config = cell_config(size, operator, stride, seq_len)
        mine = [r for r in results if r.config.static == config.static]
        counted = config.replace(stride=stride)  # phases of the control counted at this stride
        rows.append(
            {"operator": operator, "stride": stride, "seq_len": seq_len, **_pooled(counted, mine)}
        )
    designs = []
    for design, stride, seq_len in design_cells(size):
        config = design_config(size, design, stride, seq_len)
        mine = [r for r in results if r.config.static == config.static]
        designs.append(
            {"design": design, "stride": stride, "seq_len": seq_len, **_pooled(config, mine),
             "source": "trained"}
        )  # fmt: skip
    if size != "full":
        designs = [recorded_design(d) for d in FAMILY_DESIGNS]
    return {"size": size, "rows": rows, "designs": designs}

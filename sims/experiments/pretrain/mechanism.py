"""The paper's mechanism measurements (PAPER.md §4) on the pretrained designs, from recordings.

`weakspots lm knockout`, `lm gates` and `lm cycle` (`sims.pretrain.mechanism`) measure a
design's checkpoints; each measurement is recorded as `runs/mechanism/<name>.json`:
`{"kind": "knockout" | "gates" | "cycle", "design": the sweep's name of the design
(`sweep.PRETRAIN_DESIGNS`: `w8s8_1kv`, `full_1kv`, ...), "label": the paper's name for it
(optional; else named from the design), "command", "machine", "steps": the checkpoint's
training step, "result": the verb's --json output without its machine's `checkpoints`}`.
Gates recorded with `--over-training` hold every kept checkpoint seed by seed (the last is
read as the checkpoint, the others as trajectories).

Sizes: `tiny` reads planted recordings (made-up knockout, gate and cycle results of the
verbs' shapes: a test of the pipeline that measures nothing); `quick` and `full` read the
recordings (without any: no rows, the paper's numbers alone in the tables).

Rows, all findings (no theory sizes these effects at this scale; the paper's numbers are the
reference). Only the interventions carry a verdict on the mechanism:

* knockout (mean replacement of a unit at the last position): per unit, whether its
  significant hurt (residues whose change interval lies below 0) covers every phase alike or
  a few adjacent phases (`hurt_pattern`); per design the paper's contrast: full attention's
  most important unit hurts every phase alike, a compressed design has units confined to a
  few adjacent phases, different units different phases. "A few" must spare a phase the
  unit could have hurt (one with intact accuracy), so that the verdict could have come out
  otherwise.
* gate cycling (W = S): per delta, R^2 of observed against predicted per-residue changes
  without the boundary phase (mean over seeds) in the paper's 0.66-1.00, and above the R^2
  the same changes have against a cycle that erased the model (change -A_0(r)): both changes
  share the term -A_0(r), so a cycle that merely broke the model could score well; the
  boundary phase's accuracy under each cycle below the other phases'.
* gates (a description, no intervention): most key gates uniform on average but
  concentrated per window; value gates peaking one offset after statically concentrated
  key gates.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from weakspots.idealized import metrics
from weakspots.sims.experiments.experiment import Experiment, Row, Table
from weakspots.sims.experiments.pretrain import ENGINE
from weakspots.sims.experiments.pretrain.paper_lookup import design_label, paper_name, reference
from weakspots.sims.experiments.pretrain.sweep import PRETRAIN_DESIGNS
from weakspots.sims.pretrain import lookup
from weakspots.sims.pretrain import mechanism as measure

KINDS = ("knockout", "gates", "cycle")
PAPER_R2 = (0.66, 1.0)  # the paper's R^2 without the boundary phase, five models, |delta| <= 3
EDGE = 1e-9  # R^2 = 1.00 exactly is inside the paper's range, not lost to rounding
DEFAULT_PERIOD = 8  # a full-attention map's phases when no compressed design is recorded
ALIKE = 0.5  # "alike": every phase loses at least half of what the worst-hit phase loses
PAPER_HURT = 25.0  # a phase of a published map is hurt when it loses >= 25% of its accuracy
UNIFORM = 0.1  # a gate within a tenth of (W - 1) of W effective offsets per window: uniform
STATIC_SHARE = 0.5  # a gate is statically concentrated when at least half its per-window
# concentration, W - E[exp(H(alpha))], is the same in every window, W - exp(H(E[alpha]))

EVERY, FEW, OTHER, NONE = "every phase", "a few adjacent phases", "neither", "no phase"


def recordings_dir() -> Path:
    """Where the mechanism measurements are recorded (`runs/mechanism/`, package data)."""
    return Path(str(resources.files(__package__))) / "runs" / "mechanism"


@dataclass(frozen=True)
class Size:
    source: str  # "planted" (tiny: made-up results, a pipeline test) or "recorded"


SIZES = {"tiny": Size("planted"), "quick": Size("recorded"), "full": Size("recorded")}


# ----------------------------------------------------------------------------- designs


def design_config(design: str) -> dict | None:
    """The `PretrainConfig` fields the sweep's design `design` sets; None for another name."""
    return dict(PRETRAIN_DESIGNS[design]) if design in PRETRAIN_DESIGNS else None


def _header(record: dict) -> dict:
    config = design_config(record["design"])
    label = record.get("label") or (design_label(config) if config else record["design"])
    return {"design": record["design"], "label": label, "config": config,
            **{k: record.get(k) for k in ("command", "machine", "steps")}}  # fmt: skip


def _num(x) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _triple(x) -> list:
    return [_num(v) for v in (x if x is not None else (None, None, None))]


# ----------------------------------------------------------------------------- knockout


def cyclic_runs(phases, period: int) -> int:
    """How many maximal runs of adjacent phases (cyclically, mod `period`) `phases` form."""
    s = set(phases)
    if len(s) == period:
        return 1
    return sum((p - 1) % period not in s for p in s)


def hurt_pattern(hurt, hurtable, period: int) -> str:
    """Where a unit's hurt falls among the `period` phases: `EVERY` phase; `FEW` adjacent
    phases (one cyclic run of at most period / 2, sparing a phase the unit could have hurt,
    one in `hurtable`); `NONE`; else `OTHER` (scattered, most phases, or none spared)."""
    hurt, hurtable = set(hurt), set(hurtable)
    if not hurt:
        return NONE
    if len(hurt) == period:
        return EVERY
    if len(hurt) <= period // 2 and cyclic_runs(hurt, period) == 1 and hurtable - hurt:
        return FEW
    return OTHER


def alike(losses) -> bool:
    """Whether every phase loses at least `ALIKE` of the worst-hit phase's loss."""
    v = np.asarray([x for x in losses if x is not None and math.isfinite(x)], dtype=np.float64)
    return bool(v.size and v.max() > 0 and v.min() >= ALIKE * v.max())


def _unit_name(unit: dict) -> str:
    if unit["unit"] == "head":
        return f"layer {unit['layer']}, KV {unit['kv_head']}"
    return f"layer {unit['layer']} (all heads)"


def knockout_entry(record: dict, period: int) -> dict:
    """One recorded knockout, its units classified at `period` phases: a phase is hurt when
    most of its residues with intact accuracy lie wholly below 0 in the change interval (the
    verb's `hurt_residues`); units with the same query heads as an earlier one (a layer of
    one KV head) are left out."""
    result = record["result"]
    change = np.asarray(result["change"], dtype=np.float64)  # (U, M)
    modulus = change.shape[1]
    if modulus % period:
        period = modulus  # phases the residues cannot be folded into: residues themselves
    hurt = np.zeros(change.shape, dtype=bool)
    for u, residues in enumerate(measure.hurt_residues(result)):
        hurt[u, residues] = True
    relative = np.array([[math.nan if v is None else v for v in row]
                         for row in result["relative_change"]], dtype=np.float64)  # fmt: skip
    intact = result["intact"]
    hurtable = np.asarray(intact["residue_mean"], dtype=np.float64) > 0
    phase = np.arange(modulus) % period
    hurtable_phases = sorted({int(p) for p in phase[hurtable]})
    units, seen = [], set()
    for u, unit in enumerate(result["units"]):
        key = (unit["layer"], tuple(unit["query_heads"]))
        if key in seen:
            continue
        seen.add(key)
        hurt_phases, losses = [], []
        for p in range(period):
            at = (phase == p) & hurtable
            if at.any() and 2 * int(hurt[u, at].sum()) > int(at.sum()):
                hurt_phases.append(p)
            mine = relative[u, phase == p]
            mine = mine[np.isfinite(mine)]
            losses.append(_num(-mine.mean()) if mine.size else None)
        pattern = hurt_pattern(hurt_phases, hurtable_phases, period)
        units.append({
            "name": _unit_name(unit), "unit": unit["unit"], "layer": unit["layer"],
            "kv_head": unit["kv_head"], "mean_change": float(change[u].mean()),
            "relative_change": [_num(v) for v in relative[u]],
            "hurt_residues": np.flatnonzero(hurt[u]).tolist(), "hurt_phases": hurt_phases,
            "phase_loss": losses, "pattern": pattern,
            "alike": pattern == EVERY and alike(losses),
        })  # fmt: skip
    header = _header(record)
    return {
        **header,
        "attention": result.get("attention") or (header["config"] or {}).get("attention"),
        "period": period,
        "modulus": modulus,
        "padding": result.get("padding"),
        "seeds": intact["seeds"],
        "prompts_per_residue": intact["prompts_per_residue"],
        "calibration_prompts": result.get("calibration_prompts"),
        "intact_residue_mean": [float(x) for x in intact["residue_mean"]],
        "intact_mean": float(intact["mean_accuracy"]),
        "hurtable_phases": hurtable_phases,
        "units": units,
    }


def _important(entry: dict) -> dict | None:
    """The unit whose knockout costs the most accuracy on average over residues."""
    return min(entry["units"], key=lambda u: u["mean_change"], default=None)


def paper_knockout_units(relative, period: int) -> list[dict]:
    """A published knockout map (`[layer][KV head][phase]`, relative change in %) classified
    as ours: a phase is hurt when it loses at least `PAPER_HURT` percent (no intervals are
    published); every phase could be hurt."""
    out = []
    for layer, heads in enumerate(relative):
        for head, row in enumerate(heads):
            losses = [-float(x) for x in row]
            hurt = [p for p, loss in enumerate(losses) if loss >= PAPER_HURT]
            pattern = hurt_pattern(hurt, range(period), period)
            out.append({"layer": layer, "kv_head": head, "hurt_phases": hurt, "pattern": pattern,
                        "alike": pattern == EVERY and alike(losses),
                        "mean_change": -float(np.mean(losses))})  # fmt: skip
    return out


# ----------------------------------------------------------------------------- gates


def gate_class(static: float, per_window: float, window: int | None) -> str | None:
    """`uniform` (within `UNIFORM` of W offsets per window), `static` (at least `STATIC_SHARE`
    of the per-window concentration W - E[exp(H)] is the static W - exp(H(E))), or
    `content-driven`; None when W is unknown."""
    if window is None:
        return None
    if window - per_window < UNIFORM * (window - 1):
        return "uniform"
    share = (window - static) / (window - per_window)
    return "static" if share >= STATIC_SHARE else "content-driven"


def gates_entry(record: dict) -> dict:
    """One recorded `lm gates`: every gate (seed, layer, KV head or channel, branch) at the
    last checkpoint, with its class, its trajectory over the kept checkpoints
    (`--over-training`) and, where the mean gates are recorded, where key and value peak
    (`sims.pretrain.mechanism.gate_peaks`); and their `gate_summary`."""
    header = _header(record)
    window = (header["config"] or {}).get("window")
    gates, over_training, last_step, seed_count = [], False, None, 0
    for item in record["result"]["results"]:
        window = item.get("window", window)
        if "run" in item:  # --over-training: per branch (steps, seeds, L, E)
            over_training, steps = True, item["steps"]
            last_step = steps[-1]
            seeds = item.get("seeds") or list(range(len(item["branches"]["key"]["static"][0])))
            for branch, data in item["branches"].items():
                static = np.asarray(data["static"], dtype=np.float64)
                per_window = np.asarray(data["per_window"], dtype=np.float64)
                for r, seed in enumerate(seeds):
                    for (layer, e), s in np.ndenumerate(static[-1, r]):
                        gates.append({
                            "seed": seed_count + r, "seed_id": seed, "layer": layer, "head": e,
                            "branch": branch, "static": float(s),
                            "per_window": float(per_window[-1, r, layer, e]),
                            "trajectory": {"steps": list(steps),
                                           "static": static[:, r, layer, e].tolist(),
                                           "per_window": per_window[:, r, layer, e].tolist()},
                        })  # fmt: skip
            seed_count += len(seeds)
            continue
        peaks = measure.gate_peaks(item) if "mean_gate" in item["branches"].get("key", {}) else None
        for branch, data in item["branches"].items():
            static = np.asarray(data["static"], dtype=np.float64)
            for (layer, e), s in np.ndenumerate(static):
                gate = {"seed": seed_count, "seed_id": seed_count, "layer": layer, "head": e,
                        "branch": branch, "static": float(s), "trajectory": None,
                        "per_window": float(data["per_window"][layer][e])}  # fmt: skip
                if peaks is not None and branch == "key":
                    gate |= peaks[layer][e]
                gates.append(gate)
        seed_count += 1
    for gate in gates:
        gate["class"] = gate_class(gate["static"], gate["per_window"], window)
    entry = {**header, "window": window, "over_training": over_training,
             "checkpoint_step": last_step if last_step is not None else header["steps"],
             "seeds": seed_count, "gates": gates}  # fmt: skip
    return entry | {"summary": gate_summary(entry)}


def gate_summary(entry: dict) -> dict:
    """Key gates at the checkpoint: how many, the content-driven share, the statically
    concentrated ones, and among those with a recorded value peak how many peak one offset
    after their key gate."""
    keys = [g for g in entry["gates"] if g["branch"] == "key"]
    static = [g for g in keys if g["class"] == "static"]
    peaked = [g for g in static if "value_after_key" in g]
    return {
        "key_gates": len(keys),
        "content_driven": sum(g["class"] == "content-driven" for g in keys),
        "static": [(g["seed"], g["layer"], g["head"]) for g in static],
        "peaked": len(peaked),
        "value_after_key": sum(g["value_after_key"] for g in peaked),
    }


# ----------------------------------------------------------------------------- cycling


def cycle_entry(record: dict) -> dict:
    """One recorded `lm cycle`: per delta the verb's R^2 (mean and interval over seeds), the
    mean observed and predicted change per residue, the R^2 the observed changes have against
    erasing the model (`-A_0(r)`, boundary left out; mean over seeds), and the boundary
    phase's accuracy intact, under the cycle and as the gates alone would move it."""
    result = record["result"]
    stride, boundary = result["stride"], result["boundary_phase"]
    intact = result["intact"]
    a0 = np.asarray(intact["residue_accuracy"], dtype=np.float64)  # (R, M)
    modulus = a0.shape[1]
    inside = np.arange(modulus) % stride != boundary
    intact_phases = measure.phase_profile(a0.mean(axis=0), stride)
    deltas = []
    for delta, e in sorted(result["deltas"].items(), key=lambda kv: int(kv[0])):
        d = int(delta)
        observed = np.asarray([s["observed_change"] for s in e["seeds"]], dtype=np.float64)
        predicted = np.asarray([s["predicted_change"] for s in e["seeds"]], dtype=np.float64)
        erased = [
            measure.r_squared(o[inside], -a[inside]) for o, a in zip(observed, a0, strict=True)
        ]
        erased = [x for x in erased if math.isfinite(x)]
        cycled = np.asarray(e["report"]["residue_mean"], dtype=np.float64)
        deltas.append({
            "delta": d,
            **{k: _triple(e.get(k)) for k in ("r_squared", "r_squared_without_boundary",
                                              "r_squared_accuracy", "boundary_accuracy")},
            "erased_r_squared": float(np.mean(erased)) if erased else None,
            "observed_change": observed.mean(axis=0).tolist(),
            "predicted_change": predicted.mean(axis=0).tolist(),
            "cycled_residue_mean": cycled.tolist(),
            "other_phases": float(cycled[inside].mean()),
            "intact_boundary": float(intact_phases[boundary]),
            "predicted_boundary": float(intact_phases[(boundary - d) % stride]),
        })  # fmt: skip
    return {**_header(record), "stride": stride, "boundary_phase": boundary, "modulus": modulus,
            "padding": result.get("padding"), "seeds": intact["seeds"],
            "prompts_per_residue": intact["prompts_per_residue"],
            "intact_residue_mean": [float(x) for x in intact["residue_mean"]],
            "intact_phase_profile": intact_phases.tolist(), "deltas": deltas}  # fmt: skip


# ----------------------------------------------------------------------------- reading


def read_records(records: list[dict], source: str) -> dict:
    """Recordings (`{"kind", "design", "result", ...}`) as the experiment's results. A
    full-attention knockout is classified at the largest stride of the compressed knockouts
    recorded beside it (`DEFAULT_PERIOD` without one)."""
    for record in records:
        if record.get("kind") not in KINDS:
            raise ValueError(f"a mechanism recording's kind must be one of {KINDS}, got "
                             f"{record.get('kind')!r} ({record.get('design')})")  # fmt: skip
    knockouts = [r for r in records if r["kind"] == "knockout"]
    strides = [(design_config(r["design"]) or {}).get("stride") for r in knockouts]
    full_period = max([s for s in strides if s], default=DEFAULT_PERIOD)
    knockout = []
    for record, stride in zip(knockouts, strides, strict=True):
        knockout.append(knockout_entry(record, stride or full_period))
    knockout.sort(key=lambda e: (e["attention"] != "full", e["label"]))  # controls first
    return {
        "source": source,
        "recordings": [
            {k: r.get(k) for k in ("kind", "design", "label", "command", "machine", "steps")}
            for r in records
        ],
        "knockout": knockout,
        "gates": [gates_entry(r) for r in records if r["kind"] == "gates"],
        "cycle": [cycle_entry(r) for r in records if r["kind"] == "cycle"],
    }


def read_recordings(runs: Path) -> dict:
    """Every `runs/*.json` mechanism recording (none: empty results)."""
    paths = sorted(runs.glob("*.json")) if runs.is_dir() else []
    return read_records([json.loads(p.read_text()) for p in paths], "recorded")


# ----------------------------------------------------------------------------- planted (tiny)

PLANTED_PROMPTS = 48


def _report(accuracy) -> dict:
    return lookup.report_of_accuracy(accuracy, PLANTED_PROMPTS)


def _planted_knockout(attention: str, intact_profile, hurts: dict, layers: int) -> dict:
    """A knockout result of the verb's shape: `layers` layers of one KV head; `hurts[layer]`
    maps residues to the accuracy the unit's knockout costs there (interval +-(0.01 + 10%)
    where it costs, +-0.08 elsewhere)."""
    modulus = len(intact_profile)
    intact = np.stack([np.asarray(intact_profile) + 0.01 * s for s in range(2)])
    units = [{"unit": "head", "layer": layer, "kv_head": 0, "query_heads": [0, 1]}
             for layer in range(layers)]  # fmt: skip
    units += [{"unit": "layer", "layer": layer, "kv_head": None, "query_heads": [0, 1]}
              for layer in range(layers)]  # fmt: skip
    change = np.zeros((len(units), modulus))
    for u, unit in enumerate(units):
        for r, cost in hurts.get(unit["layer"], {}).items():
            change[u, r] = -cost
    half = np.where(change < 0, 0.01 + 0.1 * np.abs(change), 0.08)
    interval = np.stack([np.maximum(change - half, -1.0), np.minimum(change + half, 1.0)], axis=-1)
    mean = intact.mean(axis=0)
    relative = change / np.where(mean > 0, mean, np.nan)
    out = {
        "attention": attention, "units": units, "intact": _report(intact),
        "change": change.tolist(), "change_interval": interval.tolist(),
        "relative_change": [[_num(v) for v in row] for row in relative],
        "calibration_prompts": 8 * modulus, "evaluation_prompts": PLANTED_PROMPTS * modulus,
        "padding": "prefix",
    }  # fmt: skip
    out["hurt_residues"] = measure.hurt_residues(out)
    return out


def _planted_cycle(profile, deltas=(-1, 1)) -> dict:
    """A cycle result of the verb's shape whose cycled model is the prediction exactly
    except at the boundary phase, which stays at its intact accuracy."""
    stride = len(profile)
    modulus = 3 * stride
    intact = np.stack([np.tile(profile, 3) + 0.02 * s for s in range(2)])
    boundary = np.arange(modulus) % stride == stride - 1
    out = {"stride": stride, "boundary_phase": stride - 1, "intact": _report(intact), "deltas": {},
           "padding": "prefix"}  # fmt: skip
    for delta in deltas:
        cycled = np.where(boundary, intact, measure.cycle_prediction(intact, delta, stride))
        fits = [measure.cycle_fit(a, b, delta, stride) for a, b in zip(intact, cycled, strict=True)]
        over = {}
        for key in ("r_squared", "r_squared_without_boundary", "r_squared_accuracy",
                    "boundary_accuracy"):  # fmt: skip
            mean, lo, hi = metrics.mean_interval([f[key] for f in fits], -math.inf, 1.0)
            over[key] = [_num(mean), _num(lo), _num(hi)]
        out["deltas"][str(delta)] = {"report": _report(cycled), "seeds": fits, **over}
    return out


def _entropy_offsets(gate) -> float:
    p = np.asarray(gate, dtype=np.float64) / np.sum(gate)
    return float(np.exp(-np.sum(p * np.log(p))))


def _planted_gates(over_training: bool) -> dict:
    """Gates of a W8/S8, 1 KV model of three layers and two seeds: layers 0 and 1
    content-driven (uniform on average), layer 2 statically concentrated with its value gate
    one offset after its key gate; over training, each gate moves from near uniform to there."""
    window = 8
    flat = [1 / window] * window
    key2 = [0.01, 0.01, 0.02, 0.05, 0.16, 0.5, 0.2, 0.05]  # peaks at offset 5
    value2 = [0.05, 0.01, 0.01, 0.02, 0.05, 0.16, 0.5, 0.2]  # at offset 6
    mean_gate = {"key": [flat, flat, key2], "value": [flat, flat, value2]}
    per_window = {"key": [3.0, 4.0, _entropy_offsets(key2) - 0.2],
                  "value": [3.5, 4.5, _entropy_offsets(value2) - 0.2]}  # fmt: skip
    ends = {b: [(_entropy_offsets(g), w) for g, w in zip(mean_gate[b], per_window[b], strict=True)]
            for b in mean_gate}  # fmt: skip
    layers = len(mean_gate["key"])
    if not over_training:
        results = []
        for _ in range(2):
            branches = {
                b: {"static": [[s] for s, _ in ends[b]], "per_window": [[w] for _, w in ends[b]],
                    "mean_gate": [[[x] for x in g] for g in mean_gate[b]], "windows": 96}
                for b in mean_gate
            }  # fmt: skip
            item = {"window": window, "stride": window, "gate": "scalar", "layers": layers,
                    "branches": branches}  # fmt: skip
            results.append({**item, "peaks": measure.gate_peaks(item)})
        return {"results": results}
    steps, branches = [0, 500, 1000], {}
    for b, end in ends.items():
        paths = [[(window - (window - s) * t, window - (window - w) * t) for s, w in end]
                 for t in (0.05, 0.6, 1.0)]  # fmt: skip
        branches[b] = {
            k: [[[[path[layer][i]] for layer in range(layers)] for _ in range(2)] for path in paths]
            for i, k in enumerate(("static", "per_window"))
        }  # fmt: skip
    return {"results": [{"run": "planted", "steps": steps, "seeds": [0, 1], "branches": branches}]}


def planted() -> dict:
    """Made-up recordings of every kind (tiny: a test of the pipeline, nothing measured): a
    full-attention knockout whose layer 0 hurts every residue alike, a W8/S8 one whose layer 0
    hurts every residue, layer 1 the residues of phases 4-5 alone and layer 2 those of phases
    1-2; its gates, plain and over training; a cycle whose cycled model is the prediction off
    the boundary phase, where it keeps its intact accuracy."""
    modulus = 24
    flat = [0.8] * modulus
    profile = [0.9, 0.85, 0.8, 0.7, 0.6, 0.5, 0.4, 0.05]
    phased = np.tile(profile, 3).tolist()
    common = {"machine": "none (planted)", "steps": 1000}
    return read_records([
        {"kind": "knockout", "design": "full_1kv", "command": "planted (tiny)", **common,
         "result": _planted_knockout("full", flat, {0: dict.fromkeys(range(modulus), 0.6)}, 2)},
        {"kind": "knockout", "design": "w8s8_1kv", "command": "planted (tiny)", **common,
         "result": _planted_knockout("compressed", phased, {
             0: {r: 0.5 * phased[r] for r in range(modulus)},
             1: {r: 0.9 * phased[r] for r in range(modulus) if r % 8 in (4, 5)},
             2: {r: 0.9 * phased[r] for r in range(modulus) if r % 8 in (1, 2)}}, 3)},
        {"kind": "gates", "design": "w8s8_1kv", "command": "planted (tiny)", **common,
         "result": _planted_gates(over_training=False)},
        {"kind": "gates", "design": "w8s8_1kv", "command": "planted (tiny), --over-training",
         **common, "result": _planted_gates(over_training=True)},
        {"kind": "cycle", "design": "w8s8_1kv", "command": "planted (tiny)", **common,
         "result": _planted_cycle(profile)},
    ], "planted")  # fmt: skip


def run(size: Size) -> dict:
    return planted() if size.source == "planted" else read_recordings(recordings_dir())


def predict(size: Size, results: dict) -> dict:
    """The paper's: R^2 without the boundary phase in 0.66-1.00; full attention hurts every
    phase alike; compressed units a few adjacent phases (at most S/2)."""
    del size, results
    return {"r_squared_without_boundary": list(PAPER_R2), "alike": ALIKE}


# ----------------------------------------------------------------------------- rows


def _where(entry: dict) -> str:
    steps = f"step {entry['steps']}" if entry.get("steps") is not None else "step n/a"
    return f"{entry['seeds']} seed(s) at {steps}; `{entry['command']}`"


def _phases(phases) -> str:
    return ", ".join(map(str, phases)) or "none"


def _knockout_rows(entry: dict) -> list[Row]:
    out, period = [], entry["period"]
    where = (f"{entry['label']}, {entry['prompts_per_residue']} prompts per residue, intact mean "
             f"{entry['intact_mean']:.3f}, {_where(entry)}")  # fmt: skip
    for u in entry["units"]:
        if u["pattern"] == NONE:
            continue
        shape = f"{u['pattern']}{' alike' if u['alike'] else ''}"
        out.append(Row(
            "pretrain mechanism, knockout: one unit's significant hurt covers every phase alike "
            "or a few adjacent phases (the paper's two patterns; held where it is one of them)",
            f"{u['name']}: hurts phases {_phases(u['hurt_phases'])} of {period} ({shape}); "
            f"{where}",
            kind="prediction", finding=True, predicted=period, sgd=len(u["hurt_phases"]),
            tolerance=math.inf, floor=1.0,
            holds=u["pattern"] == FEW or (u["pattern"] == EVERY and u["alike"]),
        ))  # fmt: skip
    if entry["attention"] == "full":
        top = _important(entry)
        hurt = [] if top is None else top["hurt_phases"]
        out.append(Row(
            "pretrain mechanism, knockout: full attention's most important unit (largest mean "
            "loss) hurts every phase alike",
            f"{'no unit' if top is None else top['name']}: phases {_phases(hurt)} of {period} "
            f"hurt; {where}",
            kind="prediction", finding=True, predicted=period, sgd=len(hurt), tolerance=0.0,
            floor=1.0, holds=top is not None and top["alike"],
        ))  # fmt: skip
        return out
    few = [u for u in entry["units"] if u["pattern"] == FEW]
    named = "; ".join(f"{u['name']}: {_phases(u['hurt_phases'])}" for u in few) or "none"
    out.append(Row(
        "pretrain mechanism, knockout: a compressed design has units whose hurt is confined to "
        "a few adjacent phases",
        f"{len(few)} of {len(entry['units'])} units ({named}); phases with intact accuracy: "
        f"{_phases(entry['hurtable_phases'])} of {period}; {where}",
        kind="prediction", finding=True, predicted=1.0, sgd=len(few), tolerance=math.inf,
        floor=1.0, holds=len(few) >= 1,
    ))  # fmt: skip
    distinct = len({tuple(u["hurt_phases"]) for u in few})
    out.append(Row(
        "pretrain mechanism, knockout: different phase-selective units carry different phases",
        f"{distinct} distinct sets of phases among {len(few)} phase-selective units; {where}",
        kind="prediction", finding=True, predicted=2.0, sgd=distinct, tolerance=math.inf,
        floor=1.0, holds=distinct >= 2,
    ))  # fmt: skip
    return out


def _interval_text(x) -> str:
    mean, lo, hi = x
    if mean is None:
        return "n/a"
    return f"{mean:.3f}" + ("" if lo is None else f" [{lo:.3f}, {hi:.3f}]")


def _cycle_rows(entry: dict, predictions: dict) -> list[Row]:
    low, high = predictions["r_squared_without_boundary"]
    out = []
    for d in entry["deltas"]:
        r2 = d["r_squared_without_boundary"][0]
        erased = d["erased_r_squared"]
        where = (f"{entry['label']}, delta {d['delta']:+d}, {entry['prompts_per_residue']} prompts "
                 f"per residue, {_where(entry)}")  # fmt: skip
        out.append(Row(
            "pretrain mechanism, gate cycling (W = S): R^2 of observed against predicted "
            "per-residue changes, boundary phase left out, in the paper's 0.66-1.00 and above "
            "the R^2 of a cycle that erased the model",
            f"mean over seeds {_interval_text(d['r_squared_without_boundary'])}; with the "
            f"boundary {_interval_text(d['r_squared'])}; of the accuracies "
            f"{_interval_text(d['r_squared_accuracy'])}; if erased "
            f"{'n/a' if erased is None else f'{erased:.3f}'}; {where}",
            kind="prediction", finding=True, predicted=(low + high) / 2,
            sgd=math.nan if r2 is None else r2, tolerance=(high - low) / 2 + EDGE, floor=1.0,
            holds=r2 is not None and (erased is None or r2 > erased),
        ))  # fmt: skip
        cycled = d["boundary_accuracy"][0]
        out.append(Row(
            "pretrain mechanism, gate cycling: the boundary phase stays below the other phases "
            "under the cycle (mean over seeds)",
            f"boundary phase {entry['boundary_phase']}: intact {d['intact_boundary']:.3f}, "
            f"moved by the gates alone to {d['predicted_boundary']:.3f}, cycled "
            f"{_interval_text(d['boundary_accuracy'])}; other phases cycled "
            f"{d['other_phases']:.3f}; {where}",
            kind="prediction", finding=True, predicted=d["intact_boundary"],
            sgd=math.nan if cycled is None else cycled, tolerance=math.inf, floor=1.0,
            holds=cycled is not None and cycled < d["other_phases"],
        ))  # fmt: skip
    return out


def _gate_rows(entry: dict) -> list[Row]:
    s = entry["summary"]
    if not s["key_gates"] or entry["window"] is None:
        return []
    where = (f"{entry['label']}, W = {entry['window']}, checkpoint step "
             f"{entry['checkpoint_step']}, {entry['seeds']} seed(s); "
             f"`{entry['command']}`")  # fmt: skip
    share = s["content_driven"] / s["key_gates"]
    out = [Row(
        "pretrain mechanism, gates: most key gates end uniform on average but concentrated per "
        "window (content-driven: under half their per-window concentration is static)",
        f"{s['content_driven']} of {s['key_gates']} key gates (seeds x layers x heads) "
        f"content-driven, {len(s['static'])} statically concentrated; {where}",
        kind="prediction", finding=True, predicted=0.5, sgd=share, tolerance=math.inf,
        floor=1.0, holds=share > 0.5,
    )]  # fmt: skip
    if s["peaked"]:
        out.append(Row(
            "pretrain mechanism, gates: a statically concentrated key gate's value gate peaks "
            "one offset after it (at least half of them)",
            f"{s['value_after_key']} of {s['peaked']} static key gates (seed, layer, head: "
            f"{s['static']}); {where}",
            kind="prediction", finding=True, predicted=1.0,
            sgd=s["value_after_key"] / s["peaked"], tolerance=0.5, floor=1.0,
        ))  # fmt: skip
    return out


def rows(results: dict, predictions: dict) -> list[Row]:
    out = []
    for entry in results["knockout"]:
        out += _knockout_rows(entry)
    for entry in results["cycle"]:
        out += _cycle_rows(entry, predictions)
    for entry in results["gates"]:
        out += _gate_rows(entry)
    return out


# ----------------------------------------------------------------------------- tables


@functools.cache
def paper() -> dict:
    """The paper's §4 numbers (`paper_reference.json`'s `mechanism`, from its data.js)."""
    return reference()["mechanism"]


def _span(phases) -> str:
    return "-".join(map(str, (phases[0], phases[-1]))) if len(phases) > 1 else str(phases[0])


def _ordered(phases, period) -> list[int]:
    """A cyclic run of phases from its first phase (7, 0, 1 rather than 0, 1, 7)."""
    s = set(phases)
    start = next((p for p in sorted(s) if (p - 1) % period not in s), min(s))
    return [(start + i) % period for i in range(len(s))]


def _pattern_cells(units: list[dict], period: int, name) -> tuple[str, str, str]:
    every = [
        f"{name(u)}{'' if u['alike'] else ' (unlike)'}" for u in units if u["pattern"] == EVERY
    ]
    few = [f"{name(u)}: {_span(_ordered(u['hurt_phases'], period))}" for u in units
           if u["pattern"] == FEW]  # fmt: skip
    other = [f"{name(u)}: {_phases(u['hurt_phases'])}" for u in units if u["pattern"] == OTHER]
    return "; ".join(every) or "none", "; ".join(few) or "none", "; ".join(other) or "none"


def _our_names(entries: list[dict]) -> list[str]:
    """Each recording's name in a table: its label, with its padding unless prefix (the
    paper's), numbered where two recordings would share one."""
    names, count = [], {}
    for e in entries:
        name = (
            e["label"] if e.get("padding") in (None, "prefix") else f"{e['label']} ({e['padding']})"
        )
        count[name] = count.get(name, 0) + 1
        names.append(name if count[name] == 1 else f"{name} #{count[name]}")
    return names


def _knockout_table(results: dict) -> Table:
    ours = dict(zip(_our_names(results["knockout"]), results["knockout"], strict=True))
    table_rows, seen = [], set()

    def our_cells(e):
        if e is None:
            return (None,) * 6
        cells = _pattern_cells(e["units"], e["period"], lambda u: u["name"])
        return (e["seeds"], e["prompts_per_residue"], round(100 * e["intact_mean"], 1), *cells)

    for m in paper()["knockout"]:
        units = paper_knockout_units(m["relative_change"], m["period"])
        cells = _pattern_cells(units, m["period"], lambda u: f"layer {u['layer']}")
        name = paper_name(m)
        seen.add(name)
        table_rows.append((name, *cells, *our_cells(ours.get(name))))
    for label, e in ours.items():
        if label not in seen:
            table_rows.append((label, None, None, None, *our_cells(e)))
    return Table(
        "Knockout by mean replacement: which phases each unit's knockout hurts, the paper's "
        "beside ours",
        ("design", "paper: every phase", "paper: a few adjacent phases", "paper: neither",
         "our seeds", "our prompts per residue", "our intact mean %", "ours: every phase",
         "ours: a few adjacent phases", "ours: neither"),
        table_rows,
        f"Phases modulo the stride (8 for the paper's maps and full attention). Paper (Qwen3-0.6B "
        f"shape, 100B tokens; data.js, maps folded to phases): a phase is hurt when it loses at "
        f"least {PAPER_HURT:.0f}% of its accuracy. Ours: when most of its residues with intact "
        f"accuracy have a change interval below 0 (seeds as clusters). 'A few adjacent': one run "
        f"of at most S/2 phases sparing a phase with accuracy; 'neither': scattered, more than S/2 "
        f"phases but not all, or sparing none with accuracy; 'unlike': some phase loses under "
        f"{ALIKE:.0%} of the worst phase's loss. Units with the same heads as one listed are "
        "left out (a layer of one KV head).",
    )  # fmt: skip


def _pct(x):
    return None if x is None else round(100 * x, 1)


def _r2(x) -> str | None:
    if x is None or x[0] is None:
        return None
    return f"{x[0]:.3f}" + ("" if len(x) < 3 or x[1] is None else f" [{x[1]:.3f}, {x[2]:.3f}]")


def _cycle_table(results: dict) -> Table:
    ours = {}
    for name, e in zip(_our_names(results["cycle"]), results["cycle"], strict=True):
        for d in e["deltas"]:
            ours[(name, d["delta"])] = (e, d)
    table_rows, seen = [], set()

    def our_cells(found):
        if found is None:
            return (None,) * 6
        e, d = found
        erased = d["erased_r_squared"]
        return (e["seeds"], _r2(d["r_squared_without_boundary"]), _r2(d["r_squared"]),
                None if erased is None else round(erased, 3),
                f"{_pct(d['intact_boundary'])} -> {_pct(d['boundary_accuracy'][0])}",
                _pct(d["other_phases"]))  # fmt: skip

    for run_ in paper()["cycling"]["runs"]:
        name = paper_name(run_)
        for delta, p in run_["deltas"].items():
            seen.add((name, int(delta)))
            table_rows.append((
                name, int(delta), _r2(p["r_squared_without_boundary"]), _r2(p["r_squared"]),
                f"{run_['intact_boundary_accuracy']} -> {p['boundary_accuracy']}",
                *our_cells(ours.get((name, int(delta)))),
            ))  # fmt: skip
    for key, found in ours.items():
        if key not in seen:
            table_rows.append((*key, None, None, None, *our_cells(found)))
    return Table(
        "Gate cycling (W = S): observed against predicted accuracy changes, the paper's beside "
        "ours",
        ("design", "delta", "paper R^2 w/o boundary [95%]", "paper R^2 all phases [95%]",
         "paper boundary accuracy % (intact -> cycled)", "our seeds",
         "our R^2 w/o boundary [95%]", "our R^2 all residues [95%]", "our R^2 if erased",
         "our boundary accuracy % (intact -> cycled)", "our other phases % (cycled)"),
        table_rows,
        "Paper: R^2 over the S phases (24 residues folded), matched bootstrap intervals; the "
        "boundary is phase S - 1. Ours: R^2 over the residues, per seed, mean over seeds with a "
        "t interval (`weakspots lm cycle`); 'if erased': the same observed changes against "
        "-A_0(r), the change of a cycle that erased the model (boundary left out), which a "
        "verdict on the gates must beat.",
    )  # fmt: skip


def paper_gate_summary() -> list[dict]:
    """The paper's key gates classified as ours (W8/S8, 1 KV seeds 42-45), with seed 42's
    peaks from its published profiles (value profiles rolled by -1: a value gate one offset
    after its key gate peaks at the key's index)."""
    g = paper()["gates"]
    profiles = g["profiles"]
    out = []
    for m in g["concentration"]:
        classes = [gate_class(s, w, m["W"]) for s, w in m["key_gates"]]
        static = [layer for layer, c in enumerate(classes) if c == "static"]
        after = None
        if m["seed"] == profiles["seed"]:
            key, value = np.asarray(profiles["key"]), np.asarray(profiles["value_rolled"])
            after = [layer for layer in static
                     if np.argmax(key[layer, 0]) == np.argmax(value[layer, 0])]  # fmt: skip
        out.append({"name": paper_name(m), "key_gates": len(classes),
                    "content_driven": classes.count("content-driven"), "static": static,
                    "value_after_key": after})  # fmt: skip
    return out


def _gates_table(results: dict) -> Table:
    table_rows = []
    for p in paper_gate_summary():
        after = p["value_after_key"]
        table_rows.append((
            p["name"], "paper", paper()["checkpoint_step"], p["key_gates"],
            round(100 * p["content_driven"] / p["key_gates"], 1),
            "layers " + _phases(p["static"]),
            None if after is None
            else f"{len(after)} of {len(p['static'])} (layers {_phases(after)})",
        ))  # fmt: skip
    for e in results["gates"]:
        s = e["summary"]
        if not s["key_gates"]:
            continue
        static = ", ".join(f"s{seed} L{layer} h{head}" for seed, layer, head in s["static"])
        table_rows.append((
            e["label"], f"ours{' (over training)' if e['over_training'] else ''}",
            e["checkpoint_step"], s["key_gates"],
            round(100 * s["content_driven"] / s["key_gates"], 1),
            static or "none",
            f"{s['value_after_key']} of {s['peaked']}" if s["peaked"] else None,
        ))  # fmt: skip
    return Table(
        "Key-gate concentration at the last checkpoint: static exp(H(E[alpha])) against "
        "per-window E[exp(H(alpha))], the paper's beside ours",
        ("design", "source", "checkpoint step", "key gates", "content-driven %",
         "statically concentrated", "value one offset after key"),
        table_rows,
        f"Content-driven: under {STATIC_SHARE:.0%} of the per-window concentration W - "
        f"E[exp(H)] is static (W - exp(H(E))); static: at least that; uniform: per-window within "
        f"{UNIFORM:.0%} of W - 1 of W. Paper: key gates digitised by its authors from its figures "
        "(W8/S8, 1 KV, one seed each; seed 42's value peaks from its published gate profiles). "
        "Ours: every (seed, layer, KV head or channel); s = seed, L = layer, h = head.",
    )  # fmt: skip


MAX_GATES_PER_LAYER = 8  # a design with more gates a layer (vector gates): in the figure alone


def _yes(x) -> str | None:
    return None if x is None else ("yes" if x else "no")


def _gate_detail_table(results: dict) -> Table:
    chosen = {}  # per design one recording, a plain one (with its peaks) before one over training
    for e in results["gates"]:
        if e["label"] not in chosen or (chosen[e["label"]]["over_training"] > e["over_training"]):
            chosen[e["label"]] = e
    table_rows = []
    for e in chosen.values():
        if len({g["head"] for g in e["gates"]}) > MAX_GATES_PER_LAYER:
            continue
        by = {(g["seed"], g["layer"], g["head"], g["branch"]): g for g in e["gates"]}
        for (seed, layer, head, branch), g in sorted(by.items()):
            if branch != "key":
                continue
            v = by.get((seed, layer, head, "value"))
            value = (
                (None, None) if v is None else (round(v["static"], 2), round(v["per_window"], 2))
            )
            table_rows.append((
                e["label"], e["checkpoint_step"], seed, layer, head, round(g["static"], 2),
                round(g["per_window"], 2), g["class"], g.get("key_peak"), *value,
                g.get("value_peak"), _yes(g.get("value_after_key")),
            ))  # fmt: skip
    return Table(
        "Every key and value gate at the last checkpoint (effective offsets, 1 to W)",
        ("design", "checkpoint step", "seed", "layer", "KV head", "key static",
         "key per-window", "key gate", "key peak offset", "value static", "value per-window",
         "value peak offset", "value one after key"),
        table_rows,
        f"Static exp(H(E[alpha])), per-window E[exp(H(alpha))] on held-out corpus text "
        f"(`weakspots lm gates`); peaks: the offset where the window-averaged gate is largest "
        f"(recorded without --over-training). Designs with more than {MAX_GATES_PER_LAYER} gates "
        "a layer (vector gates) are in the figure alone.",
    )  # fmt: skip


def tables(results: dict, predictions: dict) -> list[Table]:
    del predictions
    return [
        _knockout_table(results),
        _cycle_table(results),
        _gates_table(results),
        _gate_detail_table(results),
    ]


EXPERIMENT = Experiment(
    "pretrain_mechanism",
    run,
    predict,
    rows,
    sizes=SIZES,
    drawn=True,
    tables=tables,
    study=__package__,
    engine=ENGINE,
)

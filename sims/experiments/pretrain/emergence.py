"""When does pretraining on the corpus teach copying, and the lookup? The recorded recipes.

Reads `runs/emergence.json` (written by `sims.experiments.pretrain.recipes record`): per
recipe, the copy accuracy at held-out induction positions of its own corpus and a small
lookup probe under both paddings against training tokens (`sims.pretrain.emergence`). Rows
compare the tokens to a 50% copy accuracy with the emergence law of induction heads,
`10^5.7 sqrt(B C)` tokens (`sims.pretrain.emergence.induction_law_tokens`); the law was
fitted on other corpora and models and speaks of induction heads, not of a 50% copy
accuracy, so the rows are findings. `tiny` draws made-up curves (a pipeline test).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

from weakspots.idealized import metrics
from weakspots.sims.experiments.experiment import Experiment, Row, Table
from weakspots.sims.experiments.pretrain import ENGINE
from weakspots.sims.pretrain.emergence import induction_law_tokens

RECORDING = "emergence.json"  # `recipes record` writes it
THRESHOLD = 0.5  # "emerged": half the positions right
PADDINGS = ("prefix", "in-sequence")

# ----------------------------------------------------------------------------- the experiment


@dataclass(frozen=True)
class Size:
    source: str  # "planted" (tiny: made-up curves, a pipeline test) or "recorded"


SIZES = {"tiny": Size("planted"), "quick": Size("recorded"), "full": Size("recorded")}


def crossing(tokens, accuracy, threshold: float = THRESHOLD) -> float | None:
    """The tokens at which `accuracy` (mean over seeds) first reaches `threshold`, linearly
    interpolated between measurements; None if it never does."""
    tokens = np.asarray(tokens, dtype=np.float64)
    mean = np.asarray(accuracy, dtype=np.float64).reshape(len(tokens), -1).mean(axis=1)
    above = np.flatnonzero(mean >= threshold)
    if above.size == 0:
        return None
    i = int(above[0])
    if i == 0:
        return float(tokens[0])
    t0, t1, a0, a1 = tokens[i - 1], tokens[i], mean[i - 1], mean[i]
    return float(t0 + (threshold - a0) / (a1 - a0) * (t1 - t0))


def summarise(recipe: dict) -> dict:
    """A recipe's crossings of 50% (tokens, seconds), final and best values, and its contested
    copy accuracy at the last checkpoint with its interval (seeds as clusters) beside the
    name-recall chance."""
    seeds = recipe["recipe"]["seeds"]
    per_token = seeds / recipe["tokens_per_second"] if recipe["tokens_per_second"] else math.nan
    out = {"name": recipe["name"], "law_tokens": recipe["law_tokens"], "seeds": seeds}
    curves = {"copy": recipe["copy_accuracy"], **{
        f"lookup {p}": recipe["lookup_accuracy"][p] for p in PADDINGS}}  # fmt: skip
    for label, curve in curves.items():
        reached = crossing(recipe["tokens"], curve)
        out[label] = {
            "final": float(np.mean(curve[-1])),
            "best": float(np.max(np.mean(curve, axis=1))),
            "tokens_to_half": reached,
            "seconds_to_half": None if reached is None else reached * per_token,
        }
    out["tokens"] = recipe["tokens"][-1]
    out["tokens_per_second"] = recipe["tokens_per_second"]
    probe = recipe["probe"]
    out["copy_chance"] = probe["copy_chance"]
    out["contested_chance"] = probe["copy_chance_contested"]
    last = recipe["copy_accuracy_contested"]["accuracy"][-1]
    mean, lo, hi = metrics.cluster_interval(last, probe["contested_positions"])
    out["contested"] = {"tokens": recipe["copy_accuracy_contested"]["tokens"][-1],
                        "final": mean, "interval": [lo, hi]}  # fmt: skip
    return out


def planted() -> list[dict]:
    """Two made-up recipes (tiny: a test of the pipeline, not a measurement)."""
    tokens = [0, 1_000_000, 2_000_000, 3_000_000]
    probe = {"copy_chance": 0.55, "copy_chance_contested": 0.29, "contested_positions": 136}
    out = []
    for name, copy in (("planted-early", [0.0, 0.3, 0.7, 0.9]), ("planted-never", [0.0] * 4)):
        out.append({
            "name": name, "recipe": {"batch": 4, "seq_len": 128, "seeds": 2}, "command": "planted",
            "tokens": tokens, "copy_accuracy": [[c, c] for c in copy],
            "copy_accuracy_contested": {"tokens": tokens, "accuracy": [[c, c] for c in copy]},
            "lookup_accuracy": {p: [[c / 2, c / 2] for c in copy] for p in PADDINGS},
            "tokens_per_second": 10_000.0, "law_tokens": induction_law_tokens(4, 128),
            "machine": "none (planted)", "probe": probe,
        })  # fmt: skip
    return out


def recorded() -> list[dict]:
    path = resources.files(__package__) / "runs" / RECORDING
    return json.loads(path.read_text()) if path.is_file() else []


def run(size: Size) -> dict:
    recipes = planted() if size.source == "planted" else recorded()
    return {
        "source": size.source,
        "recipes": recipes,
        "summaries": [summarise(r) for r in recipes],
    }


def predict(size: Size, results: dict) -> dict:
    del size
    return {r["name"]: r["law_tokens"] for r in results["recipes"]}


def rows(results: dict, predictions: dict) -> list[Row]:
    out = []
    for s in results["summaries"]:
        reached, law = s["copy"]["tokens_to_half"], predictions[s["name"]]
        when = (f"never by {s['tokens'] / 1e6:.1f}M" if reached is None
                else f"{reached / 1e6:.2f}M, interpolated")  # fmt: skip
        out.append(Row(
            "pretraining emergence: copying at held-out induction positions reaches 50% "
            "within a factor 2 of the induction-head law's 10^5.7 sqrt(B C) tokens "
            "(log2 of measured over law)",
            f"recipe {s['name']} ({results['source']}), {s['seeds']} seeds; tokens per seed to "
            f"a 50% mean copy accuracy: {when}; law {law / 1e6:.2f}M",
            kind="prediction", finding=True, predicted=0.0,
            sgd=math.inf if reached is None else math.log2(max(reached, 1.0) / law),
            tolerance=1.0, floor=1.0,
        ))  # fmt: skip
        c = s["contested"]
        out.append(Row(
            "pretraining emergence: copying is key-specific (induction): at positions with at "
            "least 3 earlier names, accuracy above the chance of recalling one of them at "
            "random, beyond its interval",
            f"recipe {s['name']} ({results['source']}), {s['seeds']} seeds at "
            f"{c['tokens'] / 1e6:.1f}M tokens; 95% interval [{c['interval'][0]:.3f}, "
            f"{c['interval'][1]:.3f}] (seeds as clusters); chance = mean 1/(names seen)",
            kind="prediction", finding=True, predicted=s["contested_chance"], sgd=c["final"],
            tolerance=math.inf, floor=1.0, holds=c["interval"][0] > s["contested_chance"],
        ))  # fmt: skip
    return out


def _cell(value, scale=1e6, digits=1):
    return None if value is None else round(value / scale, digits)


def tables(results: dict, predictions: dict) -> list[Table]:
    del predictions
    table_rows = []
    for s in results["summaries"]:
        table_rows.append((
            s["name"], round(s["tokens_per_second"]), _cell(s["tokens"]), _cell(s["law_tokens"]),
            _cell(s["copy"]["tokens_to_half"]), _cell(s["copy"]["seconds_to_half"], 60, 0),
            round(100 * s["copy"]["final"], 1), round(100 * s["copy_chance"], 1),
            round(100 * s["contested"]["final"], 1), round(100 * s["contested_chance"], 1),
            _cell(s["lookup prefix"]["tokens_to_half"]),
            round(100 * s["lookup prefix"]["final"], 1),
            round(100 * s["lookup in-sequence"]["final"], 1),
        ))  # fmt: skip
    return [Table(
        "Emergence on the corpus: tokens (per seed) to 50% copy and to 50% lookup",
        ("recipe", "tokens/s (all seeds)", "trained (M tokens)", "law (M tokens)",
         "50% copy (M tokens)", "50% copy (minutes)", "final copy %", "name-recall chance %",
         "final contested copy %", "its chance %", "50% lookup, prefix (M)",
         "final lookup prefix %", "final lookup in-sequence %"),
        table_rows,
        "Mean over seeds; a blank crossing: never reached. Chance: the accuracy of naming one "
        "of the names seen earlier in the document at random (all copy positions; contested: "
        "those with at least 3 earlier names). Law: 10^5.7 sqrt(B C) tokens "
        "(induction heads; arXiv 2511.16893). Recipes, commands and the machine: "
        "sims/experiments/pretrain/runs/emergence.json; docs/pretraining.md.",
    )]  # fmt: skip


EXPERIMENT = Experiment(
    "pretrain_emergence",
    run,
    predict,
    rows,
    sizes=SIZES,
    drawn=True,
    tables=tables,
    study=__package__,
    engine=ENGINE,
)

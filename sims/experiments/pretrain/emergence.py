"""When does pretraining on the corpus teach copying, and the lookup? Recipes on one machine.

Each recipe is a `weakspots lm pretrain` command with `--emergence-every` (full attention, two
seeds vmapped): its `history.json` holds, every K steps, the copy accuracy at held-out
induction positions of its own corpus and a small lookup probe under both paddings
(`sims.pretrain.emergence`). `record` turns run directories into `runs/emergence.json`: a
list of recipes, each with `recipe` (its config), `command`, `tokens` (per seed, one entry
per measurement), `copy_accuracy`, `lookup_accuracy` (`prefix`, `in-sequence`; per
measurement, one value per seed), `tokens_per_second` (all seeds together) and the machine.

The comparison is with the emergence law of induction heads, `10^5.7 sqrt(B C)` training
tokens (`sims.pretrain.emergence.induction_law_tokens`); it was fitted on other corpora and
models and speaks of induction heads, not of a 50% copy accuracy, so the rows are findings.

    python -m weakspots.sims.experiments.pretrain.emergence run --results DIR
    python -m weakspots.sims.experiments.pretrain.emergence record --results DIR
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.sims.experiments.experiment import Experiment, Row, Table
from weakspots.sims.experiments.pretrain import ENGINE
from weakspots.sims.experiments.pretrain.sweep import argv_of, machine
from weakspots.sims.pretrain.emergence import induction_law_tokens

RECORDING = "emergence.json"
THRESHOLD = 0.5  # "emerged": half the positions right
PADDINGS = ("prefix", "in-sequence")

SHAPE = dict(attention="full", d_model=128, layers=2, heads=4, kv_heads=1, head_dim=32,
             mlp_hidden=384, seq_len=128, seeds=2, log_every=50, emergence_every=1000,
             checkpoint_every=2000, lr=3e-3, warmup=100)  # fmt: skip
"""What every recipe shares: the issue's small full-attention backbone, two seeds."""

RECIPES: dict[str, dict] = {
    "reference": dict(batch=4, steps=24000),
    "zipf": dict(batch=4, steps=24000, open_words=64, zipf=1.0),
    "zipf-constant": dict(batch=4, steps=24000, open_words=64, zipf=1.0, schedule="constant"),
    "zipf-constant-b2": dict(batch=2, steps=32000, open_words=64, zipf=1.0, schedule="constant"),
}
"""Each recipe changes one thing from the one before: the corpus's vocabulary (64 words per
open class) and Zipfian words, then a learning rate held after warmup, then half the batch
(B x C = 256: the law's tokens fall by sqrt 2; more steps)."""


def recipe_config(name: str) -> PretrainConfig:
    return PretrainConfig(**{**SHAPE, **RECIPES[name]})


def command(name: str, out: str) -> str:
    return shlex.join(["weakspots", *argv_of(recipe_config(name), out)])


def run_recipes(results: Path, names=None) -> None:
    """Run each recipe's command into `results/<name>` (rerunning resumes each)."""
    results.mkdir(parents=True, exist_ok=True)
    for name in names or RECIPES:
        argv = [sys.executable, "-m", "weakspots", *argv_of(recipe_config(name), name)]
        with open(results / f"{name}.json", "w") as out:
            subprocess.run(argv, cwd=results, stdout=out, check=True)


def entry(name: str, run_dir: Path, machine_name: str) -> dict:
    """One recipe's recording from its run directory's `config.json` and `history.json`."""
    config = json.loads((run_dir / "config.json").read_text())
    history = json.loads((run_dir / "history.json").read_text())
    return {
        "name": name,
        "recipe": config,
        "command": command(name, f"runs/emergence/{name}"),
        "steps": history["emergence_steps"],
        "tokens": history["emergence_tokens"],
        "copy_accuracy": history["copy_accuracy"],
        "lookup_accuracy": {
            "prefix": history["lookup_prefix"],
            "in-sequence": history["lookup_in_sequence"],
        },
        "probe": history["emergence_probe"],
        "tokens_per_second": history["tokens_per_second"],
        "train_seconds": history["train_seconds"],
        "val_loss": history["val_loss"],
        "val_steps": history["val_steps"],
        "law_tokens": induction_law_tokens(config["batch"], config["seq_len"]),
        "machine": machine_name,
    }


def record(results: Path, out: Path, names=None) -> list[dict]:
    machine_name = machine()
    entries = [
        entry(name, results / name, machine_name)
        for name in names or RECIPES
        if (results / name / "history.json").exists()
    ]
    out.write_text(json.dumps(entries, indent=1) + "\n")
    return entries


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
    return out


def planted() -> list[dict]:
    """Two made-up recipes (tiny: a test of the pipeline, not a measurement)."""
    tokens = [0, 1_000_000, 2_000_000, 3_000_000]
    out = []
    for name, copy in (("planted-early", [0.0, 0.3, 0.7, 0.9]), ("planted-never", [0.0] * 4)):
        out.append({
            "name": name, "recipe": {**SHAPE, "batch": 4, "seeds": 2}, "command": "planted",
            "tokens": tokens, "copy_accuracy": [[c, c] for c in copy],
            "lookup_accuracy": {p: [[c / 2, c / 2] for c in copy] for p in PADDINGS},
            "tokens_per_second": 10_000.0, "law_tokens": induction_law_tokens(4, 128),
            "machine": "none (planted)",
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
            round(100 * s["copy"]["final"], 1),
            _cell(s["lookup prefix"]["tokens_to_half"]),
            round(100 * s["lookup prefix"]["final"], 1),
            round(100 * s["lookup in-sequence"]["final"], 1),
        ))  # fmt: skip
    return [Table(
        "Emergence on the corpus: tokens (per seed) to 50% copy and to 50% lookup",
        ("recipe", "tokens/s (all seeds)", "trained (M tokens)", "law (M tokens)",
         "50% copy (M tokens)", "50% copy (minutes)", "final copy %", "50% lookup, prefix (M)",
         "final lookup prefix %", "final lookup in-sequence %"),
        table_rows,
        "Mean over seeds; a blank crossing: never reached. Law: 10^5.7 sqrt(B C) tokens "
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("run", "record", "commands"))
    parser.add_argument("--results", type=Path, default=Path("runs/emergence"))
    parser.add_argument("--recipes", nargs="*", choices=tuple(RECIPES), default=None)
    parser.add_argument("--out", type=Path, default=None, help="record: where (default: runs/)")
    args = parser.parse_args(argv)
    if args.action == "commands":
        for name in args.recipes or RECIPES:
            print(command(name, str(args.results / name)))
    elif args.action == "run":
        run_recipes(args.results, args.recipes)
    else:
        out = args.out or Path(str(resources.files(__package__))) / "runs" / RECORDING
        entries = record(args.results, out, args.recipes)
        print(f"recorded {len(entries)} recipe(s) in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

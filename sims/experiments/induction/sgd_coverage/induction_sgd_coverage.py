"""Coverage of the induction model under SGD (docs/induction.md §9): P(k distinct positions)
of m heads from the linearised dynamics with the minibatch noise all heads share
(`theory.induction_sgd_coverage_distribution`), against SGD over 256 seeds per setting.

Settings have roles, fixed before any of them was trained for this comparison: `derivation`
(the two SGD settings of `induction_coverage`, known while deriving), `validation` (new
settings from the law's quiet end to all heads on one position, none used while deriving or
tuned on), `remedy` (the noisy setting with what the law says lowers the shared noise against
the start: a larger start, a larger batch, a smaller learning rate for the same flow time).
The quick report reads the recorded runs (`runs/sgd.json`, written by `record`: the CLI
commands, the machine, the measured and predicted distributions); full trains them again.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from weakspots import theory
from weakspots.idealized.induction import InductionFlowConfig, InductionTrainConfig
from weakspots.sims.experiments.experiment import Experiment, Row, Table
from weakspots.sims.experiments.induction.shared import PHYSICS
from weakspots.sims.induction.flow import solve
from weakspots.sims.induction.train import train_runs
from weakspots.sims.machine import describe

TOLERANCE = 0.08  # total variation between the law and 256 SGD seeds (issue 59)
SEEDS = 256
RECORD = "sgd.json"


@dataclass(frozen=True)
class Setting:
    """One SGD setting: its name, role (derivation | validation | remedy) and the trainer's
    config; `interacting`: the heads' normaliser coupling is not small (e^{beta m E} not << N),
    outside the derivation's assumptions (its row is a finding, docs/induction.md §9)."""

    name: str
    role: str
    config: InductionTrainConfig
    interacting: bool = False


def _sgd(**fields) -> InductionTrainConfig:
    return InductionTrainConfig(**{**PHYSICS, "eval_every": 50, **fields})


SETTINGS = (
    Setting("noisy", "derivation", _sgd(init_scale=0.01, lr=1.0, batch=256, steps=600)),
    Setting("quiet", "derivation", _sgd(init_scale=0.3, lr=0.2, batch=256, steps=600)),
    Setting("v1", "validation", _sgd(init_scale=0.2, lr=1.0, batch=512, steps=400)),
    Setting("v2", "validation", _sgd(init_scale=0.1, lr=0.5, batch=64, steps=800)),
    Setting("v3", "validation", _sgd(init_scale=0.03, lr=1.0, batch=128, steps=600)),
    Setting("v4", "validation", _sgd(init_scale=0.003, lr=0.5, batch=1024, steps=1200)),
    Setting(
        "v5",
        "validation",
        _sgd(
            stride=5, chunks=6, gamma=4.0, beta=4.0, init_scale=0.05, lr=1.0, batch=256, steps=800
        ),
        interacting=True,
    ),
    Setting("v6", "validation", _sgd(heads=2, init_scale=0.02, lr=2.0, batch=512, steps=400)),
    Setting("larger start", "remedy", _sgd(init_scale=0.1, lr=1.0, batch=256, steps=600)),
    Setting("larger batch", "remedy", _sgd(init_scale=0.01, lr=1.0, batch=4096, steps=600)),
    Setting("smaller lr", "remedy", _sgd(init_scale=0.01, lr=0.25, batch=256, steps=2400)),
    Setting(
        "own batches",
        "remedy",
        _sgd(init_scale=0.01, lr=1.0, batch=256, steps=600, head_batches=True),
    ),
)
BY_NAME = {s.name: s for s in SETTINGS}
# The flow at v5's physics: whether the occupancy law (the derivation's lr -> 0 limit) holds there.
V5_FLOW = InductionFlowConfig(
    stride=5,
    heads=3,
    chunks=6,
    vocab=4096,
    gamma=4.0,
    beta=4.0,
    init_scale=0.05,
    t1=4000.0,
    saves=41,
)


@dataclass(frozen=True)
class Size:
    source: str  # "recorded" (runs/sgd.json) or "live"
    seeds: int  # live: seeds per setting
    settings: tuple[str, ...]  # live: which settings


SIZES = {
    "tiny": Size("live", 16, ("v3", "v6")),
    "quick": Size("recorded", SEEDS, tuple(BY_NAME)),
    "full": Size("live", SEEDS, tuple(BY_NAME)),
}

_FLAGS = (
    "stride",
    "heads",
    "chunks",
    "vocab",
    "gamma",
    "beta",
    "init_scale",
    "lr",
    "batch",
    "steps",
)


def _argv(config, names=_FLAGS) -> list[str]:
    out = ["--model", "induction"]
    for name in names:
        out += ["--" + name.replace("_", "-"), f"{getattr(config, name):g}"]
    if getattr(config, "head_batches", False):
        out.append("--head-batches")
    return out


def train_command(setting: Setting, seeds: int = SEEDS) -> list[str]:
    """`weakspots train` of a setting, as the issue runs it (`runs[].distinct` is the measure)."""
    return ["weakspots", "train", *_argv(setting.config), "--seeds", str(seeds), "--json"]


def predict_command(setting: Setting) -> list[str]:
    """`weakspots predict` of a setting (its `coverage_distribution` is the law)."""
    return ["weakspots", "predict", *_argv(setting.config), "--json"]


def flow_command(config: InductionFlowConfig, seeds: int = SEEDS) -> list[str]:
    names = ("stride", "heads", "chunks", "vocab", "gamma", "beta", "init_scale")
    return ["weakspots", "flow", *_argv(config, names), "--seeds", str(seeds), "--json"]


def machine() -> dict:
    """The CPU, jax and XLA (jaxlib) versions the record was made with (`sims.machine`)."""
    return describe()


def distribution(distinct, heads: int) -> list[float]:
    """P(k distinct), k = 0..m, of the measured counts."""
    counts = np.bincount(np.asarray(distinct, int), minlength=heads + 1)[: heads + 1]
    return (counts / counts.sum()).tolist()


def total_variation(p, q) -> float:
    return float(0.5 * np.abs(np.asarray(p, float) - np.asarray(q, float)).sum())


def _law(config: InductionTrainConfig) -> dict:
    c = config
    args = (
        c.heads,
        c.stride,
        c.chunks,
        c.vocab,
        c.gamma,
        c.beta,
        c.lr,
        c.batch,
        c.init_scale,
        c.steps,
    )
    own = {"head_batches": c.head_batches}
    return {
        "distribution": theory.induction_sgd_coverage_distribution(*args, **own).tolist(),
        "occupancy": theory.induction_coverage_distribution(c.heads, c.stride).tolist(),
        "shared_noise_ratio": (
            theory.induction_shared_noise_ratio(*args, **own) if c.heads >= 2 else 0.0
        ),
    }


def _run_cli(argv: list[str]) -> tuple[dict, float]:
    command = [sys.executable, "-m", "weakspots", *argv[1:]]
    started = time.perf_counter()
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out), time.perf_counter() - started


def record(path: Path | None = None, names: tuple[str, ...] | None = None) -> dict:
    """Run every setting's `weakspots train` (256 seeds) and `weakspots predict`, and the
    flow at v5's physics, as command lines; write them with the machine to `runs/sgd.json`.
    With `names`, only those settings are run again (on this machine), the rest kept."""
    path = recorded_path() if path is None else path
    if names is not None:
        out = json.loads(path.read_text())
        if out["machine"] != machine():
            raise RuntimeError("the record was made on another machine: record every setting")
    else:
        out = {"machine": machine(), "settings": {}}
    for s in SETTINGS:
        if names is not None and s.name not in names:
            continue
        trained, wall = _run_cli(train_command(s))
        predicted, _ = _run_cli(predict_command(s))
        measured = distribution([r["distinct"] for r in trained["runs"]], s.config.heads)
        out["settings"][s.name] = {
            "role": s.role,
            "train_command": shlex.join(train_command(s)),
            "predict_command": shlex.join(predict_command(s)),
            "wall_seconds": wall,
            "distinct": [r["distinct"] for r in trained["runs"]],
            "measured": measured,
            "predicted": predicted["coverage_distribution"],
            "shared_noise_ratio": predicted.get("shared_noise_ratio"),
            "total_variation": total_variation(measured, predicted["coverage_distribution"]),
        }
    if names is None:
        flowed, wall = _run_cli(flow_command(V5_FLOW))
        out["v5_flow"] = {
            "flow_command": shlex.join(flow_command(V5_FLOW)),
            "wall_seconds": wall,
            "distinct": [r["distinct"] for r in flowed["runs"]],
        }
    out["settings"] = {s.name: out["settings"][s.name] for s in SETTINGS}
    path.write_text(json.dumps(out, indent=1) + "\n")
    return out


def recorded_path() -> Path:
    return Path(str(resources.files(__package__))) / "runs" / RECORD


def run(size: Size) -> dict:
    """The distinct positions of every seed per setting: recorded, or trained live."""
    if size.source == "recorded":
        rec = json.loads(recorded_path().read_text())
        settings = {
            name: {k: entry[k] for k in ("distinct", "train_command")}
            for name, entry in rec["settings"].items()
        }
        return {
            "source": "recorded",
            "machine": rec["machine"],
            "settings": settings,
            "v5_flow": rec["v5_flow"]["distinct"],
        }
    settings = {}
    for name in size.settings:
        s = BY_NAME[name]
        history = train_runs(s.config, range(size.seeds))
        distinct = [history.summary(i)["distinct"] for i in range(size.seeds)]
        settings[name] = {
            "distinct": distinct,
            "train_command": shlex.join(train_command(s, size.seeds)),
        }
    out = {"source": "live", "machine": machine(), "settings": settings}
    if "v5" in size.settings:
        flows = solve(V5_FLOW, range(size.seeds))
        out["v5_flow"] = [flows.summary(i)["distinct"] for i in range(size.seeds)]
    return out


def predict(size: Size, results: dict) -> dict:
    """The shared-noise law, the occupancy law and the shared-noise ratio per setting run."""
    del size
    return {name: _law(BY_NAME[name].config) for name in results["settings"]}


def _where(s: Setting, seeds: int) -> str:
    c = s.config
    return (
        f"{s.role} setting {s.name!r}: S={c.stride} m={c.heads} L={c.chunks} N={c.vocab} "
        f"gamma={c.gamma:g} beta={c.beta:g}, static gates, SGD rho={c.init_scale:g} lr={c.lr:g} "
        f"batch={c.batch} steps={c.steps}, {seeds} seeds"
    )


def rows(results: dict, predictions: dict) -> list[Row]:
    """Per setting, the total variation between the law's P(k distinct) and SGD's (<= 0.08);
    where the heads interact through the normaliser (outside the derivation) a finding, with
    the flow's distance from the occupancy law at that physics beside it."""
    out = []
    for name, measured in results["settings"].items():
        s = BY_NAME[name]
        seeds = len(measured["distinct"])
        tv = total_variation(
            distribution(measured["distinct"], s.config.heads), predictions[name]["distribution"]
        )
        out.append(
            Row(
                "induction: SGD's P(k distinct positions), total variation from the shared-noise law",
                _where(s, seeds) + (" (heads interact: e^{beta m E} ~ N)" if s.interacting else ""),
                kind="prediction",
                predicted=0.0,
                sgd=tv,
                tolerance=TOLERANCE,
                floor=1.0,
                finding=s.interacting,
            )
        )
    if "v5_flow" in results:
        c = V5_FLOW
        flow = distribution(results["v5_flow"], c.heads)
        out.append(
            Row(
                "induction: the flow's P(k distinct), total variation from the occupancy law",
                f"S={c.stride} m={c.heads} L={c.chunks} N={c.vocab} gamma={c.gamma:g} beta={c.beta:g}, "
                f"flow from rho={c.init_scale:g}, {len(results['v5_flow'])} seeds (v5's physics)",
                kind="prediction",
                predicted=0.0,
                ode=total_variation(
                    flow, theory.induction_coverage_distribution(c.heads, c.stride)
                ),
                tolerance=TOLERANCE,
                floor=1.0,
                finding=True,
            )
        )
    return out


def _fmt(p) -> str:
    return " ".join(f"{x:.3f}" for x in p[1:])


def tables(results: dict, predictions: dict) -> list[Table]:
    """Each setting: its SGD hyperparameters, the shared-noise ratio, P(k = 1..m) predicted
    (shared-noise law and occupancy law) and measured, and the total variation."""
    body = []
    for name, measured in results["settings"].items():
        s, law = BY_NAME[name], predictions[name]
        c = s.config
        got = distribution(measured["distinct"], c.heads)
        body.append(
            (
                name,
                s.role,
                f"{c.stride},{c.heads}",
                c.init_scale,
                c.lr,
                c.batch,
                c.steps,
                round(law["shared_noise_ratio"], 4),
                _fmt(law["distribution"]),
                _fmt(law["occupancy"]),
                _fmt(got),
                round(total_variation(got, law["distribution"]), 3),
            )
        )
    note = (
        f"{results['source']} runs ({results['machine'].get('cpu', '?')}, jax "
        f"{results['machine'].get('jax', '?')}); P(k) for k = 1..m; ratio: shared over own "
        "pair-mode variance where selection is read (0: the flow's independence)"
    )
    return [
        Table(
            "SGD coverage: shared-noise law against SGD",
            (
                "setting",
                "role",
                "S,m",
                "rho",
                "lr",
                "batch",
                "steps",
                "ratio",
                "law P(k)",
                "occupancy P(k)",
                "SGD P(k)",
                "TV",
            ),
            body,
            note,
        )
    ]


EXPERIMENT = Experiment(
    "induction_sgd_coverage",
    run,
    predict,
    rows,
    sizes=SIZES,
    drawn=True,
    tables=tables,
    study=__package__,
)


# python -m weakspots.sims.experiments.induction.sgd_coverage.induction_sgd_coverage
if __name__ == "__main__":  # settings named on the command line: only those again
    record(names=tuple(sys.argv[1:]) or None)

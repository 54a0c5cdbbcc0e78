"""`--model induction` on `train`, `flow` and `predict`: the paper's idealised model (docs/induction.md).

The verbs' shared flags keep their names (`--stride` S, `--heads` m, `--chunks` L,
`--init-scale` rho, `--seed`, `--lr`, `--steps`, `--batch`, `--t1`, ...); left out, they
take the induction model's defaults (`idealized.induction`'s configs), not the toy's.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys

from weakspots import theory
from weakspots.errors import ConfigError
from weakspots.idealized import induction
from weakspots.theory.predictions import induction_predictions

from . import common

OWN_FLAGS = ("vocab", "gamma", "beta", "kappa", "eps", "gate", "head_batches")  # default None
GIVEN = "induction_given"  # the namespace attribute listing the shared flags given explicitly


class _Recorded(argparse._StoreAction):
    """A store action that also notes that its flag was given (so that a flag left out
    takes the induction model's default, not the toy's)."""

    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {self.dest})


class _Help(argparse._HelpAction):
    """--help that, after `--model induction`, shows the induction model's own defaults for
    the shared flags (stride 4, lr 1.0, batch 64, steps 2000 for train, ...), not the toy's."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "model", None) == "induction":
            verb = parser.prog.split()[-1]
            config = dataclasses.asdict(HELP_CONFIGS.get(verb, induction.InductionConfig)())
            for action in parser._actions:
                if action.dest in config and action.dest not in OWN_FLAGS and action.default is not None:
                    action.default = config[action.dest]
        super().__call__(parser, namespace, values, option_string)


# The config whose defaults each verb's shared flags take under --model induction (predict:
# the SGD flags, when --lr is given, are InductionTrainConfig's).
HELP_CONFIGS = {
    "train": induction.InductionTrainConfig,
    "flow": induction.InductionFlowConfig,
    "predict": induction.InductionTrainConfig,
}


def record_given(parser: argparse.ArgumentParser) -> None:
    """Make every shared flag of `parser` so far note that it was given (a flag left out takes
    the induction model's default), and its --help show those defaults after --model induction."""
    for action in parser._actions:
        if type(action) is argparse._StoreAction:
            action.__class__ = _Recorded
        elif type(action) is argparse._HelpAction:
            action.__class__ = _Help


def add_flags(parser: argparse.ArgumentParser, predict: bool) -> None:
    """The induction model's own flags, and a note on the shared ones when they are given
    (`record_given`; a verb that adds shared flags after these calls it again)."""
    record_given(parser)
    group = parser.add_argument_group("induction model (--model induction; docs/induction.md)")
    group.add_argument("--vocab", type=int, default=None, help="vocabulary N (default 4096)")
    group.add_argument("--gamma", type=float, default=None, help="attention scale (default 6)")
    group.add_argument("--beta", type=float, default=None, help="readout scale (default 2)")
    group.add_argument("--kappa", type=float, default=None, help="overlap of distinct tokens (default 0)")
    group.add_argument(
        "--eps", type=float, default=None, help="Gram error bound (default 0; predict only: the loss bound)"
    )
    group.add_argument("--gate", default=None, help="static | loglinear (default static)")
    group.add_argument(
        "--head-batches",
        action="store_true",
        default=None,
        help="train, predict with --lr: each head's gradient from its own batch (static gates; "
        "the heads share no minibatch noise, docs/induction.md §9)",
    )
    if "--seeds" not in parser._option_string_actions:
        group.add_argument("--seeds", type=int, default=None, metavar="K", help="K seeds from --seed, in one solve")
    if "--contexts" not in parser._option_string_actions and not predict:
        group.add_argument(
            "--contexts", type=int, default=None, help="log-linear flow: contexts of its fixed sample (default 64)"
        )
    if predict:
        group.add_argument(
            "--positions",
            default=None,
            help="r_1,...,r_m: the one-hot assignment (key on r_h, value on r_h + 1) to evaluate",
        )


def _config(cls, args: argparse.Namespace):
    given = getattr(args, GIVEN, frozenset())
    values = {}
    for field in dataclasses.fields(cls):
        if not hasattr(args, field.name):
            continue
        value = getattr(args, field.name)
        if field.name in OWN_FLAGS or field.name == "contexts":
            if value is not None:
                values[field.name] = value
        elif field.name in given:
            values[field.name] = value
    try:
        return cls(**values)
    except ConfigError as error:
        raise common.UsageError(str(error)) from None


def _seeds(args, config) -> list[int]:
    seeds = getattr(args, "seeds", None)
    if seeds is None:
        return [config.seed]
    if seeds < 1:
        raise common.UsageError(f"--seeds: must be an integer >= 1, got {seeds}")
    return list(range(config.seed, config.seed + seeds))


def _report(out: dict, runs: list[dict], args) -> int:
    if args.json:
        common.print_json(out)
        return 0
    for r in runs:
        print(
            f"seed {r['seed']}: positions {r['positions']}  one-hot {r['concentrated']}  "
            f"distinct {r['distinct']}  uncovered {r['uncovered']}  loss {r['loss']:.6f}  "
            f"phase accuracy {' '.join(f'{a:.3f}' for a in r['phase_accuracy'])}"
        )
        for h, (k, v) in enumerate(zip(r["key_weights"], r["value_weights"], strict=True)):
            print(f"  head {h}: key {' '.join(f'{w:.3f}' for w in k)}   value {' '.join(f'{w:.3f}' for w in v)}")
    return 0


def _many(config, runs: list[dict]) -> dict:
    first = {k: v for k, v in runs[0].items() if not k.endswith("_along") and k != "times"}
    if len(runs) == 1:
        return {"config": dataclasses.asdict(config), **runs[0]}
    return {
        "config": dataclasses.asdict(config),
        **first,
        "runs": [{k: v for k, v in r.items() if not k.endswith("_along") and k != "times"} for r in runs],
    }


def run_train(args: argparse.Namespace) -> int:
    """`weakspots train --model induction`: SGD from each seed, one compiled program."""
    from weakspots.sims.induction.train import train_runs

    config = _config(induction.InductionTrainConfig, args)
    seeds = _seeds(args, config)
    if not args.json and not getattr(args, "quiet", False):
        print(f"training {len(seeds)} run(s) (compiling first) ...", file=sys.stderr)
    history = train_runs(config, seeds)
    runs = [history.summary(i) for i in range(len(seeds))]
    return _report(_many(config, runs), runs, args)


def run_flow(args: argparse.Namespace) -> int:
    """`weakspots flow --model induction`: the gradient flow from each seed's start."""
    from weakspots.sims.induction.flow import solve
    from weakspots.sims.toy.flow import FlowFailed

    if args.head_batches:
        raise common.UsageError("--head-batches: applies to train and predict (SGD), not the flow")
    config = _config(induction.InductionFlowConfig, args)
    seeds = _seeds(args, config)
    if not args.json and not getattr(args, "quiet", False):
        print(f"integrating {len(seeds)} flow(s) (compiling first) ...", file=sys.stderr)
    try:
        history = solve(config, seeds)
    except FlowFailed as error:
        print(f"weakspots flow: error: {error}", file=sys.stderr)
        return 1
    runs = [history.summary(i) for i in range(len(seeds))]
    return _report(_many(config, runs), runs, args)


def _positions(args, config) -> list[int] | None:
    if args.positions is None:
        return None
    try:
        positions = [int(p) for p in str(args.positions).split(",")]
    except ValueError:
        raise common.UsageError(f"--positions: must be comma-separated integers, got {args.positions!r}") from None
    if any(not 0 <= p <= config.stride - 2 for p in positions):
        raise common.UsageError(
            f"--positions: each must lie in 0..{config.stride - 2} (non-final positions of --stride "
            f"{config.stride}), got {args.positions!r}"
        )
    if "heads" in getattr(args, GIVEN, frozenset()) and args.heads != len(positions):
        raise common.UsageError(f"--positions: {len(positions)} given for --heads {args.heads}")
    return positions


def _sgd(args: argparse.Namespace, config: induction.InductionConfig):
    """With --lr given, the SGD whose coverage `predict` gives (--batch, --init-scale, --steps
    given or the induction trainer's defaults); else None (the flow's occupancy law)."""
    given = getattr(args, GIVEN, frozenset())
    if "lr" not in given:
        for flag in ("batch", "steps"):
            if flag in given:
                raise common.UsageError(f"--{flag}: the SGD coverage law needs --lr as well")
        if args.head_batches:
            raise common.UsageError("--head-batches: the SGD coverage law needs --lr as well")
        return None
    if config.gate != "static":
        raise common.UsageError("--lr: the SGD coverage law covers static gates (--gate static)")
    if not config.init_scale > 0:
        raise common.UsageError(f"--init-scale: must be > 0 for the SGD coverage law, got {config.init_scale:g}")
    sgd = _config(induction.InductionTrainConfig, args)
    return sgd.replace(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)})


def run_predict(args: argparse.Namespace) -> int:
    """`weakspots predict --model induction`."""
    eps = 0.0 if args.eps is None else args.eps
    if not (math.isfinite(eps) and eps >= 0):
        raise common.UsageError(f"--eps: must be a finite number >= 0, got {args.eps}")
    saved, args.eps = args.eps, None  # the config is the eps = 0 model; eps enters the bound
    config = _config(induction.InductionConfig, args)
    args.eps = saved
    config_eps = dataclasses.replace(config, eps=0.0)
    positions = _positions(args, config)
    out = induction_predictions(config_eps, positions, _sgd(args, config_eps))
    out["eps_loss_bound"] = theory.induction_eps_bound(
        len(positions) if positions else config.heads, config.gamma, config.beta, eps
    )
    if args.json:
        common.print_json(out)
        return 0
    rows = []
    for key, value in out.items():
        if isinstance(value, list):
            value = " ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value)
        elif isinstance(value, float):
            value = f"{value:.9g}"
        rows.append([key, str(value)])
    print(
        f"induction: S={config.stride} m={config.heads} L={config.chunks} N={config.vocab} "
        f"gamma={config.gamma:g} beta={config.beta:g}\n" + common.table(["prediction", "value"], rows)
    )
    return 0

"""Properties over the config space (hypothesis): every config is either a result or refused.

`weakspots train` on any combination of flag values either trains to finite outputs
(exit 0), or is refused with one line naming a flag (exit 2), or fails as a named
computation in one line (exit 1: a run that diverges). Nothing else: no traceback, no NaN
printed as a result. Shapes are tiny so that a valid config trains in a few seconds; the
default run tries few examples (`derandomize`: the same ones every time), `-m slow` many.
"""

import contextlib
import dataclasses
import io
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weakspots.cli import main
from weakspots.idealized.toy.config import LOSSES, OPERATORS, OPTIMIZERS, ConfigError, TrainConfig
from weakspots.sims.store import config_hash

FLAGS = {f.name: "--" + f.name.replace("_", "-") for f in dataclasses.fields(TrainConfig)}
BOOLEANS = ("learn_gain", "learn_projections", "rope_anchor", "stagger", "overlap")

# Per field: values a valid tiny run may take, and values that must be refused or survived.
VALID = {
    "stride": st.sampled_from([1, 2, 4]),
    "chunks": st.sampled_from([2, 3, 5]),
    "dim": st.sampled_from([2, 4]),
    "heads": st.sampled_from([1, 2]),
    "operator": st.sampled_from(OPERATORS),
    "loss": st.sampled_from(LOSSES),
    "rank": st.sampled_from([4, 1]),
    "rope_dim": st.sampled_from([0, 2]),
    "phase_entropy": st.sampled_from([0.0, 0.1]),
    "offset_ensemble": st.sampled_from([1, 2]),
    "optimizer": st.sampled_from(OPTIMIZERS),
    "steps": st.sampled_from([1, 3]),
    "batch": st.sampled_from([1, 3]),
    "eval_every": st.sampled_from([1, 2]),
    "eval_samples": st.sampled_from([1, 4]),
    "lr": st.sampled_from([0.01, 0.5]),
    "gain": st.sampled_from([0.5, 4.0]),
    "weight_decay": st.sampled_from([0.0, 0.01]),
    "init_scale": st.sampled_from([0.0, 0.1]),
    "seed": st.sampled_from([0, 3]),
    **{name: st.booleans() for name in BOOLEANS},
}
EXTREME = {
    "stride": st.sampled_from([0, -1]),
    "chunks": st.sampled_from([0, 1]),
    "dim": st.sampled_from([0]),
    "heads": st.sampled_from([0]),
    "operator": st.sampled_from(["conv", ""]),
    "loss": st.sampled_from(["hinge"]),
    "rank": st.sampled_from([0]),
    "rope_dim": st.sampled_from([1, 3, 64]),
    "phase_entropy": st.sampled_from([-1.0, math.nan, math.inf]),
    "offset_ensemble": st.sampled_from([0, 9]),
    "optimizer": st.sampled_from(["lbfgs"]),
    "steps": st.sampled_from([0]),
    "batch": st.sampled_from([0]),
    "eval_every": st.sampled_from([0]),
    "eval_samples": st.sampled_from([0]),
    "lr": st.sampled_from([0.0, -1.0, math.nan, math.inf, 1e39, 1e-45, 1e30]),
    "gain": st.sampled_from([0.0, -1.0, math.nan, 1e39, 1e-45, 1e30]),
    "weight_decay": st.sampled_from([-1.0, math.inf, 1e3]),
    "init_scale": st.sampled_from([-1.0, math.nan, 1e3]),
    "seed": st.sampled_from([-1, 2**32]),
}


@st.composite
def flag_values(draw):
    """A value for every field: mostly valid, some fields extreme."""
    values = {}
    for name, valid in VALID.items():
        extreme = EXTREME.get(name)
        use_extreme = extreme is not None and draw(st.integers(0, 9)) == 0
        values[name] = draw(extreme if use_extreme else valid)
    return values


@st.composite
def coherent_values(draw):
    """A config whose every flag applies (so it should train), from the valid values."""
    values = {name: draw(valid) for name, valid in VALID.items()}
    op = values["operator"]
    values["stride"] = draw(st.sampled_from([2, 4]))
    values["rank"] = values["rank"] if op == "low_rank" else 4
    if op == "deepseek_v4":
        values.update(rope_anchor=False, stagger=False, overlap=False, offset_ensemble=1)
    values["rope_dim"] = values["rope_dim"] if op == "deepseek_v4" or values["rope_anchor"] else 0
    if values["rope_anchor"]:
        values["rope_dim"] = 2
    values["stagger"] = values["stagger"] and values["heads"] > 1
    if op not in ("softmax_pool", "low_rank", "deepseek_v4"):
        values["phase_entropy"] = 0.0
    if not (values["learn_gain"] or values["learn_projections"]):
        values["weight_decay"] = 0.0
    return values


def argv(values: dict) -> list[str]:
    out = []
    for name, value in values.items():
        if name in BOOLEANS:
            out += [FLAGS[name]] if value else []
        else:
            out += [FLAGS[name], repr(value) if isinstance(value, float) else str(value)]
    return out


def _numbers(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v)
    elif isinstance(value, float):
        yield value


def check_outcome(values: dict) -> int:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(["train", *argv(values), "--json", "--quiet"])
        except SystemExit as exit_:  # argparse's own refusals exit inside parse_args
            code = exit_.code
    out, err = stdout.getvalue(), stderr.getvalue()
    lines = err.strip().splitlines()
    if code == 0:
        report = json.loads(out)
        summary = {k: v for k, v in report.items() if k not in ("config", "wall_seconds")}
        if report["mean_accuracy"] == 0:  # psc = var/mean: idealized.metrics makes it inf there
            assert report.pop("psc") == report.pop("psc_std") == math.inf
            summary = {k: v for k, v in summary.items() if k not in ("psc", "psc_std")}
        assert all(math.isfinite(x) for x in _numbers(summary)), summary
        assert all(0.0 <= a <= 1.0 for a in report["phase_accuracy"])
        assert report["config"] == dataclasses.asdict(TrainConfig(**report["config"]))
    elif code == 2:
        assert len(lines) == 1 and lines[0].startswith("weakspots train: error: --"), lines
    else:
        assert code == 1, (code, err)
        assert len(lines) == 1 and "TrainingDiverged" in lines[0], lines
    return code


def config_or_refusal(values: dict):
    """TrainConfig(**values), or None after checking its refusal names a real flag."""
    try:
        return TrainConfig(**values)
    except ConfigError as error:
        assert error.flag in FLAGS.values() and str(error).startswith(error.flag + ": ")
        return None


@settings(max_examples=300, derandomize=True, deadline=None)
@given(flag_values())
def test_a_config_is_canonical_or_refused_naming_its_flag(values):
    # Cheap (no training): one logical config, one spelling and one hash.
    config = config_or_refusal(values)
    if config is None:
        return
    row = dataclasses.asdict(config)
    again = TrainConfig(**row)
    assert again == config and config_hash(dataclasses.asdict(again)) == config_hash(row)
    for name in ("lr", "gain", "weight_decay", "init_scale", "phase_entropy"):
        assert type(row[name]) is float
    for name in BOOLEANS:
        assert type(row[name]) is bool
    spelled_as_ints = {
        k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in values.items()
    }
    assert config_hash(dataclasses.asdict(TrainConfig(**spelled_as_ints))) == config_hash(row)


CONFIGS = st.one_of(coherent_values(), flag_values())


@pytest.mark.slow
@settings(max_examples=5, derandomize=True, deadline=None)
@given(CONFIGS)
def test_train_gives_finite_outputs_or_one_line(values):
    check_outcome(values)


@pytest.mark.slow
@settings(max_examples=150, derandomize=True, deadline=None)
@given(CONFIGS)
def test_train_gives_finite_outputs_or_one_line_many(values):
    check_outcome(values)

import dataclasses
import math

import pytest

from weakspots.idealized.toy.config import HYPER_FIELDS, ConfigError, ModelConfig, TrainConfig


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("stride", 0),
        ("chunks", 1),
        ("heads", 0),
        ("dim", 0),
        ("operator", "conv"),
        ("loss", "hinge"),
        ("optimizer", "lbfgs"),
        ("lr", math.nan),
        ("lr", -1.0),
        ("lr", 0.0),
        ("gain", math.inf),
        ("gain", -3.0),
        ("weight_decay", -1e-3),
        ("init_scale", math.nan),
        ("steps", 0),
        ("stride", 2.5),
        ("rope_dim", 3),
    ],
)
def test_invalid_values_name_their_flag(field, value):
    with pytest.raises(ConfigError) as info:
        TrainConfig(**{field: value})
    flag = "--" + field.replace("_", "-")
    assert str(info.value).startswith(flag + ":")
    assert info.value.flag == flag


def test_defaults_are_the_canonical_config():
    c = TrainConfig()
    assert (c.stride, c.chunks, c.dim, c.heads, c.gain) == (8, 64, 64, 1, 16.0)
    assert (c.operator, c.loss, c.optimizer, c.lr, c.batch) == (
        "softmax_pool",
        "mse",
        "sgd",
        2.0,
        256,
    )


def test_static_forgets_exactly_the_hyperparameters():
    a = TrainConfig(lr=0.5, gain=9.0, seed=3, weight_decay=1e-3, init_scale=0.2, learn_gain=True)
    b = TrainConfig(chunks=12)
    assert a.static == TrainConfig(learn_gain=True).static
    assert b.static != TrainConfig().static
    changed = {
        f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(a.static, f.name)
    }
    assert changed == set(HYPER_FIELDS)


def test_model_view_and_fast_path():
    assert TrainConfig(chunks=12).model == ModelConfig(chunks=12)
    assert ModelConfig().uses_gram
    assert ModelConfig(operator="linear").uses_gram
    assert not ModelConfig(operator="max_pool").uses_gram
    assert not ModelConfig(learn_projections=True).uses_gram


def test_eval_times_round_up():
    assert TrainConfig(steps=600, eval_every=50).eval_times == 12
    assert TrainConfig(steps=37, eval_every=10).eval_times == 4

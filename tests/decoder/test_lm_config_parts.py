"""`LMConfig` composed of its parts (`RecallTask`, `DecoderConfig` with `V4Switches`, `Training`),
with the same serialisation as before.

`tests/data/lm_config_serialised.json` was written by the code before the change (commit
cf9b505, `LMConfig` and `DecoderConfig` flat) with the computation of `serialised` below: it
is a regression check against the pre-change code, not a record of this code's own output.
The store, the decoder checkpoints and the recorded runs hash and keep `LMConfig.asdict()`
(and `kind = "lm"` sweeps `dataclasses.asdict`); checkpoints also need the same parameter
paths and shapes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import pytest
from flax import nnx

from weakspots.errors import ConfigError
from weakspots.idealized.decoder.config import (
    LM_HYPER_FIELDS,
    V4_FIELDS,
    DecoderConfig,
    LMConfig,
    RecallTask,
    Training,
    V4Switches,
    with_design,
)
from weakspots.idealized.decoder.model import Decoder
from weakspots.sims.store import config_hash

RECORDED = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "lm_config_serialised.json").read_text()
)
DESIGNS = [name for name in RECORDED if not name.startswith("_")]
PARTS = (RecallTask, DecoderConfig, V4Switches, Training)
LAYOUT_FIELDS = {"layers", "layout"}  # the flat form of `DecoderConfig.layer_kinds`


def parameter_shapes(config: LMConfig) -> dict[str, list[int]]:
    state = nnx.split(nnx.eval_shape(lambda: Decoder(config.decoder, rngs=nnx.Rngs(0))))[1]
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {jax.tree_util.keystr(path): list(x.shape) for path, x in leaves}


def serialised(design: str, flags: dict) -> dict:
    config = LMConfig(**with_design(design, flags, set(flags)))
    return {
        "design": design,
        "flags": flags,
        "asdict": json.dumps(config.asdict()),
        "dataclasses_asdict": json.dumps(dataclasses.asdict(config)),
        "hash": config_hash(config.asdict()),
        "static_hash": config_hash(config.static.asdict()),
        "task": dataclasses.asdict(config.task),
        "layer_kinds": list(config.layer_kinds),
        "parameters": parameter_shapes(config),
    }


def test_the_recording_covers_defaults_v4_and_compressed_designs_with_options():
    assert {"defaults", "v4", "compressed_indexer_overlap", "staggered_entropy"} <= set(DESIGNS)


@pytest.mark.parametrize("name", DESIGNS)
def test_serialisation_is_the_pre_change_codes(name):
    recorded = RECORDED[name]
    now = serialised(recorded["design"], recorded["flags"])
    for key, value in recorded.items():
        assert now[key] == value, f"{name}: {key} differs from the pre-change code's"


def test_every_flat_field_is_one_parts_field_with_its_default():
    owners: dict[str, type] = {}
    for part in PARTS:
        for field in dataclasses.fields(part):
            if field.name in ("vocab", "layer_kinds", "v4"):  # derived from other fields
                continue
            assert field.name not in owners, f"{field.name} in {owners.get(field.name)} and {part}"
            owners[field.name] = part
    flat = {f.name: f.default for f in dataclasses.fields(LMConfig)}
    assert set(flat) == set(owners) | LAYOUT_FIELDS
    for name, part in owners.items():
        assert flat[name] == getattr(part, name), f"LMConfig.{name}'s default is not {part}'s"
    assert set(V4_FIELDS) == {f.name for f in dataclasses.fields(V4Switches)} | {"indexer_kl"}
    assert set(LM_HYPER_FIELDS) <= {f.name for f in dataclasses.fields(Training)}


@pytest.mark.parametrize("name", DESIGNS)
def test_the_parts_hold_the_flat_fields(name):
    recorded = RECORDED[name]
    config = LMConfig(**with_design(recorded["design"], recorded["flags"], set(recorded["flags"])))
    decoder = config.decoder
    assert decoder.v4 == config.v4 and decoder.layer_kinds == config.layer_kinds
    assert decoder.vocab == config.task.vocab
    for part in (config.task, decoder, config.v4, config.training):
        for field in dataclasses.fields(part):
            if field.name not in ("vocab", "layer_kinds", "v4"):
                assert getattr(part, field.name) == getattr(config, field.name), field.name


@pytest.mark.parametrize(
    ("part", "changes", "flag"),
    [
        (V4Switches, {"hca_stride": 0}, "hca_stride"),
        (V4Switches, {"o_groups": -1}, "o_groups"),
        (Training, {"steps": 0}, "steps"),
        (Training, {"indexer_kl": -1.0}, "indexer_kl"),
        (RecallTask, {"pairs": 0}, "pairs"),
    ],
)
def test_each_part_refuses_its_own_bad_fields_naming_the_flag(part, changes, flag):
    with pytest.raises(ConfigError) as refused:
        part(**changes)
    assert refused.value.field == flag
    with pytest.raises(ConfigError) as flat:  # the flat config says the same
        LMConfig(**changes)
    assert flat.value.field == flag


def test_v4_switches_off_v4_layers_are_refused_by_the_decoder():
    with pytest.raises(ConfigError, match="DeepSeek-V4's layers") as refused:
        DecoderConfig(vocab=20, v4=V4Switches(sink=True))
    assert refused.value.field == "sink"
    assert DecoderConfig(vocab=20, layer_kinds=("swa",), v4=V4Switches(sink=True)).v4.sink

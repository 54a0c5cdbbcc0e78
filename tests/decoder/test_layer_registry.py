"""`idealized.decoder.layers.registry`: a new decoder layer kind is one class and one `register` line.

The test kind `recent` (the last two tokens, exact) is written here, registered, built into a
decoder, counted (FLOPs, reach, edits) and trained through `weakspots lm train --layout`,
then unregistered: no other file of the project names it. Beside it, the registry's
consumers are checked against values recorded from the code before the registry (commit
da79d6f, where the kinds were strings compared in each consumer): the store keys, FLOP
counts, reaches, edits and a forward pass of every built-in kind are unchanged.
"""

import json
from typing import final

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.cli import main
from weakspots.idealized.decoder import layers
from weakspots.idealized.decoder.config import LAYER_KINDS, V4_KINDS, LMConfig, with_design
from weakspots.idealized.decoder.layers.base import LOCAL, AbstractLayerKind, build_attention
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.toy.config import ConfigError
from weakspots.sims.decoder import carry, edits, evaluate, interventions, train
from weakspots.sims.store import config_hash

WIDTH = 2
TINY = dict(
    seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, d_model=16, heads=2,
    rope_dim=4, window=4,
)  # fmt: skip
CLI = (
    "--seq-len 32 --pairs 2 --key-vocab 8 --value-vocab 8 --filler-vocab 4 --d-model 16 "
    "--heads 2 --rope-dim 4 --window 4 --steps 6 --eval-every 3 --batch 4 --eval-batch 8 "
    "--eval-samples 1 --layers 2"
).split()


@final
class Recent(AbstractLayerKind):
    """The last `WIDTH` tokens, exact, whatever `--window` says."""

    name = "recent"
    sliding = True

    @classmethod
    def local_reach(cls, config):
        return WIDTH

    @classmethod
    def attention(cls, config, *, rngs):
        return build_attention(config, local=WIDTH, rngs=rngs)


@pytest.fixture
def recent():
    layers.register(Recent)
    try:
        yield Recent
    finally:
        layers.unregister(Recent.name)


def test_the_registry_is_what_the_consumers_read():
    assert layers.layer_kind_names() == LAYER_KINDS == (
        "dense", "sliding", "compressed", "swa", "csa", "hca"
    )  # fmt: skip
    assert layers.layer_kind_names(v4=True) == V4_KINDS == ("swa", "csa", "hca")
    assert layers.layer_kind_names(compresses=True) == ("compressed", "csa", "hca")
    assert layers.layer_kind_names(indexer=True) == ("compressed", "csa")
    config = LMConfig(layers=6, layout=",".join(LAYER_KINDS), local_window=8, seq_len=136)
    reads = [layers.lookup(kind).reads(config) for kind in config.layer_kinds]
    assert reads == ["all", "local", "both", "local", "both", "both"]
    dense = config.replace(operator="none")
    assert [layers.lookup(kind).reads(dense) for kind in dense.layer_kinds] == [
        "all", "local", "all", "local", "all", "all"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        layers.register(layers.Sliding)


# Recorded by running the code of commit da79d6f (before the registry) on these configs
# (a separate checkout of that commit, `config_hash(config.asdict())`, `model_flops_per_step`,
# `query_reach`, `carry.compressed_layers`, `carry.local_reach`, the edits' `applies`).
MAIN = {
    "default": dict(
        fields={}, hash="b4e26f6a2c27391e", flops=1020788736.0, reach=16,
        compressed_layers=[(1, 4, False)], local_reach=16,
        applies=["10000010000", "10100100000"],
        components=["ablate_layer layer 0", "ablate_layer layer 1", "no_rope_compressed layer 1"],
        compressed=True, indexed=False,
    ),
    "layout": dict(
        fields=dict(layers=3, layout="dense,sliding,compressed", operator="softmax_pool",
                    local_window=8, indexer_topk=2),
        hash="ab189d72fbbc362a", flops=1876426752.0, reach=24,
        compressed_layers=[(2, 4, False)], local_reach=16,
        applies=["10000000000", "10000010000", "11111111100"],
        components=["ablate_layer layer 0", "ablate_layer layer 1", "no_compressed_branch layer 2",
                    "no_local_window layer 2", "no_rope_compressed layer 2",
                    "zero_position_bias layer 2", "roll_position_bias layer 2"],
        compressed=True, indexed=True,
    ),
    "v4": dict(
        fields=with_design("v4", {}, ()),
        hash="cd47b2cbff03c5ea", flops=2253914112.0, reach=64,
        compressed_layers=[(1, 4, True), (2, 16, False), (3, 4, True)], local_reach=16,
        applies=["10000010010", "10000111111", "10000110011", "10000111111"],
        components=[f"ablate_layer layer {i}" for i in range(4)],
        compressed=True, indexed=True,
    ),
    "v4_none": dict(
        fields=with_design("v4", {"operator": "none", "layers": 3}, ("operator", "layers")),
        hash="78af3fd2ed61f120", flops=2128084992.0, reach=48,
        compressed_layers=[], local_reach=16,
        applies=["10000010010", "10000000010", "10000000010"],
        components=[f"ablate_layer layer {i}" for i in range(3)],
        compressed=False, indexed=False,
    ),
    "swa_hca": dict(
        fields=dict(layers=2, layout="swa,hca", stride=16, hca_stride=16, window=32,
                    local_window=32, seq_len=136),
        hash="74b4cea63f423c05", flops=1399848960.0, reach=64,
        compressed_layers=[(1, 16, False)], local_reach=32,
        applies=["10000010000", "10000110001"],
        components=["ablate_layer layer 0", "ablate_layer layer 1"],
        compressed=True, indexed=False,
    ),
    "overlap": dict(
        fields=dict(layers=3, layout="compressed,sliding,compressed", operator="deepseek_v4",
                    overlap=True, local_window=4),
        hash="3562e6b03ea53760", flops=1574436864.0, reach=24,
        compressed_layers=[(0, 4, True), (2, 4, True)], local_reach=16,
        applies=["11111110000", "10000010000", "11111110000"],
        components=["no_compressed_branch layer 0", "no_local_window layer 0",
                    "no_rope_compressed layer 0", "zero_position_bias layer 0",
                    "roll_position_bias layer 0", "ablate_layer layer 1",
                    "no_compressed_branch layer 2", "no_local_window layer 2",
                    "no_rope_compressed layer 2", "zero_position_bias layer 2",
                    "roll_position_bias layer 2"],
        compressed=True, indexed=False,
    ),
}  # fmt: skip


def applies(config: LMConfig, layer: int) -> str:
    """Which edits apply to `layer`, as the recorded string of 0s and 1s."""
    E = edits
    tried = [
        E.AblateLayer(layer), E.ZeroPositionBias(layer), E.NoRopeCompressed(layer),
        E.NoCompressedBranch(layer), E.NoLocalWindow(layer), E.HideEntries(layer, None),
        E.CutLocalEdges(layer, None), E.PairIndexer(layer),
        *[E.V4PartOff(layer, part) for part in E.V4_PARTS],
    ]  # fmt: skip
    return "".join("1" if edit.applies(config) else "0" for edit in tried)


@pytest.mark.parametrize("name", MAIN)
def test_store_keys_and_counts_are_mains(name):
    want = MAIN[name]
    config = LMConfig(**want["fields"])
    assert config_hash(config.asdict()) == want["hash"]
    assert train.model_flops_per_step(config) == want["flops"]
    assert evaluate.query_reach(config) == want["reach"]
    assert carry.compressed_layers(config) == want["compressed_layers"]
    assert carry.local_reach(config) == want["local_reach"]
    assert [applies(config, layer) for layer in range(config.layers)] == want["applies"]
    assert [e.name for e in interventions.component_interventions(config)] == want["components"]
    assert (config.compressed, config.indexed) == (want["compressed"], want["indexed"])


# `float(logits.sum())`, `float(abs(logits).sum())` of `Decoder(config.decoder, rngs=nnx.Rngs(0))`
# on `arange(64).reshape(2, 32) % vocab`, recorded from commit da79d6f's code (float64 sums
# of float32 logits): every built-in kind draws the same parameters and computes the same.
FORWARD = {
    "dense,sliding,compressed": (
        dict(operator="softmax_pool", local_window=4),
        308.0450772792101,
        994.215061031282,
    ),
    "swa,csa,hca": (
        dict(hca_stride=8, local_window=4, indexer_topk=2, index_dim=4, sink=True),
        -73.18707045167685,
        1045.1181782260537,
    ),
}


@pytest.mark.slow  # eager forward passes: ~30 s each on 2 busy cores
@pytest.mark.parametrize("layout", FORWARD)
def test_every_built_in_kind_computes_as_on_main(layout):
    fields, total, magnitude = FORWARD[layout]
    config = LMConfig(layers=3, layout=layout, **TINY, **fields)
    tokens = jnp.arange(2 * 32).reshape(2, 32) % config.decoder.vocab
    logits = np.asarray(Decoder(config.decoder, rngs=nnx.Rngs(0))(tokens), np.float64)
    np.testing.assert_allclose([logits.sum(), np.abs(logits).sum()], [total, magnitude], rtol=1e-5)


def test_a_new_kind_is_built_counted_and_edited(recent):
    config = LMConfig(layers=2, layout="recent,compressed", local_window=4, **TINY)
    kind = layers.lookup("recent")
    assert kind.reads(config) == LOCAL and kind.has_local(config)
    # what it reads: the last WIDTH tokens. Changing token 5 changes positions 5..5+WIDTH-1 only.
    attention = kind.attention(config.decoder, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(0), (1, 16, 16))
    moved = attention(x.at[:, 5].add(1.0)) - attention(x)
    changed = np.abs(np.asarray(moved)).max(axis=(0, 2)) > 0
    np.testing.assert_array_equal(np.flatnonzero(changed), np.arange(5, 5 + WIDTH))
    # the FLOP count: a banded branch of WIDTH (blocks of WIDTH queries, 2 WIDTH keys each)
    T, d = config.seq_len, config.d_model
    base = LMConfig(layers=2, layout="sliding,compressed", local_window=4, **TINY)
    window_slots = {WIDTH: T * 2 * WIDTH, config.window: T * 2 * config.window}  # T divisible
    difference = (
        3.0 * 2 * 2 * d * (window_slots[WIDTH] - window_slots[config.window]) * config.batch
    )
    assert train.model_flops_per_step(config) - train.model_flops_per_step(base) == difference
    assert evaluate.query_reach(config) == WIDTH + 4
    assert carry.local_reach(config) == 4  # the compressed layer's local window is wider
    assert applies(config, 0) == "10000010000"  # removable, its local edges cut; nothing else
    assert edits.AblateLayer(0).describe(config) == "remove sliding window (layer 0)"


def test_a_new_kind_trains_through_the_command_line(recent, capsys):
    assert main(["lm", "train", *CLI, "--layout", "recent,compressed", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["layout"] == "recent,compressed"
    assert np.isfinite(out["final_loss"]) and len(out["phase_accuracy"]) == out["config"]["stride"]
    # the reach the report states is the kind's: WIDTH tokens, not the sliding --window 4
    assert out["near_query"]["reach"] == WIDTH


def test_an_unregistered_kind_is_refused(capsys):
    assert "recent" not in layers.layer_kind_names()
    with pytest.raises(ConfigError, match="^--layout: layer kinds are dense, .*got 'recent'"):
        LMConfig(layers=2, layout="recent,compressed", **TINY)
    assert main(["lm", "train", *CLI, "--layout", "recent,compressed", "--quiet"]) == 2
    assert "--layout" in capsys.readouterr().err


def test_the_kind_files_are_one_each():
    """The built-in kinds each live in their own file, named as the kind."""
    for name in LAYER_KINDS:
        module = layers.lookup(name).__module__
        assert module == f"weakspots.idealized.decoder.layers.{name}", module

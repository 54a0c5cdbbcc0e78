"""DeepSeek-V4's attention in the decoder family (`idealized.decoder.v4_attention`): every switch
changes the program, causality with the indexer, invariants that tie the switches to each
other, the indexer's statistics, the config surface and `lm train --design v4`."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixtures import assert_only_the_indexer_learns_from_its_kl
from flax import nnx

from weakspots.cli import main
from weakspots.idealized.decoder.config import (
    LM_OPTIONAL_FIELDS,
    V4_DESIGN,
    DecoderConfig,
    LMConfig,
    V4Switches,
    v4_layout,
)
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.decoder.v4_attention import V4Attention, indexer_statistics

D, H, HD = 16, 4, 8
T = 23  # not a multiple of the ratio


def random_module(build, seed: int, scale: float = 0.5):
    """The module `build()` makes, every parameter drawn N(0, scale^2) (numpy: nothing to compile).

    Gates, position biases, norm weights and sinks start at zero or one, which would hide
    what they do.
    """
    graph, abstract = nnx.split(nnx.eval_shape(build))
    rng = np.random.default_rng(seed)
    state = jax.tree.map(
        lambda x: jnp.asarray(rng.normal(0.0, scale, x.shape), jnp.float32), abstract
    )
    return nnx.merge(graph, state)


def layer(kind: str = "csa", seed: int = 0, **switches) -> V4Attention:
    """A V4 layer with random parameters (`random_module`)."""
    args = dict(
        ratio=4 if kind == "csa" else 8, local_window=5, rope_dim=4, shared_kv=True,
        qk_norm=True, sink=True, index_topk=2 if kind == "csa" else 0, index_heads=2,
        index_dim=8, q_rank=8, o_groups=2, o_rank=4,
    )  # fmt: skip
    build = lambda: V4Attention(D, H, HD, kind=kind, **{**args, **switches}, rngs=nnx.Rngs(0))  # noqa: E731
    return random_module(build, seed)


def compiled(module: nnx.Module):
    """`module(x)` as one jitted program of its current parameters."""
    graph, state = nnx.split(module)
    forward = jax.jit(lambda state, x: nnx.merge(graph, state)(x))
    return lambda x: forward(state, x)


def hidden(seed: int = 0, length: int = T) -> jax.Array:
    return jax.random.normal(jax.random.key(100 + seed), (2, length, D))


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
@pytest.mark.parametrize("kind", ["csa", "hca"])
def test_causal_with_indexer(kind):
    """The output at t does not move when tokens after t change (top-k over future scores
    included), and does move when token t changes."""
    module = compiled(layer(kind))
    x = hidden()
    out = module(x)
    for t in (0, 3, 4, 9, 15, T - 2):
        changed = x.at[:, t + 1 :].add(jax.random.normal(jax.random.key(t), (2, T - t - 1, D)))
        moved = module(changed)
        np.testing.assert_array_equal(np.asarray(moved[:, : t + 1]), np.asarray(out[:, : t + 1]))
        assert np.abs(np.asarray(moved[:, t + 1 :] - out[:, t + 1 :])).max() > 1e-3
        own = module(x.at[:, t].add(1.0))
        assert np.abs(np.asarray(own[:, t] - out[:, t])).max() > 1e-3


def test_top_k_over_every_entry_is_no_indexer():
    """With top-k at least the number of entries the indexer keeps all visible ones: the
    output equals the layer's with the indexer removed; a smaller top-k changes it."""
    module = layer("csa", index_topk=64)
    x = hidden()
    kept = compiled(module)(x)
    module.indexer, module.index_topk = None, 0
    np.testing.assert_allclose(np.asarray(compiled(module)(x)), np.asarray(kept), rtol=0, atol=1e-6)
    small = compiled(layer("csa", index_topk=1))
    assert np.abs(np.asarray(small(x) - kept)).max() > 1e-2


@pytest.mark.parametrize("kind", ["csa", "hca", "sliding"])
def test_per_head_kv_with_equal_heads_is_shared_kv(kind):
    """Per-head KV and compressors whose heads all hold the shared head's weights compute
    the shared-KV layer exactly (the switch generalises, it does not change anything else)."""
    shared = layer(kind, index_topk=2 if kind == "csa" else 0, local_window=5)
    per_head = layer(kind, seed=7, shared_kv=False)
    own, other = nnx.state(shared), nnx.state(per_head)
    own_flat, other_flat = dict(nnx.to_flat_state(own)), dict(nnx.to_flat_state(other))
    tiled = {}
    for path, var in other_flat.items():
        value = own_flat[path].get_value()
        target = var.get_value().shape
        if value.shape != target:  # the KV axis: 1 head in the shared layer, H here
            value = (
                jnp.tile(value, (1, H))
                if path[-2:] == ("kv", "kernel")
                else jnp.broadcast_to(value, target)
            )
        tiled[path] = value
    for path, value in tiled.items():
        other_flat[path].set_value(value)
    x = hidden(1)
    np.testing.assert_allclose(
        np.asarray(compiled(per_head)(x)), np.asarray(compiled(shared)(x)), rtol=0, atol=1e-5
    )


SWITCHES = {  # DecoderConfig or V4Switches field: (off, on), and what else the switch needs
    "indexer_topk": ((0, 2), {}),
    "shared_kv": ((False, True), {}),
    "sink": ((False, True), {}),
    "qk_norm": ((False, True), {}),
    "local_window": ((0, 4), {}),
    "rope_fraction": ((0.0, 0.5), {}),
    "q_rank": ((0, 8), {}),
    "o_groups": ((0, 2), {"o_rank": 4}),
}


def decoder_config(**changes) -> DecoderConfig:
    """A small decoder of V4's three kinds; `changes` of `V4Switches` fields go to its group."""
    switches = {f.name for f in dataclasses.fields(V4Switches)}
    v4 = V4Switches(**{"hca_stride": 8, **{k: v for k, v in changes.items() if k in switches}})
    base = dict(
        vocab=12, layer_kinds=("swa", "csa", "hca"), d_model=D, heads=H, stride=4, window=4,
        rope_dim=4,
    )  # fmt: skip
    return DecoderConfig(**base, **{k: v for k, v in changes.items() if k not in switches}, v4=v4)


@pytest.mark.parametrize("name", list(SWITCHES))
def test_each_switch_changes_the_program(name):
    """The traced forward pass with the switch on differs from the one with it off, and so
    does the output of the decoder built from the same key."""
    tokens = jax.random.randint(jax.random.key(3), (2, 24), 0, 12)
    programs, outputs = [], []
    values, needs = SWITCHES[name]
    for value in values:
        config = decoder_config(**{name: value}, **(needs if value else {}))
        model = random_module(lambda: Decoder(config, rngs=nnx.Rngs(0)), 0, 0.3)  # noqa: B023
        graph, state = nnx.split(model)
        run = lambda s: nnx.merge(graph, s)(tokens)  # noqa: B023, E731
        programs.append(str(jax.make_jaxpr(run)(state)))
        outputs.append(np.asarray(jax.jit(run)(state)))
    assert programs[0] != programs[1]
    assert np.abs(outputs[0] - outputs[1]).max() > 1e-6


def test_indexer_statistics_against_closed_forms():
    """An indexer whose scores are the main attention's logits (one head): KL 0, recall 1.
    One that ranks the entries in reverse keeps the bottom 2 of the top-2 entries: with 3
    visible they share one (recall 1/2), with 4 to 6 none, so recall (1/2 + 0 + 0 + 0) / 4
    over the queries that see more than 2."""
    visible = jnp.asarray(np.tril(np.ones((6, 6), bool)))  # query t sees entries 0..t
    main = jax.random.normal(jax.random.key(0), (1, 1, 6, 6))
    kl, recall = indexer_statistics(main, main[:, 0], visible, 2)
    assert abs(float(kl)) < 1e-6 and float(recall) == 1.0
    kl, recall = indexer_statistics(main, -main[:, 0], visible, 2)
    assert float(kl) > 0.1
    assert float(recall) == pytest.approx(0.125, abs=1e-7)


@pytest.mark.slow
def test_indexer_loss_trains_the_indexer_alone():
    """The KL's gradient reaches only the indexer's parameters; the output's reaches none of them."""
    assert_only_the_indexer_learns_from_its_kl(
        layer("csa"), hidden(), lambda stats: stats["indexer_kl"][0]
    )


def test_v4_fields_leave_records_unchanged_at_defaults():
    """Off by default and left out of `asdict`: a config without them keeps its keys (so its
    hash); each one set shows up."""
    keys = set(LMConfig().asdict())
    assert not keys & set(LM_OPTIONAL_FIELDS)
    assert keys == {f.name for f in dataclasses.fields(LMConfig)} - set(LM_OPTIONAL_FIELDS)
    v4 = LMConfig(**V4_DESIGN)
    assert {"indexer_topk", "shared_kv", "sink", "qk_norm"} <= set(v4.asdict())


def test_v4_layout_is_the_schedule():
    assert v4_layout(4) == "swa,csa,hca,csa"
    assert v4_layout(5, sliding=2) == "swa,swa,csa,hca,csa"
    assert LMConfig(**V4_DESIGN).layer_kinds == ("swa", "csa", "hca", "csa")


TINY = (
    "--seq-len 32 --pairs 2 --key-vocab 8 --value-vocab 8 --filler-vocab 4 --d-model 32 "
    "--steps 2 --eval-every 2 --batch 2 --eval-batch 4 --eval-samples 1"
).split()


@pytest.mark.parametrize(
    "flags, flag",
    [
        (["--sink"], "--sink"),
        (["--qk-norm", "--layout", "sliding,compressed"], "--qk-norm"),
        (["--indexer-topk", "2", "--layers", "2", "--layout", "swa,hca"], "--indexer-topk"),
        (["--indexer-pairs", "--layers", "2", "--layout", "swa,csa", "--indexer-topk", "0"],
         "--indexer-pairs"),
        (["--design", "v4", "--o-groups", "3"], "--o-groups"),
        (["--design", "v4", "--rope-fraction", "1.5"], "--rope-fraction"),
        (["--design", "v4", "--rope-fraction", "0.5", "--index-dim", "2"], "--index-dim"),
        (["--design", "v4", "--phase-entropy", "0.1", "--operator", "softmax_pool"],
         "--phase-entropy"),
        (["--design", "v5"], "--design"),
    ],
)  # fmt: skip
def test_bad_v4_flags_exit_2_with_one_line(flags, flag, capsys):
    assert main(["lm", "train", *TINY, *flags, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and flag in err


def test_lm_ablate_refuses_v4_layers(capsys):
    assert main(["lm", "ablate", *TINY, "--design", "v4", "--quiet"]) == 2
    assert "--layout" in capsys.readouterr().err


@pytest.mark.slow
def test_design_v4_layout_builds_and_one_training_step_runs():
    """`--design v4` with `--layers 2` lays out V4's schedule (a sliding layer, then csa); one
    jitted AdamW step on its training loss (indexer KL included) is finite and moves both the
    model's and the indexer's parameters (the indexer's only through the KL: the top-k passes
    no gradient). Two layers and two heads keep the compile short; the end-to-end test below
    (slow) trains three layers, hca included."""
    from weakspots.cli import build_parser
    from weakspots.cli.lm import lm_config
    from weakspots.sims.decoder import train

    argv = ["lm", "train", *TINY, "--design", "v4", "--layers", "2", "--indexer-topk", "2",
            "--heads", "2", "--index-heads", "2"]  # fmt: skip
    config = lm_config(build_parser().parse_args(argv))
    assert config.layout == "swa,csa" and config.decoder.layer_kinds == ("swa", "csa")
    assert config.sink and config.shared_kv and config.qk_norm and config.q_rank > 0
    assert config.indexed and config.indexer_kl > 0
    hyper = jax.tree.map(lambda x: x[0], train.LMHyper.stack([config]))
    state = train.init(config, hyper)
    new, loss = jax.jit(lambda s: train.step(config, s, hyper))(state)
    assert np.isfinite(float(loss)) and int(new.step) == 1
    before, after = dict(nnx.to_flat_state(state.params)), dict(nnx.to_flat_state(new.params))
    moved = {
        path: float(jnp.abs(after[path].get_value() - v.get_value()).max())
        for path, v in before.items()
    }
    assert any(d > 0 for p, d in moved.items() if "indexer" in p)
    assert any(d > 0 for p, d in moved.items() if "indexer" not in p)


@pytest.mark.slow
def test_lm_train_design_v4_end_to_end(capsys):
    """`--design v4` trains V4's schedule (given flags override it) and reports per-phase
    accuracy and each csa layer's indexer recall."""
    flags = [*TINY, "--design", "v4", "--layers", "3", "--indexer-topk", "2", "--json", "--quiet"]
    assert main(["lm", "train", *flags]) == 0
    out = json.loads(capsys.readouterr().out)
    config = out["config"]
    assert config["layout"] == "swa,csa,hca" and config["indexer_topk"] == 2
    assert config["sink"] and config["shared_kv"] and config["qk_norm"]
    assert config["d_model"] == 32 and config["heads"] == V4_DESIGN["heads"]
    assert len(out["phase_accuracy"]) == config["stride"]
    recall = out["indexer_recall"]
    assert len(recall) == 1 and 0.0 <= recall[0] <= 1.0
    assert np.isfinite(out["final_loss"])


@pytest.mark.slow
def test_lm_sweep_stores_the_indexer_recall():
    """A `kind = "lm"` sweep run of the v4 design stores its indexer's recall beside the phase metrics."""
    from weakspots.sims.decoder import sweep as lm_sweep

    tiny = dict(
        seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, d_model=32, steps=2,
        eval_every=2, batch=2, eval_batch=4, eval_samples=1,
    )  # fmt: skip
    config = LMConfig(**{**V4_DESIGN, **tiny, "layers": 3, "layout": v4_layout(3)})
    ((metrics, _),) = lm_sweep.execute([config], 1)
    assert 0.0 <= metrics["indexer_recall"] <= 1.0 and not metrics["diverged"]


@pytest.mark.parametrize("kind", ["csa", "hca", "sliding"])
def test_separate_values_carry_every_value_and_leave_the_keys(kind):
    """`separate_values` (not V4's, a diagnostic of K = V): with the value projection and the
    value compressor's output zeroed, the layer outputs zero though keys and queries are
    intact; off, the layer has neither, so V4's layer keeps its parameters."""
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, T, D)), jnp.float32)
    module = layer(kind, separate_values=True, o_groups=0)
    graph, state = nnx.split(module)
    assert np.abs(np.asarray(nnx.merge(graph, state)(x))).max() > 1e-3

    def zeroed(path, value):
        names = [str(getattr(p, "key", p)) for p in path]
        hit = names[0] == "v" or (names[0] == "v_compressor" and "norm" in names)
        return jnp.zeros_like(value) if hit else value

    silent = jax.tree_util.tree_map_with_path(zeroed, state)
    np.testing.assert_allclose(np.asarray(nnx.merge(graph, silent)(x)), 0.0, atol=1e-6)
    plain = layer(kind)
    assert plain.v is None and plain.v_compressor is None
    assert "separate_values" not in LMConfig(layout="swa,csa").asdict()  # hashes unchanged

"""DeepSeek-V4's Lightning Indexer on the project's `compressed` layer (`idealized.decoder.attention`):
top-k over every entry is no indexer, k = 1 reads exactly the indexer's argmax among the
visible entries, the indexer learns from its KL alone, the `selected` intermediate, and the
config and CLI surface."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixtures import assert_only_the_indexer_learns_from_its_kl
from flax import nnx

from weakspots.cli import main
from weakspots.idealized.decoder import attention
from weakspots.idealized.decoder.config import DecoderConfig, LMConfig, V4Switches
from weakspots.idealized.decoder.model import Decoder, trace
from weakspots.idealized.toy.config import ConfigError
from weakspots.sims.decoder.edits import V4PartOff

T, D, H, STRIDE, ROPE, WINDOW = 16, 8, 2, 4, 2, 3
C = T // STRIDE


TINY = dict(seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, d_model=16,
            heads=2, rope_dim=4, layers=2, layout="sliding,compressed", indexer_topk=2)  # fmt: skip


def make_layer(index_topk: int, seed: int = 0) -> attention.Attention:
    """A compressed layer (softmax_pool, a local window) with every parameter random."""

    def build():
        rngs = nnx.Rngs(0)
        compressor = attention.make_compressor(
            "softmax_pool", stride=STRIDE, heads=H, d_model=D, head_dim=D // H, rngs=rngs
        )
        return attention.Attention(
            D, H, compressor=compressor, local_window=WINDOW, rope_dim=ROPE,
            index_topk=index_topk, index_heads=2, index_dim=4, rngs=rngs,
        )  # fmt: skip

    graph, state = nnx.split(nnx.eval_shape(build))
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree.flatten(state)
    leaves = [jnp.asarray(0.5 * rng.standard_normal(x.shape), jnp.float32) for x in leaves]
    return nnx.merge(graph, jax.tree.unflatten(treedef, leaves))


def params(module: nnx.Module) -> dict:
    return {path: v.get_value() for path, v in nnx.to_flat_state(nnx.state(module, nnx.Param))}


def recorded(layer: nnx.Module, x, kind=nnx.Intermediate):
    """`(output, sown)` of one jitted call inside `nnx.capture(..., kind)`."""
    graph, state = nnx.split(layer)
    record = nnx.capture(lambda m, x: m(x), kind)
    return jax.jit(lambda st, x: record(nnx.merge(graph, st), x))(state, x)


def inputs(seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal((2, T, D)), jnp.float32)


def visible_entries() -> np.ndarray:
    """`(T, C)`: query t sees entry w once its window is complete, `(w + 1) s - 1 <= t`."""
    t, w = np.arange(T)[:, None], np.arange(C)[None, :]
    return (w + 1) * STRIDE - 1 <= t


def test_top_k_over_every_entry_is_the_layer_without_an_indexer():
    """k >= C keeps every visible entry: the output is that of a layer built without an
    indexer holding the same (copied) parameters; the indexer adds parameters only under
    `indexer`."""
    indexed = make_layer(index_topk=C)
    plain = make_layer(index_topk=0, seed=1)
    theirs, mine = params(indexed), params(plain)
    assert set(mine) == {p for p in theirs if p[0] != "indexer"}
    graph, state = nnx.split(plain)
    flat = [(p, v.replace(theirs[p])) for p, v in nnx.to_flat_state(state)]
    plain = nnx.merge(graph, nnx.from_flat_state(flat))
    x = inputs()
    out, sown = recorded(indexed, x)
    want, _ = recorded(plain, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(
        np.asarray(sown["selected"][0]), np.broadcast_to(visible_entries(), (2, T, C))
    )


class FixedScores(nnx.Module):
    """A hand-set indexer: its scores `(B, T, C)` whatever the input."""

    def __init__(self, scores):
        self.scores = nnx.data(jnp.asarray(scores, jnp.float32))

    def __call__(self, x, query_input):
        return self.scores


def test_top_1_reads_the_indexers_best_visible_entry_only():
    """k = 1 with hand-set scores (future entries often the highest): each query's
    compressed attention weights are positive on the argmax of the scores over its
    visible entries (numpy) and zero elsewhere, never on a future entry; queries that see
    no entry put no weight on any. Entries an edit hides are gone for the indexer too:
    the next best visible one is read."""
    layer = make_layer(index_topk=1)
    scores = np.random.default_rng(3).standard_normal((2, T, C))
    layer.indexer = FixedScores(scores)
    visible = visible_entries()[None].repeat(2, 0)  # (B, T, C)
    assert (np.where(visible, scores, -np.inf).argmax(-1) != scores.argmax(-1)).any()
    hidden = np.zeros((2, C), bool)
    hidden[0, 0] = hidden[1, 1] = True
    for hide in (None, hidden):
        layer.hidden_entries = None if hide is None else nnx.data(jnp.asarray(hide))
        seen = visible if hide is None else visible & ~hide[:, None, :]
        _, sown = recorded(layer, inputs())
        weights = np.asarray(sown["attention"][0])[..., :C]  # (B, H, T, C): the entries
        best = np.argmax(np.where(seen, scores, -np.inf), axis=-1)  # (B, T)
        want = (np.arange(C)[None, None] == best[..., None]) & seen.any(-1)[..., None]
        np.testing.assert_array_equal(weights > 0, np.broadcast_to(want[:, None], weights.shape))
        assert not (weights * ~seen[:, None]).any()


def test_causal_with_the_indexer():
    """The output up to t does not move when the tokens after t change (the top-k over the
    future entries' scores included)."""
    layer = make_layer(index_topk=1)
    x = inputs()
    graph, state = nnx.split(layer)
    forward = jax.jit(lambda x: nnx.merge(graph, state)(x))
    out = np.asarray(forward(x))
    for t in (2, 5, 9):
        noise = np.random.default_rng(t).standard_normal((2, T - t - 1, D))
        changed = x.at[:, t + 1 :].add(jnp.asarray(noise, jnp.float32))
        moved = np.asarray(forward(changed))
        np.testing.assert_array_equal(moved[:, : t + 1], out[:, : t + 1])
        assert np.abs(moved[:, t + 1 :] - out[:, t + 1 :]).max() > 1e-3


def test_indexer_learns_from_its_kl_alone():
    """In a decoder (sliding, then compressed with an indexer): the output's gradient
    reaches no indexer parameter (the top-k passes none); the captured `indexer_kl`'s
    reaches every indexer parameter and nothing else (the main logits are its fixed target
    and the indexer's input is detached, so the layers below learn nothing from it)."""
    config = LMConfig(**TINY).decoder
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, config.vocab, (2, 32)), jnp.int32)
    assert_only_the_indexer_learns_from_its_kl(
        Decoder(config, rngs=nnx.Rngs(params=0)), tokens,
        lambda stats: stats["blocks"][1]["attention"]["indexer_kl"][0],
    )  # fmt: skip


def test_selected_is_sown_through_trace():
    """`trace` collects each indexed layer's `selected` (B, T, C): k entries for every query
    that sees more than k, all it sees otherwise, none in the future (a compressed layer
    with an indexer and V4's csa layer alike)."""
    for layout in ("sliding,compressed", "swa,csa"):
        config = LMConfig(**{**TINY, "layout": layout}).decoder
        model = Decoder(config, rngs=nnx.Rngs(params=0))
        tokens = np.random.default_rng(0).integers(0, config.vocab, (2, 32))
        _, sown = nnx.jit(trace)(model, jnp.asarray(tokens, jnp.int32))
        selected = np.asarray(sown["blocks"][1]["attention"]["selected"][0])
        assert "selected" not in sown["blocks"][0]["attention"]
        t, w = np.arange(32)[:, None], np.arange(32 // config.stride)[None, :]
        visible = w < (t + 1) // config.stride
        assert selected.shape == (2, *visible.shape) and selected.dtype == bool
        assert not (selected & ~visible).any()
        kept = np.minimum(visible.sum(-1), TINY["indexer_topk"])
        np.testing.assert_array_equal(selected.sum(-1), np.broadcast_to(kept, (2, 32)))


def test_indexer_pairs_reads_each_kept_entry_with_the_one_before():
    """`indexer_pairs`: the entries read are the indexer's top-k and, for each, the entry
    before it (a loop over the unpaired design's `selected`, same weights), never a future
    one; the logits move, since more is read (a compressed layer and V4's csa layer)."""
    for layout in ("sliding,compressed", "swa,csa"):
        tokens = jnp.asarray(np.random.default_rng(1).integers(0, 20, (2, 32)), jnp.int32)
        runs = {}
        for pairs in (False, True):
            config = LMConfig(**{**TINY, "layout": layout, "indexer_topk": 1,
                                 "indexer_pairs": pairs}).decoder  # fmt: skip
            model = Decoder(config, rngs=nnx.Rngs(params=0))
            logits, sown = nnx.jit(trace)(model, tokens)
            runs[pairs] = (
                np.asarray(logits),
                np.asarray(sown["blocks"][1]["attention"]["selected"][0]),
            )
        top, paired = runs[False][1], runs[True][1]
        expected = top.copy()
        for c in range(top.shape[-1] - 1):
            expected[..., c] |= top[..., c + 1]
        np.testing.assert_array_equal(paired, expected)
        assert paired.sum() > top.sum()
        assert np.abs(runs[True][0] - runs[False][0]).max() > 1e-4


def test_config_gives_compressed_layers_the_indexer():
    """`indexer_topk` validates with a compressed layer, builds an indexer there only, makes
    the config `indexed`, and `V4PartOff(layer, "indexer")` applies to that layer and
    removes it; the dense control and staggered windows are refused."""
    config = LMConfig(**TINY)
    assert config.indexed
    model = Decoder(config.decoder, rngs=nnx.Rngs(params=0))
    assert model.blocks[0].attention.indexer is None
    assert model.blocks[1].attention.indexer is not None
    off = V4PartOff(1, "indexer")
    assert off.applies(config) and not V4PartOff(0, "indexer").applies(config)
    edited = off.apply(model)
    assert edited.blocks[1].attention.indexer is None
    assert model.blocks[1].attention.indexer is not None
    assert not LMConfig(**{**TINY, "indexer_topk": 0}).indexed
    with pytest.raises(ConfigError, match="csa or compressed"):
        DecoderConfig(
            vocab=20, layer_kinds=("compressed",), operator="none", v4=V4Switches(indexer_topk=2)
        )
    with pytest.raises(ConfigError, match="stagger"):
        LMConfig(**{**TINY, "operator": "softmax_pool", "stagger": True})


@pytest.mark.parametrize(
    "flags",
    [
        ["--layout", "sliding,dense"],
        ["--layout", "sliding,compressed", "--operator", "none"],
        ["--layout", "sliding,compressed", "--operator", "softmax_pool", "--stagger"],
    ],
)
def test_bad_indexer_flags_exit_2_with_one_line(flags, capsys):
    argv = ["lm", "train", "--seq-len", "32", "--d-model", "16", "--rope-dim", "4",
            "--layers", "2", "--indexer-topk", "2", *flags, "--quiet"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--indexer-topk" in err


@pytest.mark.slow
def test_lm_train_with_an_indexed_compressed_layer(capsys):
    """`weakspots lm train --layout sliding,compressed --indexer-topk 2` trains and reports
    the compressed layer's indexer recall."""
    flags = ("--seq-len 32 --pairs 2 --key-vocab 8 --value-vocab 8 --filler-vocab 4 "
             "--layers 2 --layout sliding,compressed --indexer-topk 2 --d-model 16 --rope-dim 4 "
             "--steps 3 --eval-every 3 --batch 4 --eval-batch 4 --eval-samples 1 --json --quiet")  # fmt: skip
    assert main(["lm", "train", *flags.split()]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["indexer_topk"] == 2
    recall = out["indexer_recall"]
    assert len(recall) == 1 and 0.0 <= recall[0] <= 1.0
    assert np.isfinite(out["final_loss"])

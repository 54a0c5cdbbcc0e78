"""The carry tests' edits (`HideEntries`, `CutLocalEdges`) against independent references, and
`sims.decoder.carry` on a tiny decoder."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.decoder.attention import (
    AbstractCompressor,
    Attention,
    local_visibility,
    make_compressor,
)
from weakspots.idealized.decoder.config import LMConfig, with_design
from weakspots.idealized.decoder.model import init_decoder
from weakspots.idealized.decoder.v4_attention import V4Attention, top_k_mask
from weakspots.sims.decoder import carry, edits
from weakspots.sims.decoder.interventions import evaluation_rows

B, T, D, H, S, W = 3, 24, 16, 2, 4, 8


def _attention(local_window, operator="mean_pool", seed=0):
    rngs = nnx.Rngs(seed)
    compressor = make_compressor(operator, stride=S, heads=H, d_model=D, head_dim=D // H, rngs=rngs)
    return Attention(D, H, compressor=compressor, local_window=local_window, rope_dim=4, rngs=rngs)


def _x(seed=1):
    return jax.random.normal(jax.random.key(seed), (B, T, D))


def test_hiding_no_entry_is_the_intact_layer_and_hiding_all_is_the_local_branch_alone():
    layer, x = _attention(W), _x()
    intact = layer(x)
    layer.hidden_entries = nnx.data(jnp.zeros((B, T // S), bool))
    np.testing.assert_array_equal(layer(x), intact)
    layer.hidden_entries = nnx.data(jnp.ones((B, T // S), bool))
    everything_hidden = layer(x)
    layer.hidden_entries, layer.use_compressed = None, False  # NoCompressedBranch
    np.testing.assert_allclose(everything_hidden, layer(x), rtol=1e-6, atol=1e-6)


class _Shifted(AbstractCompressor):
    """The inner compressor with a learned shift `delta` added to its keys (for gradients)."""

    def __init__(self, inner, shape):
        self.inner, self.stride = inner, inner.stride
        self.delta = nnx.Param(jnp.zeros(shape))

    def __call__(self, x, keys, values):
        k, v = self.inner(x, keys, values)
        return k + self.delta[...], v

    def pooling_weights(self):
        return self.inner.pooling_weights()


def test_hidden_entries_pass_no_gradient_and_the_others_do():
    layer, x = _attention(W), _x()
    layer.hidden_entries = nnx.data(jnp.zeros((B, T // S), bool).at[:, 2].set(True))
    layer.compressor = _Shifted(layer.compressor, (B, T // S, H, D // H))
    grads = nnx.grad(lambda m: jnp.sum(m(x) ** 2))(layer)
    delta = grads["compressor"]["delta"][...]
    assert float(jnp.abs(delta[:, 2]).max()) == 0.0
    assert float(jnp.abs(delta[:, 1]).max()) > 0.0


def test_cutting_local_edges_matches_a_dense_masked_reference():
    layer, x = _attention(W), _x()
    layer.use_compressed = False
    spans = jnp.array([[3, 4], [10, 12], [-1, -1]], jnp.int32)
    layer.cut_spans = nnx.data(spans)
    got = layer(x)
    # the reference: one softmax over the dense local mask, with the cut edges removed
    from weakspots.idealized.decoder.attention import rotate

    positions = jnp.arange(T, dtype=jnp.float32)
    heads = lambda y: y.reshape(B, T, H, D // H)  # noqa: E731
    q = rotate(heads(layer.query(x)), positions, 4)
    k = rotate(heads(layer.key(x)), positions, 4)
    v = heads(layer.value(x))
    t, u = np.arange(T)[:, None], np.arange(T)[None, :]
    lo, hi = np.asarray(spans)[:, 0, None, None], np.asarray(spans)[:, 1, None, None]
    cut = (t > hi) & (u >= lo) & (u <= hi)
    mask = np.asarray(local_visibility(T, W))[None] & ~cut
    scores = jnp.einsum("bthd,buhd->bhtu", q, k) / np.sqrt(D // H)
    probs = jax.nn.softmax(jnp.where(mask[:, None], scores, -1e30), axis=-1)
    want = layer.out(jnp.einsum("bhtu,buhd->bthd", probs, v).reshape(B, T, D))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    layer.cut_spans = None
    assert not np.allclose(layer(x)[1], got[1])  # the cut changed row 1
    np.testing.assert_allclose(layer(x)[2], got[2], rtol=1e-6, atol=1e-6)  # no span: unchanged


def test_v4_hidden_entries_are_gone_for_the_indexer_too():
    scores = jnp.array([[[3.0, 2.0, 1.0, 0.0]] * 2])  # (1, T=2, C=4)
    visible = jnp.ones((2, 4), bool)
    hidden = jnp.array([[True, False, False, False]])
    picked = top_k_mask(scores, visible[None] & ~hidden[:, None], 2)
    np.testing.assert_array_equal(picked[0, 0], [False, True, True, False])


def test_v4_layer_hiding_everything_equals_no_compressed_entries():
    common = dict(kind="csa", ratio=S, local_window=W, rope_dim=4, index_topk=2, index_dim=8,
                  index_heads=2, rngs=nnx.Rngs(0))  # fmt: skip
    layer, x = V4Attention(D, H, D // H, **common), _x()
    intact = layer(x)
    layer.hidden_entries = nnx.data(jnp.zeros((B, T // S), bool))
    np.testing.assert_array_equal(layer(x), intact)
    layer.hidden_entries = nnx.data(jnp.ones((B, T // S), bool))
    hidden = layer(x)
    layer.hidden_entries, layer.compressor = None, None  # no compressed branch at all
    np.testing.assert_allclose(hidden, layer(x), rtol=1e-5, atol=1e-6)


def test_entry_marks_name_the_direct_and_carried_windows():
    config = LMConfig(seq_len=40, stride=4, local_window=8, layers=2, window=8)
    spans = np.array([[5, 6], [7, 8], [-1, -1]])  # inside window 1; straddling windows 1, 2
    marks = lambda test, overlap=False: carry.entry_marks(config, spans, 4, overlap, test)  # noqa: E731
    assert np.flatnonzero(marks("hide_direct")[0]).tolist() == [1]
    assert np.flatnonzero(marks("hide_direct")[1]).tolist() == [1, 2]
    assert np.flatnonzero(marks("hide_direct", True)[0]).tolist() == [1, 2]  # CSA: w pools w-1, w
    # the two halves of an overlapping window: entry w's current half, entry w+1's previous
    assert np.flatnonzero(marks("hide_direct_current", True)[0]).tolist() == [1]
    assert np.flatnonzero(marks("hide_direct_previous", True)[0]).tolist() == [2]
    assert np.flatnonzero(marks("hide_direct_current", True)[1]).tolist() == [1, 2]
    assert np.flatnonzero(marks("hide_direct_previous", True)[1]).tolist() == [2, 3]
    for row in range(3):  # together the direct entries; without overlap, current is direct
        both = marks("hide_direct_current", True)[row] | marks("hide_direct_previous", True)[row]
        np.testing.assert_array_equal(both, marks("hide_direct", True)[row])
        np.testing.assert_array_equal(marks("hide_direct_current")[row], marks("hide_direct")[row])
        assert not marks("hide_direct_previous")[row].any()
    assert np.flatnonzero(marks("hide_next1")[1]).tolist() == [3]
    assert np.flatnonzero(marks("hide_next2")[0]).tolist() == [2, 3]
    assert np.flatnonzero(marks("hide_carry")[0]).tolist() == [2, 3]  # reach 8 = 2 windows
    assert not marks("hide_all")[2].any()


TINY = dict(
    seq_len=40, pairs=4, key_vocab=16, value_vocab=8, filler_vocab=4, d_model=16, heads=2,
    rope_dim=4, window=8, steps=2, eval_every=2, batch=4, eval_batch=8, eval_samples=1,
)  # fmt: skip


@pytest.mark.parametrize("v4", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_carry_tests_of_an_untrained_decoder_are_consistent(v4):
    if v4:
        given = dict(TINY, layers=2, layout="swa,csa", local_window=8, index_dim=4,
                     index_heads=2, q_rank=8, o_rank=4)  # fmt: skip
        config = LMConfig(**with_design("v4", given, set(given)))
    else:
        config = LMConfig(**{**TINY, "seq_len": 56}, layers=2, local_window=8)
    model = init_decoder(config.decoder, jax.random.key(0))
    params = jax.tree.map(lambda a: a[None], nnx.split(model)[1])  # one run
    rows = evaluation_rows(config)
    tests = ("intact", "hide_direct", "hide_all", "resample_all", "cut_local", "off_sink",
             "off_indexer")  # fmt: skip
    out = carry.carry_tests(config, params, tests=tests, rows=rows)
    assert out["local_layers"] == [0, 1] and out["local_reach"] == 8
    assert out["compressed_layers"] == [[1, 4, v4]]
    clean = carry.test_outcomes(config, params, "intact", rows)
    assert out["tests"]["off_sink"]["applies"] is v4  # parts of V4's layers only
    assert out["tests"]["resample_all"]["applies"] is not v4  # T = 40 (V4): no far source
    assert out["tests"]["off_indexer"]["applies"] is v4  # top-8 in the V4 design
    for test, result in out["tests"].items():
        if not result["applies"]:
            continue
        edited = carry.test_outcomes(config, params, test, rows)
        far = rows.far & (
            carry.far_sources(config, rows)[1] if test.startswith("resample") else True
        )
        want = clean[:, far].mean() - edited[:, far].mean()
        assert result["mean_drop"] == pytest.approx(want)
    assert edits.HideEntries(0, None).applies(config) is False  # layer 0 is sliding


@pytest.mark.slow
def test_lm_carry_and_lm_train_read_the_cache_and_give_the_numbers_of_a_fresh_run(tmp_path, capsys):
    import json

    from weakspots.cli import main

    flags = ["--seq-len", "40", "--pairs", "4", "--key-vocab", "16", "--value-vocab", "8",
             "--filler-vocab", "4", "--d-model", "16", "--heads", "2", "--rope-dim", "4",
             "--window", "8", "--local-window", "8", "--layers", "2", "--steps", "2",
             "--eval-every", "2", "--batch", "4", "--eval-batch", "8", "--eval-samples", "1",
             "--seeds", "1", "--json", "--quiet"]  # fmt: skip
    assert main(["lm", "train", *flags]) == 0
    fresh = json.loads(capsys.readouterr().out)
    cache = ["--cache", str(tmp_path)]
    assert main(["lm", "train", *flags, *cache]) == 0  # trains and saves
    assert main(["lm", "train", *flags, *cache]) == 0  # loads
    capsys.readouterr()
    assert main(["lm", "train", *flags, *cache]) == 0
    loaded = json.loads(capsys.readouterr().out)
    for key in ("phase_accuracy", "delta_max", "final_loss", "mean_accuracy"):
        assert loaded[key] == fresh[key], key
    assert main(["lm", "carry", *flags, *cache]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["pooled"]["phase_accuracy"] == fresh["pooled"]["phase_accuracy"]
    assert set(report["tests"]) == set(carry.TESTS) - {"intact"}


def test_no_flags_turn_a_design_switch_off():
    import argparse

    from weakspots.cli import lm

    parser = argparse.ArgumentParser()
    lm.add_lm_flags(parser)
    args = parser.parse_args(["--design", "v4", "--no-shared-kv", "--sink"])
    config = lm.lm_config(args)
    assert config.shared_kv is False and config.sink is True and config.qk_norm is True
    assert lm.lm_config(parser.parse_args(["--design", "v4"])).shared_kv is True


def test_far_sources_move_the_fact_clear_of_every_entry_it_touches():
    config = LMConfig(seq_len=96, pairs=2, stride=4, local_window=8, layers=2, window=8,
                      eval_samples=2)  # fmt: skip
    rows = evaluation_rows(config)
    moved, valid = carry.far_sources(config, rows)
    starts = rows.starts.reshape(-1, rows.starts.shape[-1])
    shift = moved[:, 0] - starts[:, 0]
    assert valid.any() and (~valid & (rows.value_start >= 0)).any()  # some facts cannot move
    assert np.all(np.abs(shift[valid]) == 20)  # whole windows past the reach (8) and the fact (2)
    assert np.all(shift[valid] % 4 == 0) and np.all(shift[~valid] == 0)
    np.testing.assert_array_equal(moved[:, 1:], starts[:, 1:])  # the other facts stay
    spans = carry.fact_spans(config, rows)
    marks = carry.entry_marks(config, spans, 4, False, "hide_all")
    lo, hi = moved[:, 0], moved[:, 0] + config.task.fact_len - 1 + 8  # the moved fact and its carry
    for row in np.flatnonzero(valid):
        windows = np.flatnonzero(marks[row])
        assert not np.any((windows * 4 <= hi[row]) & (windows * 4 + 3 >= lo[row]))


def test_pair_indexer_at_inference_is_the_design_paired_in_training():
    """`PairIndexer` on a decoder trained without pairs computes the logits of the same weights
    built with `indexer_pairs` (and not those without); the `pair_indexer` test applies to an
    indexer not paired in training only, and its outcomes are the paired design's."""
    given = dict(TINY, layers=2, layout="sliding,compressed", local_window=8, index_dim=4,
                 index_heads=2, indexer_topk=1)  # fmt: skip
    config = LMConfig(**given)
    paired_config = config.replace(indexer_pairs=True)
    model = init_decoder(config.decoder, jax.random.key(0))
    params = nnx.split(model)[1]
    paired = nnx.merge(nnx.split(init_decoder(paired_config.decoder, jax.random.key(0)))[0], params)
    tokens = jnp.asarray(
        np.random.default_rng(0).integers(0, config.task.vocab, (2, 40)), jnp.int32
    )
    edited = edits.apply_edits(model, carry.pair_switches(config))
    np.testing.assert_array_equal(np.asarray(edited(tokens)), np.asarray(paired(tokens)))
    assert np.abs(np.asarray(edited(tokens) - model(tokens))).max() > 1e-4
    assert [e.layer for e in carry.pair_switches(config)] == [1]
    assert carry.pair_switches(paired_config) == ()
    rows = evaluation_rows(config)
    stacked = jax.tree.map(lambda a: a[None], params)
    np.testing.assert_array_equal(
        carry.test_outcomes(config, stacked, "pair_indexer", rows),
        carry.test_outcomes(paired_config, stacked, "intact", rows),
    )

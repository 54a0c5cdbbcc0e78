"""Intermediates on request (`idealized.decoder.sow`): what a capture collects, and that a
plain call collects, stores and computes nothing extra."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.idealized.decoder.config import LM_HYPER_FIELDS, DecoderConfig, LMConfig, V4Switches
from weakspots.idealized.decoder.model import Decoder, trace
from weakspots.idealized.decoder.sow import capturing, sow
from weakspots.idealized.decoder.v4_attention import IndexerStat
from weakspots.idealized.toy.config import HYPER_FIELDS, TrainConfig
from weakspots.sims.decoder.train import LMHyper
from weakspots.sims.toy.train import Hyper

CONFIG = DecoderConfig(
    vocab=12, layer_kinds=("csa",), d_model=16, heads=2, stride=4, window=4, rope_dim=4,
    v4=V4Switches(hca_stride=8, indexer_topk=2),
)  # fmt: skip
T = 24


def decoder() -> Decoder:
    return Decoder(CONFIG, rngs=nnx.Rngs(params=0))


def tokens() -> jax.Array:
    return jnp.asarray(np.random.default_rng(0).integers(0, CONFIG.vocab, (2, T)), jnp.int32)


def leaves(model: nnx.Module) -> dict:
    return {path: np.asarray(v.get_value()) for path, v in nnx.to_flat_state(nnx.state(model))}


def test_a_plain_call_stores_nothing_and_equals_the_traced_logits():
    """A plain call adds no variable to the model (flax's `sow` outside a capture would,
    with a warning the suite turns into an error; `nnx.jit` carries a module's new
    variables back out), and its logits are the traced call's."""
    model = decoder()
    before = leaves(model)
    plain = nnx.jit(lambda m, t: m(t))(model, tokens())
    after = leaves(model)
    assert before.keys() == after.keys()
    traced, sown = nnx.jit(trace)(model, tokens())
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(traced))
    assert leaves(model).keys() == before.keys()  # the capture leaves nothing behind
    flat = {path[-1] for path, _ in nnx.to_flat_state(sown)}
    assert {"residual", "attention", "compressed_keys", "compressed_values"} <= flat


def test_each_capture_collects_its_own_kind():
    """Capturing `IndexerStat` collects the indexer's statistics (its one csa layer) and none of
    the `nnx.Intermediate` values; capturing `nnx.Intermediate` collects no statistics."""
    model = decoder()
    _, stats = nnx.jit(nnx.capture(lambda m, t: m(t), IndexerStat))(model, tokens())
    names = [path[-1] for path, _ in nnx.to_flat_state(stats)]
    assert sorted(names) == ["indexer_kl", "indexer_recall"]
    _, sown = nnx.jit(trace)(model, tokens())
    assert not {"indexer_kl", "indexer_recall"} & {p[-1] for p, _ in nnx.to_flat_state(sown)}


def test_sow_calls_its_thunk_only_when_captured():
    calls = []

    class Probe(nnx.Module):
        def __call__(self, x):
            assert capturing(self) == bool(calls_expected)
            sow(self, "x", lambda: calls.append(1) or x)
            return x

    probe = Probe()
    calls_expected = False
    probe(jnp.ones(2))
    assert calls == []
    calls_expected = True
    _, sown = nnx.capture(probe, nnx.Intermediate)(jnp.ones(2))
    assert calls == [1]
    np.testing.assert_array_equal(np.asarray(sown["x"][0]), np.ones(2))


def test_stacked_hyperparameters_are_the_configs_own_fields():
    """The stacked records hold exactly the fields that configs leave out of their
    compilation key (`HYPER_FIELDS`, `LM_HYPER_FIELDS`), each run's value in its row."""
    for cls, fields in ((Hyper, HYPER_FIELDS), (LMHyper, LM_HYPER_FIELDS)):
        assert {f.name for f in dataclasses.fields(cls)} == set(fields)
    configs = [TrainConfig(seed=3, lr=0.5), TrainConfig(seed=7, lr=2.0)]
    hyper = Hyper.stack(configs)
    np.testing.assert_array_equal(np.asarray(hyper.seed), [3, 7])
    assert hyper.seed.dtype == jnp.uint32 and hyper.lr.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(hyper.lr), [0.5, 2.0])
    lm = LMHyper.stack([LMConfig(seed=1, lr=1e-3), LMConfig(seed=2, lr=3e-3)])
    np.testing.assert_array_equal(np.asarray(lm.seed), [1, 2])
    np.testing.assert_allclose(np.asarray(lm.lr), [1e-3, 3e-3], rtol=1e-6)

"""`idealized.operators.registry`: a new operator is one class and one `register` line.

The test operator `last_pool` (each chunk's last token) is registered here, run through the
toy (`sims.toy.train.train_many`), the decoder (`LMConfig`, a forward pass and a few training
steps) and the command line (`weakspots train --operator last_pool`), then unregistered.
"""

import json
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.cli import main
from weakspots.idealized import operators
from weakspots.idealized.decoder import attention
from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.operators.base import DECODER, TOY, AbstractOperator
from weakspots.idealized.operators.registry import lookup, operator_names
from weakspots.idealized.toy.config import ConfigError, ModelConfig, TrainConfig
from weakspots.idealized.toy.model import init_model
from weakspots.sims.decoder import edits
from weakspots.sims.decoder import train as lm_train
from weakspots.sims.toy.train import train_many

STRIDE = 4
TOY_FLAGS = ["--stride", "4", "--chunks", "8", "--dim", "8", "--gain", "8", "--steps", "10"]
TOY_FLAGS += ["--eval-every", "5", "--eval-samples", "64", "--batch", "16"]
LM = dict(
    seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, layers=2, d_model=16,
    heads=2, rope_dim=4, window=4, steps=3, eval_every=3, batch=4, eval_batch=8, eval_samples=1,
)  # fmt: skip


def last_token(keys):
    """`K[c] = x[c, s - 1]`."""
    return keys[:, -1]


def one_hot_last(heads: int, stride: int):
    return jnp.broadcast_to(jax.nn.one_hot(stride - 1, stride, dtype=jnp.float32), (heads, stride))


class LastPool(AbstractOperator):
    """Each chunk's last token: phase-weighted, with all its weight on the last phase."""

    heads: int = eqx.field(static=True)
    stride: int = eqx.field(static=True)
    name: ClassVar[str] = "last_pool"
    phase_weighted: ClassVar[bool] = True
    pool: ClassVar = staticmethod(last_token)

    @classmethod
    def init(cls, key, config, init_scale, dtype):
        return cls(heads=config.heads, stride=config.slots)

    def __call__(self, keys):
        return jnp.broadcast_to(last_token(keys), (self.heads, *keys.shape[::2]))

    def phase_weights(self):
        return one_hot_last(self.heads, self.stride)

    @classmethod
    def decoder_pooling_weights(cls, params, *, stride, heads, overlap):
        return one_hot_last(heads, stride)


@pytest.fixture
def last_pool():
    operators.register(LastPool)
    try:
        yield LastPool
    finally:
        operators.unregister(LastPool.name)


def test_the_registry_is_what_the_consumers_read():
    assert operator_names(TOY)[:6] == (
        "softmax_pool", "mean_pool", "linear", "max_pool", "low_rank", "deepseek_v4"
    )  # fmt: skip
    assert set(operator_names(DECODER)) == set(operator_names(TOY)) - {"linear"} | {"none"}
    for name in operator_names(TOY):
        assert ModelConfig(operator=name).uses_gram == lookup(name).phase_weighted
        assert lookup(name).needs_keys() == (not lookup(name).phase_weighted)
    for name in operator_names(DECODER):
        assert edits.position_parameters(name) == lookup(name).position_parameters
    # mean_pool: a distribution over phases (the structural config accepts the regulariser),
    # but a fixed one, so a training run refuses it, in both families.
    assert ModelConfig(operator="mean_pool", phase_entropy=0.1).phase_entropy == 0.1
    for make in (lambda: TrainConfig(phase_entropy=0.1, operator="mean_pool"),
                 lambda: LMConfig(phase_entropy=0.1, operator="mean_pool", **LM)):  # fmt: skip
        with pytest.raises(ConfigError, match="^--phase-entropy: mean_pool's pooling weights are fixed"):
            make()
    with pytest.raises(ValueError, match="already registered"):
        operators.register(operators.SoftmaxPool)


def test_a_new_operator_trains_in_the_toy(last_pool):
    config = TrainConfig(operator="last_pool", stride=STRIDE, chunks=8, dim=8, heads=2, gain=8.0,
                         steps=10, eval_every=5, eval_samples=256, batch=16)  # fmt: skip
    assert config.uses_gram  # phase-weighted: the logits from inner products alone
    model = init_model(jax.random.key(0), config.model, 8.0, 0.0)
    keys = jax.random.normal(jax.random.key(1), (8, STRIDE, 8))
    np.testing.assert_array_equal(model.compressor(keys), np.stack([np.asarray(keys)[:, -1]] * 2))
    results = train_many([config, config.replace(seed=1)])
    for result in results:
        accuracy = result.history.phase_accuracy[-1]
        # The last phase is the only one pooled: its needles are found, the others at chance.
        assert accuracy[-1] > 0.9 and accuracy[:-1].max() < 0.5, accuracy
        np.testing.assert_array_equal(result.history.pooling_weights[-1], one_hot_last(2, STRIDE))


@pytest.mark.slow
def test_a_new_operator_runs_in_the_decoder(last_pool):
    config = LMConfig(operator="last_pool", **LM)
    layer = attention.make_compressor(
        "last_pool", stride=STRIDE, heads=2, d_model=16, head_dim=8, rngs=nnx.Rngs(0)
    )
    keys, values = (jax.random.normal(jax.random.key(i), (3, 10, 2, 8)) for i in (0, 1))
    ck, cv = layer(None, keys, values)
    np.testing.assert_array_equal(ck, keys[:, STRIDE - 1 : 8 : STRIDE])  # the partial window drops
    np.testing.assert_array_equal(cv, values[:, STRIDE - 1 : 8 : STRIDE])
    decoder = Decoder(config.decoder, rngs=nnx.Rngs(0))
    logits = decoder(jnp.zeros((2, config.seq_len), jnp.int32))
    assert logits.shape == (2, config.seq_len, config.decoder.vocab) and bool(jnp.isfinite(logits).all())
    weights = [w for w in decoder.pooling_weights() if w is not None]
    assert weights and all(np.array_equal(w, one_hot_last(2, config.stride)) for w in weights)
    (result,) = lm_train.train_many([config])
    assert np.isfinite(result.step_loss).all() and result.step_loss.shape == (config.steps,)


def test_a_new_operator_is_a_command_line_choice(last_pool, capsys):
    assert main(["train", *TOY_FLAGS, "--operator", "last_pool", "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["operator"] == "last_pool"
    assert int(np.argmax(out["phase_accuracy"])) == STRIDE - 1


def test_an_unregistered_operator_is_refused(capsys):
    assert "last_pool" not in operator_names()
    for make in (lambda: TrainConfig(operator="last_pool"),
                 lambda: LMConfig(operator="last_pool", **LM),
                 lambda: lookup("last_pool"),
                 lambda: attention.make_compressor("last_pool", stride=4, heads=2, d_model=16,
                                                   head_dim=8, rngs=nnx.Rngs(0))):  # fmt: skip
        with pytest.raises(ConfigError, match="^--operator: must be one of .*got 'last_pool'"):
            make()
    with pytest.raises(ConfigError, match="^--operator"):
        lookup("linear", DECODER)  # the toy's only
    assert main(["train", *TOY_FLAGS, "--operator", "last_pool", "--quiet"]) == 2
    assert "--operator" in capsys.readouterr().err

"""The phase-entropy regulariser of decoder training (`sims.decoder.train.training_loss`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.toy.config import ConfigError
from weakspots.sims.decoder import train as lm_train

TINY = LMConfig(
    seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, layers=2, d_model=16, heads=2,
    rope_dim=4, window=4, steps=4, eval_every=2, batch=4, eval_batch=8, eval_samples=1,
    operator="softmax_pool",
)  # fmt: skip


def params_with_logits(config, logits):
    """A fresh decoder's state with the compressed layer's pooling logits set to `logits` (H, s)."""
    model = Decoder(config.decoder, rngs=nnx.Rngs(0))
    model.blocks[1].attention.compressor.pooling_logits[...] = jnp.asarray(logits, jnp.float32)
    return nnx.split(model)[1]


def logits_of(params):
    return params["blocks"][1]["attention"]["compressor"]["pooling_logits"][...]


def test_entropy_gradient_is_the_closed_form():
    """d H(softmax(u)) / du_j = -p_j (log p_j + H), averaged over the H heads."""
    u = np.random.default_rng(0).standard_normal((TINY.heads, TINY.stride))
    params = params_with_logits(TINY, u)
    grad = jax.grad(lambda p: lm_train.pooling_entropy(TINY, p))(params)
    p = np.exp(u - u.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    entropy = -(p * np.log(p)).sum(-1, keepdims=True)
    want = -p * (np.log(p) + entropy) / TINY.heads
    # float32 softmax and log against float64: a few ulps of O(0.1) numbers
    np.testing.assert_allclose(np.asarray(logits_of(grad)), want, atol=1e-6, rtol=0)


def test_the_term_alone_pushes_pooling_toward_uniform():
    """Descent on the regulariser `-W * pooling_entropy` (what `training_loss` adds: tested
    below) raises the entropy toward its maximum, log s."""
    config = TINY.replace(phase_entropy=0.5)
    u = 2.0 * np.random.default_rng(1).standard_normal((TINY.heads, TINY.stride))
    params = params_with_logits(config, u)

    def term(p):
        return -config.phase_entropy * lm_train.pooling_entropy(config, p)

    before = float(lm_train.pooling_entropy(config, params))
    descend = jax.jit(lambda p: jax.tree.map(lambda x, g: x - 0.5 * g, p, jax.grad(term)(p)))
    for _ in range(20):
        params = descend(params)
    after = float(lm_train.pooling_entropy(config, params))
    assert after > before + 0.05, (before, after)
    assert after <= np.log(config.stride) + 1e-6  # the maximum: uniform pooling


@pytest.mark.slow
def test_zero_weight_leaves_training_bit_identical():
    """At weight 0 the step's objective traces to the very program of `sequence_loss` (so
    training is bit-identical); at weight W it adds `-W * pooling_entropy`."""
    params = nnx.split(Decoder(TINY.decoder, rngs=nnx.Rngs(3)))[1]
    batch = lm_train.held_out_batch(TINY)  # compiled: quicker than sampling op by op
    plain = jax.make_jaxpr(jax.grad(lambda p: lm_train.sequence_loss(TINY, p, batch)))(params)
    objective = jax.make_jaxpr(jax.grad(lambda p: lm_train.training_loss(TINY, p, batch)))(params)
    assert str(plain) == str(objective)
    skewed = params_with_logits(TINY, np.eye(TINY.heads, TINY.stride))
    on = TINY.replace(phase_entropy=1.0)
    entropy = float(lm_train.pooling_entropy(on, skewed))
    assert entropy < np.log(TINY.stride) - 0.1  # away from uniform: the term is not 0
    added = lm_train.training_loss(on, skewed, batch) - lm_train.sequence_loss(on, skewed, batch)
    assert float(added) == pytest.approx(-entropy, rel=1e-6)  # float32 subtraction


@pytest.mark.parametrize(
    "fields",
    [
        dict(phase_entropy=-0.1),
        dict(phase_entropy=float("inf")),
        dict(phase_entropy=0.1, operator="mean_pool"),
        dict(phase_entropy=0.1, operator="max_pool"),
        dict(phase_entropy=0.1, operator="none"),
    ],
)
def test_phase_entropy_is_validated(fields):
    with pytest.raises(ConfigError) as error:
        TINY.replace(**fields)
    assert error.value.field == "phase_entropy"

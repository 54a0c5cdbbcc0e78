"""Staggered compressed windows (`idealized.decoder.attention`, `stagger`) against a loop reference."""

import jax.numpy as jnp
import numpy as np
import pytest
from test_lm_attention import (  # tests/decoder/ is on sys.path (rootdir import)
    ATOL,
    HD,
    STRIDE,
    D,
    H,
    T,
    forward,
    make_layer,
    reference,
    tokens,  # noqa: F401 (fixture)
)

from weakspots import theory
from weakspots.idealized.decoder import attention
from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.toy.config import ConfigError

OFFSETS = attention.stagger_offsets(STRIDE, H)  # (0, 2)


def staggered_layer(operator, *, local_window=0, offsets=OFFSETS):
    layer = make_layer(operator, local_window=local_window)
    layer.offsets = tuple(offsets)
    return layer


@pytest.mark.parametrize(
    "operator, local_window",
    [("mean_pool", 0), ("softmax_pool", 3), ("low_rank", 0), ("max_pool", 0)],
)
def test_staggered_layer_matches_loop_reference(operator, local_window, tokens):  # noqa: F811
    layer = staggered_layer(operator, local_window=local_window)
    got = np.asarray(forward(layer, tokens))[0]
    want = reference(
        layer, operator, tokens[0], stride=STRIDE, local_window=local_window, offsets=OFFSETS
    )
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_stagger_with_zero_offsets_is_the_plain_layer(tokens):  # noqa: F811
    plain = make_layer("softmax_pool", local_window=3)
    zero = staggered_layer("softmax_pool", local_window=3, offsets=(0,) * H)
    # the same parameters and arithmetic up to the per-head RoPE split: float32 rounding only
    np.testing.assert_allclose(
        np.asarray(forward(zero, tokens)), np.asarray(forward(plain, tokens)), atol=1e-6, rtol=0
    )


def test_no_head_sees_an_incomplete_window(tokens):  # noqa: F811
    """Changing token u changes head h's output only at t = u (its own query) and from the
    end of head h's window holding u on (never, when u precedes head h's first window)."""
    layer = staggered_layer("mean_pool")
    layer.out.kernel[...] = jnp.eye(D, dtype=jnp.float32)  # the output is the heads side by side
    for u in (1, 5, 9):
        changed = tokens.at[0, u].add(5.0)
        diff = np.abs(np.asarray(forward(layer, changed) - forward(layer, tokens)))[0]
        for h, o in enumerate(OFFSETS):
            head = diff[:, h * HD : (h + 1) * HD].max(axis=-1)
            complete = o + ((u - o) // STRIDE + 1) * STRIDE - 1 if u >= o else T
            complete = T if complete >= T else complete
            quiet = np.r_[0:u, u + 1 : complete]
            assert np.all(head[quiet] == 0.0), (u, h)
            assert np.all(head[complete:] > 1e-4), (u, h)


def test_staggered_visibility_and_offsets():
    np.testing.assert_array_equal(
        attention.stagger_offsets(8, 4), theory.stagger_offsets(8, 4)
    )  # one definition of the shift h s // H, in the toy's theory and the decoder
    mask = np.asarray(attention.staggered_visibility(12, 4, (0, 2)))
    np.testing.assert_array_equal(mask[0], np.asarray(attention.compressed_visibility(12, 4)))
    for t in range(12):
        np.testing.assert_array_equal(mask[1, t], [2 + 4 * (w + 1) - 1 <= t for w in range(3)])


@pytest.mark.parametrize(
    "fields, flag",
    [
        (dict(heads=1), "stagger"),
        (dict(stride=1, seq_len=32), "stagger"),
        (dict(operator="none"), "stagger"),
        (dict(operator="deepseek_v4"), "stagger"),
    ],
)
def test_stagger_rejects_what_it_cannot_shift(fields, flag):
    with pytest.raises(ConfigError) as error:
        LMConfig(stagger=True, **fields)
    assert error.value.field == flag

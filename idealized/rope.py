"""The RoPE base and rotary frequencies shared by the model, DeepSeek-V4's compressor and theory."""

import numpy as np

ROPE_THETA = 10000.0
"""RoPE base: pair i turns at `ROPE_THETA ** (-2i / rope_dim)` per token."""


def rope_frequencies(rope_dim: int, rope_theta: float = ROPE_THETA, *, dtype=None, xp=np):
    """`theta_i = rope_theta ** (-2i / rope_dim)`, one per rotary pair, i < rope_dim / 2.

    `xp` is the array module (numpy for theory's closed forms, jax.numpy inside the model).
    Returns `(rope_dim // 2,)`.
    """
    return rope_theta ** (-xp.arange(0, rope_dim, 2, dtype=dtype) / rope_dim)

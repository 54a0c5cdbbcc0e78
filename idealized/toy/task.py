"""The needle-retrieval task (docs/theory.md §2).

Keys `x[c, j] ~ N(0, I/d)` i.i.d.; the needle sits at chunk `c*` (uniform) and phase
`phi` (uniform, or fixed for phase-resolved evaluation); the query is `q = x[c*, phi]`;
the target is `c*`.

Two exact samplers. `keys=True` draws the real keys (`B N s d` numbers). Otherwise
only the inner products the logits of phase-weighted operators need are drawn:
conditional on `q`, every other key's `q . x[c, j]` is i.i.d. `N(0, |q|^2 / d)`, and
`|q|^2 ~ chi^2_d / d`, so `gram` has exactly the distribution of `q . x` at
`d`-times lower cost (`B N s` numbers).

Both draw their normals with `standard_normal`: the construction of
`jax.random.normal` (a uniform from 23 random bits, then `sqrt(2) erfinv`), fed with
both 32-bit words of each counter-mode hash where `jax.random.normal` keeps one (the
partitionable threefry XORs its two output words), which halves the generator's work.
The norms come from `chi_square` (exact, no rejection loop: quicker to compile).
The words come from `threefry_words`, the same Threefry-2x32 hash `jax.random.bits`
applies, unrolled so that XLA fuses hash, normal map and scaling into one pass (on
CPU jax lowers the hash as a loop, which writes the whole array out five times):
the same bits, about twice as fast (`benchmarks/operator_step.py`). The key splits and
the needles' chunks and phases use the same unrolled hash (`split_key`,
`random_integers`: bit for bit `jax.random.split` and `jax.random.randint`), since on
CPU each rolled hash is a loop of small kernels that a training step runs a dozen times.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from weakspots.idealized.toy.config import ModelConfig

MAX_ERLANG = 64  # chi_square sums at most this many exponentials per draw


def standard_normal(key: PRNGKeyArray, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
    """Standard normals of `shape`, distributed exactly as `jax.random.normal`'s, at half the bits.

    Each 64-bit draw gives two 32-bit words; each word becomes a uniform on `(-1, 1)`
    from its top 23 bits and then `sqrt(2) erfinv(u)`, as in `jax.random.normal`.
    Without 64-bit types (`jax_enable_x64` off) it is `jax.random.normal`.
    """
    if not jax.config.jax_enable_x64 or jnp.dtype(dtype).itemsize > 4:
        return jax.random.normal(key, shape, dtype)
    return normal_from_bits(random_words(key, shape)).astype(dtype)


def random_words(key: PRNGKeyArray, shape: tuple[int, ...]) -> Array:
    """Uniform 32-bit words of `shape`, two from each 64-bit draw (`jax_enable_x64` on).

    Bit for bit the words of `jax.random.bits(key, (ceil(size / 2),), uint64)` read as
    pairs of 32-bit words (low word first); computed by `threefry_words` where that is
    the generator behind `jax.random.bits`, else by `jax.random.bits` itself.
    """
    size = math.prod(shape)
    draws = -(-size // 2)
    if _unrolled_threefry_applies(key, draws):
        high, low = threefry_words(jax.random.key_data(key), draws)
        return jnp.stack([low, high], axis=-1).reshape(-1)[:size].reshape(shape)
    wide = jax.random.bits(key, (draws,), jnp.uint64)
    return jax.lax.bitcast_convert_type(wide, jnp.uint32).reshape(-1)[:size].reshape(shape)


THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
THREEFRY_PARITY = np.uint32(0x1BD11BDA)


def _unrolled_threefry_applies(key: PRNGKeyArray, draws: int) -> bool:
    """`threefry_words` reproduces `jax.random.bits` for this key: partitionable threefry keys."""
    return (
        jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
        and str(jax.random.key_impl(key)) == "threefry2x32"
        and jax.config.jax_threefry_partitionable
        and draws < 2**32  # the high half of every counter is zero
    )


def split_key(key: PRNGKeyArray, num: int = 2) -> PRNGKeyArray:
    """`jax.random.split(key, num)` for one key, bit for bit, with the hash unrolled.

    Partitionable Threefry splits by hashing the counters `(0, i)`: the `i`-th new key
    is the pair of words `threefry_words` gives for draw `i`.
    """
    if key.shape or not _unrolled_threefry_applies(key, num):
        return jax.random.split(key, num)
    high, low = threefry_words(jax.random.key_data(key), num)
    return jax.random.wrap_key_data(jnp.stack([high, low], axis=-1), impl=jax.random.key_impl(key))


def random_integers(
    key: PRNGKeyArray, shape: tuple[int, ...], minval: int, maxval: int
) -> Int[Array, "*shape"]:
    """`jax.random.randint(key, shape, minval, maxval)` (default integer type), bit for bit.

    jax's construction: two words of the integer type's width from the two halves of a
    split, reduced modulo the span as `(high % span) * (2**nbits % span) + low % span`;
    here the words come from the unrolled hash.
    """
    dtype = jnp.dtype(jax.dtypes.canonicalize_dtype(int))
    size = math.prod(shape)
    if key.shape or not _unrolled_threefry_applies(key, max(size, 2)):
        return jax.random.randint(key, shape, minval, maxval)
    nbits = dtype.itemsize * 8
    unsigned = jnp.dtype(f"uint{nbits}")
    k_high, k_low = split_key(key)

    def words(k):  # jax.random.bits(k, shape, unsigned) of partitionable Threefry
        high, low = threefry_words(jax.random.key_data(k), size)
        if nbits == 64:
            wide = (high.astype(unsigned) << np.uint64(32)) | low.astype(unsigned)
        else:
            wide = high ^ low
        return wide.reshape(shape)

    span = np.asarray(max(maxval - minval, 1), unsigned)
    multiplier = np.asarray(2 ** (nbits // 2) % int(span), unsigned)
    multiplier = (multiplier * multiplier) % span
    offset = ((words(k_high) % span) * multiplier + words(k_low) % span) % span
    return (minval + offset.astype(dtype)).astype(dtype)


def threefry_words(key_data: Array, draws: int) -> tuple[Array, Array]:
    """The high and low 32-bit words of `draws` 64-bit draws of partitionable Threefry-2x32.

    Draw `i` hashes the counter `(0, i)` under the key `key_data = (k1, k2)`: 20 rounds of
    add-rotate-xor with a key injection every 4 (Salmon et al. 2011, as in jax's
    `threefry2x32` lowering), written out in full so that it fuses with its consumer.
    """
    k1, k2 = key_data[0], key_data[1]
    schedule = (k1, k2, k1 ^ k2 ^ THREEFRY_PARITY)
    high = jnp.broadcast_to(k1, (draws,))
    low = jax.lax.iota(jnp.uint32, draws) + k2
    for block in range(5):
        for r in THREEFRY_ROTATIONS[block % 2]:
            high = high + low
            low = high ^ ((low << np.uint32(r)) | (low >> np.uint32(32 - r)))
        high = high + schedule[(block + 1) % 3]
        low = low + schedule[(block + 2) % 3] + np.uint32(block + 1)
    return high, low


def chi_square(key: PRNGKeyArray, dof: int, shape: tuple[int, ...], dtype=jnp.float32) -> Array:
    """`chi^2_dof` draws, exactly, without rejection sampling (for `dof <= 2 * MAX_ERLANG`).

    `chi^2_2` is exponential with mean 2, `-2 log U`, so `chi^2_dof` is a sum of
    `dof // 2` of those plus one squared normal when `dof` is odd. `jax.random.chisquare`
    samples a gamma by rejection, a loop that is slow to compile in every program that
    draws a batch; past `MAX_ERLANG` uniforms per draw it is the cheaper one.
    """
    if dof // 2 > MAX_ERLANG or not jax.config.jax_enable_x64 or jnp.dtype(dtype).itemsize > 4:
        return jax.random.chisquare(key, dof, shape, dtype)
    k_exp, k_odd = split_key(key)
    words = random_words(k_exp, (*shape, dof // 2))
    one = jax.lax.bitcast_convert_type((words >> 9) | np.uint32(0x3F800000), jnp.float32)
    total = -2.0 * jnp.sum(jnp.log(2.0 - one), axis=-1)  # 2 - one = 1 - U lies in (0, 1]
    if dof % 2:
        total = total + standard_normal(k_odd, shape, jnp.float32) ** 2
    return total.astype(dtype)


def normal_from_bits(words: Array) -> Array:
    """`jax.random.normal`'s float32 map from uniform 32-bit words to standard normals."""
    one = jax.lax.bitcast_convert_type((words >> 9) | np.uint32(0x3F800000), jnp.float32)
    low = np.nextafter(np.float32(-1.0), np.float32(1.0))
    uniform = jnp.maximum(low, (one - 1.0) * (1.0 - low) + low)
    return np.float32(np.sqrt(2.0)) * jax.lax.erf_inv(uniform)


class Batch(eqx.Module):
    """A batch of retrieval problems; exactly one of `gram` or (`keys`, `query`) is set."""

    target: Int[Array, " B"]
    phase: Int[Array, " B"]
    gram: Float[Array, "B N s"] | None = None
    keys: Float[Array, "B N s d"] | None = None
    query: Float[Array, "B d"] | None = None
    rope_norms: Float[Array, "B R1"] | None = None
    """With `rope_anchor` on the inner-product path: the query's squared norm split into its
    non-rotary channels and each rotary pair (`idealized.toy.model.anchored_self_product`)."""


def sample_batch(
    key: PRNGKeyArray,
    config: ModelConfig,
    batch: int,
    *,
    keys: bool,
    phase: int | Int[Array, ""] | None = None,
    dtype=jnp.float32,
) -> Batch:
    """`batch` needles; `phase=None` draws phases uniformly, else every needle sits at `phase`."""
    N, s, d = config.chunks, config.stride, config.dim
    k_target, k_phase, k_keys, k_norm = split_key(key, 4)
    target = random_integers(k_target, (batch,), 0, N)
    if phase is None:
        phases = random_integers(k_phase, (batch,), 0, s)
    else:
        phases = jnp.full((batch,), phase, dtype=jnp.int32)
    if keys:
        rows = jnp.arange(batch)
        x = standard_normal(k_keys, (batch, N, s, d), dtype) / jnp.sqrt(jnp.asarray(d, dtype))
        return Batch(target=target, phase=phases, keys=x, query=x[rows, target, phases])
    rope_norms = None
    if config.rope_anchor:  # |q|^2 = plain part + one chi^2_2 / d per rotary pair, exactly
        pairs = config.rope_dim // 2
        k_norm, k_pairs = split_key(k_norm)
        plain = jnp.zeros((batch, 1), dtype)
        if d > config.rope_dim:
            plain = chi_square(k_norm, d - config.rope_dim, (batch, 1), dtype) / d
        rope_norms = jnp.concatenate(
            [plain, chi_square(k_pairs, 2, (batch, pairs), dtype) / d], axis=1
        )
        norm2 = jnp.sum(rope_norms, axis=1)
    else:
        norm2 = chi_square(k_norm, d, (batch,), dtype) / d
    scale = jnp.sqrt(norm2 / d)[:, None, None]
    gram = scale * standard_normal(k_keys, (batch, N, s), dtype)
    gram = gram.at[jnp.arange(batch), target, phases].set(norm2)
    return Batch(target=target, phase=phases, gram=gram, rope_norms=rope_norms)

"""`idealized.decoder.attention` against a loop reference of the same layer and against causal attention."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.decoder import attention
from weakspots.idealized.deepseek_v4 import deepseek_v4

T, D, H, STRIDE, ROPE = 16, 8, 2, 4, 2
HD = D // H
ATOL = 2e-5  # float32 layer against a float64 loop; outputs are O(1) sums of ~20 terms
OPERATORS = ("mean_pool", "softmax_pool", "max_pool", "low_rank", "deepseek_v4")


def make_layer(operator, *, stride=STRIDE, local_window=0, overlap=False, seed=0):
    """A layer with every parameter random (pooling parameters included, not at their init)."""

    def build():
        rngs = nnx.Rngs(0)
        compressor = attention.make_compressor(
            operator, stride=stride, heads=H, d_model=D, head_dim=HD, rank=2, overlap=overlap,
            rngs=rngs,
        )  # fmt: skip
        return attention.Attention(
            D, H, compressor=compressor, local_window=local_window, rope_dim=ROPE, rngs=rngs
        )

    graph, state = nnx.split(nnx.eval_shape(build))  # shapes only: no initialiser runs
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree.flatten(state)
    leaves = [jnp.asarray(0.5 * rng.standard_normal(x.shape), jnp.float32) for x in leaves]
    return nnx.merge(graph, jax.tree.unflatten(treedef, leaves))


def forward(layer, x):
    """The layer's output, compiled as one program (quicker than op-by-op dispatch)."""
    graph, state = nnx.split(layer)
    return jax.jit(lambda st, x: nnx.merge(graph, st)(x))(state, x)


_pure_deepseek_v4 = jax.jit(deepseek_v4, static_argnames=("ratio", "overlap"))


def rope_np(y, position):
    """Interleaved RoPE of the last ROPE channels of one head vector."""
    y = y.copy()
    start = y.shape[-1] - ROPE
    for i in range(ROPE // 2):
        a, b = y[start + 2 * i], y[start + 2 * i + 1]
        angle = position * 10000.0 ** (-2 * i / ROPE)
        y[start + 2 * i] = a * math.cos(angle) - b * math.sin(angle)
        y[start + 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return y


def window_entry(layer, operator, x, k, v, w, h, stride):
    """Compressed key and value of window w, head h, from that window's tokens alone."""
    comp = layer.compressor
    rows = slice(w * stride, (w + 1) * stride)
    kw, vw = k[rows, h], v[rows, h]
    if operator == "mean_pool":
        return kw.mean(0), vw.mean(0)
    if operator == "softmax_pool":
        a = np.asarray(comp.pooling_logits[...], np.float64)[h]
        p = np.exp(a - a.max()) / np.exp(a - a.max()).sum()
        return p @ kw, p @ vw
    if operator == "max_pool":
        proj = np.asarray(comp.projection[...], np.float64)[h]
        return (kw @ proj).max(0), (vw @ proj).max(0)
    if operator == "low_rank":
        left = np.asarray(comp.left[...], np.float64)[h]
        right = np.asarray(comp.right[...], np.float64)[h]
        maps = [np.eye(HD) / stride + right[j] @ left[j].T for j in range(stride)]
        return sum(kw[j] @ maps[j] for j in range(stride)), sum(
            vw[j] @ maps[j] for j in range(stride)
        )
    if (
        operator == "deepseek_v4"
    ):  # the pure operator on the window (and, with overlap, the one before)
        first = max(w - 1, 0) if comp.overlap else w
        tokens = x[first * stride : (w + 1) * stride]
        entry = _pure_deepseek_v4(
            jnp.asarray(tokens),
            jnp.asarray(comp.wkv[...], jnp.float64)[h],
            jnp.asarray(comp.wgate[...], jnp.float64)[h],
            jnp.asarray(comp.ape[...], jnp.float64)[h],
            ratio=stride,
            overlap=comp.overlap,
        )
        entry = np.asarray(entry)[-1]
        return entry, entry
    raise AssertionError(operator)


def reference(layer, operator, x, *, stride, local_window, offsets=None):
    """The layer written query by query: visible entries and local tokens, one softmax.

    `offsets` (staggered windows, default none): head h's window w is tokens
    `[o_h + w s, o_h + (w + 1) s)`, seen once its last token is `<= t`, keyed at `o_h + w s`."""
    x = np.asarray(x, np.float64)
    kernel = lambda lin: np.asarray(lin.kernel[...], np.float64)  # noqa: E731
    q = (x @ kernel(layer.query)).reshape(T, H, HD)
    k = (x @ kernel(layer.key)).reshape(T, H, HD)
    v = (x @ kernel(layer.value)).reshape(T, H, HD)
    out = np.zeros((T, H, HD))
    for h, o in enumerate(offsets or (0,) * H):
        count = (T - o) // stride  # complete windows of head h
        entries = [
            window_entry(layer, operator, x[o:], k[o:], v[o:], w, h, stride) for w in range(count)
        ]
        for t in range(T):
            qt = rope_np(q[t, h], t)
            scores, values = [], []
            for w in range(count):
                if o + (w + 1) * stride - 1 <= t:  # complete windows only
                    ck, cv = entries[w]
                    scores.append(rope_np(ck, o + w * stride) @ qt)
                    values.append(cv)
            for u in range(max(0, t - local_window + 1), t + 1) if local_window else ():
                scores.append(rope_np(k[u, h], u) @ qt)
                values.append(v[u, h])
            if not scores:
                continue
            s = np.array(scores) / math.sqrt(HD)
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ np.array(values)
    return out.reshape(T, D) @ kernel(layer.out)


@pytest.fixture(scope="module")
def tokens():
    return jax.random.normal(jax.random.key(7), (1, T, D), jnp.float32)


@pytest.mark.parametrize("operator", OPERATORS)
def test_layer_matches_loop_reference(operator, tokens):
    layer = make_layer(operator)
    got = np.asarray(forward(layer, tokens))[0]
    want = reference(layer, operator, tokens[0], stride=STRIDE, local_window=0)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "operator, overlap, local_window",
    [("mean_pool", False, 3), ("deepseek_v4", True, 5)],
)
def test_overlap_and_local_branch_match_loop_reference(operator, overlap, local_window, tokens):
    layer = make_layer(operator, overlap=overlap, local_window=local_window)
    got = np.asarray(forward(layer, tokens))[0]
    want = reference(layer, operator, tokens[0], stride=STRIDE, local_window=local_window)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_dense_control_is_standard_causal_attention(tokens):
    """`NoPool` (the control) against jax's causal dot-product attention on the same projections."""
    layer = make_layer("none")
    x = tokens
    graph, state = nnx.split(layer)

    @jax.jit
    def standard(state, x):
        layer = nnx.merge(graph, state)
        positions = jnp.arange(T, dtype=jnp.float32)
        heads = lambda y: y.reshape(1, T, H, HD)  # noqa: E731
        q = attention.rotate(heads(layer.query(x)), positions, ROPE)
        k = attention.rotate(heads(layer.key(x)), positions, ROPE)
        v = heads(layer.value(x))
        return layer.out(jax.nn.dot_product_attention(q, k, v, is_causal=True).reshape(1, T, D))

    want = standard(state, x)
    dense = np.asarray(forward(layer, x))
    np.testing.assert_allclose(dense, np.asarray(want), atol=ATOL, rtol=0)
    # stride 1 under mean pooling is the same layer
    pooled = make_layer("mean_pool", stride=1)
    np.testing.assert_allclose(np.asarray(forward(pooled, x)), dense, atol=ATOL, rtol=0)


@pytest.mark.parametrize("operator", ["mean_pool", "deepseek_v4"])
def test_query_never_sees_an_incomplete_window(operator, tokens):
    """Changing token u changes no output before the window holding u is complete.

    (Except at t = u itself, whose query changes.)
    """
    layer = make_layer(operator)
    u = 9  # window 2 = tokens 8..11, complete at t = 11
    changed = tokens.at[0, u].add(5.0)
    diff = np.abs(np.asarray(forward(layer, changed) - forward(layer, tokens)))[0].max(axis=-1)
    complete = (u // STRIDE + 1) * STRIDE - 1
    assert np.all(diff[:u] == 0.0) and np.all(diff[u + 1 : complete] == 0.0)
    assert np.all(diff[complete:] > 1e-3)


def _autodiff_masked_softmax(scores, mask):
    """`masked_softmax`'s forward, left to autodiff: the reference its custom VJP replicates."""
    scores = jnp.where(mask, scores, attention.MASKED)
    e = jnp.exp(scores - jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True)))
    e = jnp.where(mask, e, 0.0)
    total = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(total > 0, total, 1.0)


@pytest.mark.parametrize("width", [7, 385])
def test_masked_softmax_gradient_is_autodiffs_to_the_bit(width):
    """The hand-written backward performs autodiff's operations in its order: same bits,
    including rows with nothing visible (output and gradient 0)."""
    k1, k2, k3 = jax.random.split(jax.random.key(3), 3)
    scores = 4.0 * jax.random.normal(k1, (2, 3, 16, width))
    mask = jax.random.bernoulli(k2, 0.6, scores.shape).at[:, :, 0].set(False)
    weights = jax.random.normal(k3, scores.shape)

    def loss(softmax):
        return jax.jit(jax.value_and_grad(lambda s: jnp.sum(jnp.sin(softmax(s, mask) * weights))))

    value, grad = loss(attention.masked_softmax)(scores)
    ref_value, ref_grad = loss(_autodiff_masked_softmax)(scores)
    assert float(value) == float(ref_value)
    np.testing.assert_array_equal(np.asarray(grad), np.asarray(ref_grad))
    assert not np.any(np.asarray(grad)[:, :, 0])
    assert np.any(np.asarray(grad) != 0)


def test_visibility_masks():
    mask = np.asarray(attention.compressed_visibility(12, 4))
    for t in range(12):
        np.testing.assert_array_equal(mask[t], [w < (t + 1) // 4 for w in range(3)])
    local = np.asarray(attention.local_visibility(6, 2))
    np.testing.assert_array_equal(local.sum(axis=1), [1, 2, 2, 2, 2, 2])


@pytest.mark.parametrize("operator", OPERATORS)
def test_a_partial_last_window_changes_no_output_before_it(operator):
    """T = 18 at s = 4 (two tokens past the last complete window): causality means the first
    16 outputs equal those of the first 16 tokens alone; the partial window makes no entry."""
    layer = make_layer(operator)
    x = jnp.asarray(np.random.default_rng(3).standard_normal((2, T + 2, D)), jnp.float32)
    longer, shorter = forward(layer, x), forward(layer, x[:, :T])
    assert longer.shape == (2, T + 2, D)
    np.testing.assert_allclose(longer[:, :T], shorter, rtol=0, atol=1e-6)


def dense_masked(layer, x):
    """The layer with its local branch scored densely against all T keys and masked by
    `local_visibility` (one joint softmax with the compressed entries): the output and the
    weights in the recorded layout (compressed entries first, then the T tokens)."""
    length = x.shape[1]
    heads = lambda y: y.reshape(*y.shape[:2], H, HD)  # noqa: E731
    positions = jnp.arange(length, dtype=jnp.float32)
    q = attention.rotate(heads(layer.query(x)), positions, ROPE)
    k, v = heads(layer.key(x)), heads(layer.value(x))
    scores, masks, values = [], [], []
    if layer.use_compressed:
        stride = layer.compressor.stride
        ck, cv = layer.compressor(x, k, v)
        ck = attention.rotate(ck, jnp.arange(length // stride, dtype=jnp.float32) * stride, ROPE)
        scores.append(jnp.einsum("bthd,bchd->bhtc", q, ck))
        masks.append(attention.compressed_visibility(length, stride))
        values.append(cv)
    kr = attention.rotate(k, positions, ROPE)
    scores.append(jnp.einsum("bthd,buhd->bhtu", q, kr))
    masks.append(attention.local_visibility(length, layer.local_window))
    values.append(v)
    probs = attention.masked_softmax(
        jnp.concatenate(scores, axis=-1) / math.sqrt(HD), jnp.concatenate(masks, axis=-1)
    )
    mixed = jnp.einsum("bhtk,bkhd->bthd", probs, jnp.concatenate(values, axis=1))
    return layer.out(mixed.reshape(*x.shape[:2], D)), probs


@pytest.mark.parametrize(
    "length, window, operator",
    [
        (16, 4, None),  # T a multiple of W
        (18, 5, None),  # T not a multiple of W: the last block is padded
        (12, 12, None),  # W = T: one block
        (10, 16, None),  # W > T: every earlier token is visible
        (16, 1, None),  # each query sees only itself
        (16, 3, "mean_pool"),  # one softmax over compressed entries and the band
        (17, 6, "deepseek_v4"),  # a partial last window and a partial last block
    ],
)
def test_banded_local_branch_equals_dense_masked_attention(length, window, operator):
    """The banded local branch (2W keys per block of W queries) against the dense one (all T
    keys, masked): the same float32 terms summed in another order, so they agree to float32
    rounding of O(1) sums (1e-5); masked slots get weight exactly 0 in both. The recorded
    weights, scattered back to the dense layout, are compared the same way."""
    rngs = nnx.Rngs(0)
    compressor = None
    if operator is not None:
        compressor = attention.make_compressor(
            operator, stride=STRIDE, heads=H, d_model=D, head_dim=HD, overlap=True, rngs=rngs
        )
    layer = attention.Attention(
        D, H, compressor=compressor, local_window=window, rope_dim=ROPE, rngs=rngs
    )
    x = jnp.asarray(np.random.default_rng(length).standard_normal((2, length, D)), jnp.float32)
    graph, state = nnx.split(layer)
    record = nnx.capture(lambda m, x: m(x), nnx.Intermediate)
    banded, sown = jax.jit(lambda st, x: record(nnx.merge(graph, st), x))(state, x)
    want, want_probs = jax.jit(lambda st, x: dense_masked(nnx.merge(graph, st), x))(state, x)
    np.testing.assert_allclose(np.asarray(banded), np.asarray(want), atol=1e-5, rtol=0)
    recorded = np.asarray(sown["attention"][0])
    assert recorded.shape == want_probs.shape
    np.testing.assert_allclose(recorded, np.asarray(want_probs), atol=1e-6, rtol=0)

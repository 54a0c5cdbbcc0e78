"""`sims.decoder.interventions`: each surgery against an independent route to the same model, patching
against the world it copies from, the rows against the evaluation set, the paired intervals."""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from weakspots.idealized.decoder.config import LMConfig
from weakspots.idealized.decoder.model import Decoder
from weakspots.idealized.decoder.recall import placed_batch
from weakspots.idealized.stagger import stagger_offsets
from weakspots.sims.decoder import edits
from weakspots.sims.decoder import interventions as iv
from weakspots.sims.decoder.evaluate import config_evaluation_set, query_reach

TINY = dict(
    seq_len=32, pairs=2, key_vocab=8, value_vocab=8, filler_vocab=4, d_model=16, heads=2,
    rope_dim=4, window=4, eval_samples=2,
)  # fmt: skip
EXACT = dict(rtol=1e-6, atol=1e-6)  # the same float32 sums, one term replaced by an exact zero
BATCHED = dict(rtol=1e-5, atol=1e-5)  # the same float32 sums in a batch of another size (XLA may
# block them differently)


def random_decoder(config: LMConfig, seed: int = 0) -> Decoder:
    """A decoder with every parameter random, pooling parameters included (not at their init)."""
    graph, state = nnx.split(nnx.eval_shape(lambda: Decoder(config.decoder, rngs=nnx.Rngs(0))))
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree.flatten(state)
    leaves = [jnp.asarray(0.5 * rng.standard_normal(x.shape), jnp.float32) for x in leaves]
    return nnx.merge(graph, jax.tree.unflatten(treedef, leaves))


def edited(config, model, intervention) -> Decoder:
    state = iv.edited_parameters(config, nnx.split(model)[1], intervention)
    return nnx.merge(nnx.split(model)[0], state)


def tokens(config, rows=3, seed=1):
    return jax.random.randint(jax.random.key(seed), (rows, config.seq_len), 0, config.task.vocab)


@pytest.mark.slow
def test_head_ablation_equals_zeroing_that_heads_values():
    """Zeroing head h's rows of the output projection = zeroing its value projection (another route)."""
    config = LMConfig(**TINY, operator="softmax_pool")
    model = random_decoder(config)
    x = tokens(config)
    base = np.asarray(model(x))
    for layer, head in ((0, 1), (1, 0)):
        ablated = np.asarray(edited(config, model, edits.AblateHead(layer, head))(x))
        other = random_decoder(config)
        width = config.decoder.head_dim
        kernel = other.blocks[layer].attention.value.kernel
        kernel[...] = kernel[...].at[:, head * width : (head + 1) * width].set(0.0)
        np.testing.assert_allclose(ablated, np.asarray(other(x)), **EXACT)
        assert not np.allclose(ablated, base, atol=1e-3)  # the head mattered


def test_zero_position_bias_of_softmax_pool_is_mean_pooling():
    """`softmax_pool` with its logits zeroed computes what `mean_pool` computes (another operator)."""
    config = LMConfig(**TINY, operator="softmax_pool")
    model = random_decoder(config)
    mean = LMConfig(**TINY, operator="mean_pool")
    state = nnx.split(model)[1]
    del state["blocks"][1]["attention"]["compressor"]["pooling_logits"]
    reference = nnx.merge(nnx.split(random_decoder(mean))[0], state)
    x = tokens(config)
    zeroed = edited(config, model, edits.ZeroPositionBias(1))
    np.testing.assert_allclose(np.asarray(zeroed(x)), np.asarray(reference(x)), **EXACT)
    assert not np.allclose(np.asarray(model(x)), np.asarray(reference(x)), atol=1e-3)


@pytest.mark.parametrize("operator", ["softmax_pool", "deepseek_v4", "low_rank"])
def test_roll_moves_every_phase_weight_one_phase_on(operator):
    config = LMConfig(**TINY, operator=operator)
    model = random_decoder(config, seed=2)
    before = np.asarray(model.pooling_weights()[1])
    rolled = edited(config, model, edits.RollPositionBias(1))
    after = np.asarray(rolled.pooling_weights()[1])
    assert not np.allclose(before, np.roll(before, 1, axis=-1))  # a roll is visible
    np.testing.assert_allclose(after, np.roll(before, 1, axis=-1), rtol=1e-6)


def test_applies_and_components_follow_the_design():
    mean = LMConfig(**TINY, operator="mean_pool")
    dsv4 = LMConfig(**TINY, operator="deepseek_v4", local_window=4)
    dense = LMConfig(**TINY, operator="none")
    assert not edits.ZeroPositionBias(1).applies(mean)
    assert edits.RollPositionBias(1).applies(dsv4)
    assert not edits.RollPositionBias(0).applies(dsv4)  # the sliding layer
    assert not edits.NoRopeCompressed(1).applies(dense)
    assert not edits.AblateHead(1, 2).applies(dsv4) and not edits.AblateLayer(2).applies(dsv4)
    names = [c.describe(dsv4) for c in iv.component_interventions(dsv4)]
    assert names == [
        "remove sliding window (layer 0)",
        "remove compressed branch (layer 1)",
        "remove local window (layer 1)",
        "remove RoPE from compressed keys (layer 1)",
        "zero position bias (layer 1)",
        "roll position bias by one phase (layer 1)",
    ]
    assert [c.kind for c in iv.component_interventions(dense)] == ["ablate_layer"] * 2
    with pytest.raises(ValueError):
        iv.edited_parameters(dsv4, None, edits.NoLocalWindow(1))  # changes the program


def _moved_batch(config, target):
    data = config_evaluation_set(config)
    rows = slice(0, 6)
    moved, valid, windows = iv.source_starts(
        config, data.starts[rows], data.value_start[rows], target
    )
    key = jax.random.key(3)
    clean = placed_batch(key, config.task, jnp.asarray(data.starts[rows]))
    source = placed_batch(key, config.task, jnp.asarray(moved))
    return clean, source, valid, windows


@pytest.mark.slow  # moved out of the default run: the default suite took 16 min on 2 idle cores
def test_patching_every_entry_makes_the_query_read_the_source_world():
    """With every window patched, a query the sliding window cannot see past reads what it reads
    in the source world, exactly; with none patched it reads the clean world."""
    config = LMConfig(**{**TINY, "pairs": 4, "window": 2}, operator="softmax_pool")
    model = random_decoder(config)
    clean, source, valid, _ = _moved_batch(config, target=1)
    assert valid.any() and not np.array_equal(clean.tokens[valid], source.tokens[valid])
    both = jnp.concatenate([clean.tokens, source.tokens])
    rows, windows = clean.tokens.shape[0], config.seq_len // config.stride
    attention = model.blocks[1].attention
    inner = attention.compressor
    queries = slice(config.task.context_len + config.window, config.seq_len)
    for patched, reference in ((True, source.tokens), (False, clean.tokens)):
        mask = jnp.full((rows, windows), patched)
        attention.compressor = edits.PatchedEntries(inner, mask)
        out = np.asarray(model(both))[:rows, queries]
        attention.compressor = inner
        assert out.shape[1] >= 4
        np.testing.assert_allclose(out, np.asarray(model(reference))[:, queries], **BATCHED)


def test_source_starts_move_the_fact_within_its_window_and_mark_every_touched_window():
    config = LMConfig(**{**TINY, "pairs": 4}, key_len=2)
    data = config_evaluation_set(config)
    s, length = config.stride, config.task.fact_len
    for target in range(s):
        moved, valid, windows = iv.source_starts(config, data.starts, data.value_start, target)
        new_value = moved[:, 0] + config.task.key_len
        assert np.all(new_value[valid] % s == target)
        assert np.all(new_value[valid] // s == data.value_start[valid] // s)
        for i in range(len(moved)):  # brute force: the moved fact overlaps nothing, fits
            occupied = {p for f in data.starts[i, 1:] for p in range(f, f + length)}
            span = set(range(moved[i, 0], moved[i, 0] + length)) if valid[i] else set()
            fits = valid[i] <= (min(span | {0}) >= 0 and max(span | {0}) < config.task.context_len)
            assert not (span & occupied) and fits
            touched = {
                p // s for f in (data.starts[i, 0], moved[i, 0]) for p in range(f, f + length)
            }
            assert set(np.nonzero(windows[i])[0]) == (touched if valid[i] else set())
        np.testing.assert_array_equal(moved[~valid], data.starts[~valid])


def test_rows_are_the_evaluation_set_in_its_chunks():
    config = LMConfig(**TINY, operator="mean_pool")
    rows = iv.evaluation_rows(config)
    data = config_evaluation_set(config)
    flat = rows.starts.reshape(-1, rows.starts.shape[-1])
    position = rows.index[:, None] * iv.EVAL_CHUNK + np.arange(iv.EVAL_CHUNK)[None, :]
    position = position.reshape(-1)
    real = position < data.starts.shape[0]
    np.testing.assert_array_equal(flat[real], data.starts[position[real]])
    np.testing.assert_array_equal(rows.value_start[real], data.value_start[position[real]])
    limit = config.task.context_len - query_reach(config)
    np.testing.assert_array_equal(rows.far, real & (rows.value_start < limit))


def test_paired_drop_interval_is_the_normal_interval_of_the_differences():
    clean = np.array([1, 1, 1, 0, 1, 0])
    intervened = np.array([0, 1, 1, 1, 0, 0])
    diff = np.array([1, 0, 0, -1, 1, 0], float)
    mean, (lo, hi) = iv.paired_drop(clean, intervened)
    half = 1.959963984540054 * math.sqrt(np.sum((diff - diff.mean()) ** 2) / 5) / math.sqrt(6)
    assert mean == pytest.approx(1 / 6)
    assert (lo, hi) == pytest.approx((1 / 6 - half, 1 / 6 + half))


def test_phase_drops_are_the_difference_of_the_phase_accuracies():
    rng = np.random.default_rng(0)
    clean, after = rng.random((3, 40)) < 0.8, rng.random((3, 40)) < 0.5
    phase = np.where(np.arange(40) < 36, np.arange(40) % 4, -1)
    out = iv.phase_drops(clean, after, phase, 4)
    for p in range(4):
        sel = phase == p
        assert out["drop"][p] == pytest.approx(clean[:, sel].mean() - after[:, sel].mean())
        assert out["accuracy"][p] == pytest.approx(after[:, sel].mean())
        assert out["drop_per_seed"][1][p] == pytest.approx(
            clean[1, sel].mean() - after[1, sel].mean()
        )


def test_shifted_log_probs_are_the_mean_over_chunkings_built_by_hand():
    """Offset 0 reads the sequence as the intact model; offset 2 as the model reading the
    sequence with two filler tokens put in front by hand (another route to the same shift)."""
    config = LMConfig(**TINY, operator="softmax_pool")
    model = random_decoder(config)
    x = tokens(config)
    T, s = config.seq_len, config.stride
    intact = jax.nn.log_softmax(model(x), axis=-1)
    np.testing.assert_allclose(iv.shifted_log_probs(model, x, (0,), s), intact, **BATCHED)
    by_hand = jnp.concatenate([jnp.zeros((3, 2), x.dtype), x, jnp.zeros((3, 2), x.dtype)], 1)
    shifted = jax.nn.log_softmax(model(by_hand), axis=-1)[:, 2 : 2 + T]
    assert not np.allclose(shifted, intact, atol=1e-3)  # the shift changes what the model reads
    np.testing.assert_allclose(
        iv.shifted_log_probs(model, x, (0, 2), s), (intact + shifted) / 2, **BATCHED
    )
    assert stagger_offsets(8, 4) == (0, 2, 4, 6)  # the offset ensemble's shifts k s // K


@partial(jax.jit, static_argnums=(0, 1))
def _correct(config, graph, state, starts, index):
    batch = placed_batch(iv.evaluation_key(config, index), config.task, starts)
    return iv.first_query_correct_from_model(nnx.merge(graph, state), batch)


def _alone(config, state, intervention, rows):
    """Outcomes `(K * chunk,)` of one run's decoder under `intervention`, chunk by chunk, without
    vmap (the route `world_outcomes` batches)."""
    model = nnx.merge(nnx.split(random_decoder(config))[0], state)
    if intervention is not None:
        model = intervention.apply(model)
    graph, state = nnx.split(model)
    chunks = zip(rows.starts, rows.index, strict=True)
    return np.concatenate([np.asarray(_correct(config, graph, state, x, i)) for x, i in chunks])


@pytest.mark.slow
def test_deepseek_v4_decoders_are_ablated_as_each_run_evaluated_alone():
    """The ablation pipeline on `deepseek_v4` decoders, with one run in many worlds (`ablate_lm`)
    and one world of two runs (a switch): unit axes on which a program of nested vmaps crashed
    XLA:CPU. Accuracies, head effects, component drops and outcomes are those of each edited
    decoder evaluated alone; the patching diagonal is exact."""
    config = LMConfig(**TINY, operator="deepseek_v4").static
    rows = iv.evaluation_rows(config)
    runs = [nnx.split(random_decoder(config, seed))[1] for seed in (4, 5)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *runs)
    s, far = config.stride, rows.far
    phase = rows.value_start[far] % s
    by_phase = lambda outcomes: np.array([outcomes[phase == p].mean() for p in range(s)])  # noqa: E731
    alone = lambda intervention, run=0: _alone(config, runs[run], intervention, rows)[far]  # noqa: E731

    report = iv.ablate_lm(config, jax.tree.map(lambda x: x[:1], stacked))
    intact = by_phase(alone(None))
    assert 0 < intact.mean() < 1  # outcomes of both kinds are compared
    np.testing.assert_allclose(report["phase_accuracy"], intact, rtol=1e-12)
    head = by_phase(alone(edits.AblateHead(1, 0)))
    np.testing.assert_allclose(report["effect"][1][0], intact - head, atol=1e-12)
    components = {c["kind"]: c for c in report["components"]}
    for kind in (edits.ZeroPositionBias, edits.NoRopeCompressed):
        expected = by_phase(alone(kind(1)))
        np.testing.assert_allclose(components[kind.kind]["accuracy"], expected, rtol=1e-12)
    patch = report["patch"]
    for p in range(s):  # the source world at the clean phase is the clean world
        if patch["samples"][p][p]:
            assert patch["patched"][p][p] == patch["clean"][p][p]

    switch = edits.NoRopeCompressed(1)
    out = iv.world_outcomes(config, stacked, [switch], rows)
    assert out.shape == (1, 2, far.size)
    for run in range(2):
        np.testing.assert_array_equal(out[0, run, far], alone(switch, run))


@pytest.mark.parametrize(
    "operator, overlap",
    [("deepseek_v4", False), ("deepseek_v4", True), ("low_rank", False), ("softmax_pool", False)],
)
def test_pooling_weights_of_stacked_runs_are_each_runs_own(operator, overlap):
    """`ablate_lm` reads the pooling weights of a decoder merged from runs stacked on a leading
    axis: each run's weights per head sum to one over the phases and equal the run's own
    (for `deepseek_v4`, the softmax of `ape` over the phases, averaged over channels)."""
    config = LMConfig(**TINY, operator=operator, overlap=overlap, stride=4).static
    runs = [nnx.split(random_decoder(config, seed))[1] for seed in (6, 7)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *runs)
    graph = nnx.split(random_decoder(config))[0]
    weights = np.asarray(nnx.merge(graph, stacked).pooling_weights()[1])
    assert weights.shape == (2, config.heads, config.stride)
    own = [np.asarray(nnx.merge(graph, run).pooling_weights()[1]) for run in runs]
    np.testing.assert_allclose(weights, np.stack(own), **EXACT)
    if operator == "deepseek_v4":
        ape = np.asarray(stacked["blocks"][1]["attention"]["compressor"]["ape"][...], np.float64)
        if overlap:  # window [previous block | own block]: the own block's share
            half = ape.shape[-1] // 2
            ape = np.concatenate([ape[..., :half], ape[..., half:]], axis=-2)
        e = np.exp(ape - ape.max(axis=-2, keepdims=True))
        share = (e / e.sum(axis=-2, keepdims=True))[..., -config.stride :, :].mean(axis=-1)
        np.testing.assert_allclose(weights, share, **EXACT)
    if not overlap:
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, **EXACT)

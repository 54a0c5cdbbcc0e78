"""`benchmarks/v4_vs_hf`: the project's V4 layer and transformers' train the same thing.

At tiny sizes (no timing thresholds: machines are noisy): the run produces its keys; the
two sides' losses agree at step 0 within float32 rounding, and after one AdamW step they
agree far more closely than the step moved them (so the gradients and the optimizer
update agree too, not only the forward), skipped without torch; the FLOP counts are the
traced programs' matmuls; the 24 GiB length solves the fitted quadratic.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixtures import jaxpr_dot_flops
from flax import nnx

from weakspots.benchmarks import bench, v4_vs_hf
from weakspots.idealized.decoder.v4_attention import V4Attention

LOSS_RTOL = 1e-5  # float32 means of T*D squares: rounding is ~1e-7 relative, a few ulps


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch", reason="needs the [hf] extra (torch)")
    pytest.importorskip("transformers.models.deepseek_v4", reason="needs transformers >= 5.24")
    return v4_vs_hf.run(v4_vs_hf.TINY)


def test_tiny_run_has_the_keys(tiny):
    for key in ("lm_vs_hf_step_speedup", "lm_vs_hf_compile_step_speedup", "hf_compile_error",
                "median_step_seconds", "sanity", "targets", "load_average"):  # fmt: skip
        assert key in tiny
    assert tiny["lm_vs_hf_step_speedup"] > 0
    assert set(tiny["median_step_seconds"]) == {"jax", "hf_eager"}
    assert tiny["targets"]["lm_vs_hf_step_speedup"]["target"] == 3.0


def test_losses_agree_at_step_zero_and_after_one_step(tiny):
    check = tiny["sanity"]
    assert len(check["losses"]["jax"][0]) == len(v4_vs_hf.KINDS)  # CSA and HCA both checked
    assert check["loss_step0_rel_diff"] <= LOSS_RTOL
    # The step moved the loss measurably, and both sides moved it alike.
    assert check["loss_step1_change"] > 100 * LOSS_RTOL
    assert check["loss_step1_rel_diff"] <= 0.01 * check["loss_step1_change"]


def test_bench_reports_a_skip_without_torch(monkeypatch):
    monkeypatch.setattr(v4_vs_hf, "available", lambda: "needs the [hf] extra (torch)")
    out = bench.bench_v4_vs_hf(bench.QUICK, lambda _: None)
    assert out["lm_vs_hf_step_speedup"] is None
    assert out["lm_vs_hf_skipped"] == "needs the [hf] extra (torch)"
    target = out["targets"]["lm_vs_hf_step_speedup"]
    assert target["met"] is False and target["value"] is None


@pytest.mark.parametrize(
    ("kind", "ratio", "topk", "separate"),
    [("csa", 4, 4, False), ("csa", 4, 0, False), ("hca", 16, 0, False), ("sliding", 1, 0, False),
     ("csa", 4, 4, True), ("sliding", 1, 0, True)],
)  # fmt: skip
def test_layer_flop_count_is_the_traced_matmuls(kind, ratio, topk, separate):
    """`v4_layer_flops` (matmul + indexer) equals the dot_general FLOPs of the traced forward."""
    shapes = dict(ratio=ratio, local_window=8, q_rank=16, o_groups=2, o_rank=8,
                  index_topk=topk, index_heads=4, index_dim=8,
                  separate_values=separate)  # fmt: skip
    layer = V4Attention(32, 4, 16, kind=kind, rope_dim=8, rngs=nnx.Rngs(0), **shapes)
    graph, params = nnx.split(layer)
    traced = jaxpr_dot_flops(lambda p, x: nnx.merge(graph, p)(x), params, jnp.ones((1, 64, 32)))
    count = v4_vs_hf.v4_layer_flops(kind, length=64, d_model=32, heads=4, head_dim=16, **shapes)
    assert count["matmul"] + count["indexer"] == traced
    assert (count["indexer"] > 0) == (count["top_k"] > 0) == (kind == "csa" and topk > 0)


@pytest.mark.parametrize("separate", [False, True])
def test_decoder_flop_count_is_the_traced_training_step(separate):
    """`decoder_flops_per_step` less top-k equals the dot_general FLOPs of a traced V4
    decoder training step (forward, backward, the indexer's KL), at a small batch."""
    from functools import partial

    from weakspots.idealized.decoder.config import V4_DESIGN, LMConfig
    from weakspots.sims.decoder import train as lm_train

    config = LMConfig(**V4_DESIGN, batch=2, separate_values=separate).static
    hyper = jax.tree.map(lambda x: x[0], lm_train.LMHyper.stack([config]))
    state = jax.eval_shape(partial(lm_train.init, config), hyper)
    traced = jaxpr_dot_flops(partial(lm_train.step, config), state, hyper)
    top_k = sum(
        config.seq_len * (config.seq_len // config.stride) for k in config.layer_kinds if k == "csa"
    )
    count = v4_vs_hf.decoder_flops_per_step(config)
    assert count - top_k * config.batch == traced


def test_largest_length_solves_the_fitted_quadratic():
    """On exact quadratic peaks the largest T for the budget is the root, floored to 128."""
    from weakspots.benchmarks import lm_memory

    a, b, c = 2e8, 3e5, 40.0
    lengths = [512, 1024, 2048, 4096]
    peaks = [a + b * t + c * t * t for t in lengths]
    budget = 24 * 2**30
    root = (-b + np.sqrt(b * b - 4 * c * (a - budget))) / (2 * c)
    assert lm_memory.largest_length(lengths, peaks, budget) == int(root // 128) * 128


@pytest.mark.slow  # 55 s of compiles; the bitwise property itself: test_lm_attention
def test_softmax_vjp_forms_exact_is_bitwise_and_p_form_is_not():
    """`benchmarks/softmax_vjp` at tiny size: the project's backward gives autodiff's
    gradients to the bit in both layers; the textbook `p (g - sum(g p))` rounds otherwise."""
    pytest.importorskip("torch", reason="needs the [hf] extra (torch)")
    pytest.importorskip("transformers.models.deepseek_v4", reason="needs transformers >= 5.24")
    from weakspots.benchmarks import softmax_vjp

    out = softmax_vjp.run(v4_vs_hf.TINY, rounds=1)
    assert set(out["speedup_vs_autodiff"]) == set(softmax_vjp.FORMS)
    assert out["max_gradient_difference"]["exact"] == [0.0, 0.0]
    assert max(out["max_gradient_difference"]["p_form"]) > 0

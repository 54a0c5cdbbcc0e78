"""The benchmark's pieces compute what they claim; no timing thresholds (machines are noisy).

* the sampler's fast normals and chi-squares are the distributions they replace;
* the naive baseline trains the same model on the same loss as the project's trainer;
* the RNG limit draws with the trainer's generator;
* the scipy baseline integrates the same flow as diffrax, and the two agree.
"""

import json
import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from weakspots.benchmarks import bench, naive_trainer, operator_step, rng_limit, scipy_flow
from weakspots.cli import bench as bench_cli
from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.loss import objective
from weakspots.idealized.toy.model import init_model
from weakspots.idealized.toy.task import (
    Batch,
    chi_square,
    normal_from_bits,
    random_integers,
    random_words,
    split_key,
    standard_normal,
)
from weakspots.sims.toy import train as trainer
from weakspots.theory.reduced import reduced_loss

KS_PVALUE = 1e-3  # fixed seeds: deterministic; a wrong distribution fails by orders of magnitude
RTOL32 = 1e-5


def test_normal_from_bits_is_jax_normal_map():
    key = jax.random.key(3)
    expected = jax.random.normal(key, (1000, 7), jnp.float32)
    bits = jax.random.bits(key, (1000, 7), jnp.uint32)
    np.testing.assert_array_equal(np.asarray(normal_from_bits(bits)), np.asarray(expected))


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5, 2), (64, 8, 64)])
def test_random_words_are_the_bits_of_jax_random_bits(shape):
    """The unrolled hash gives jax.random.bits' own words, bit for bit (jitted, vmapped, odd sizes)."""
    draws = -(-int(np.prod(shape)) // 2)

    def reference(key):
        wide = jax.random.bits(key, (draws,), jnp.uint64)
        pairs = jax.lax.bitcast_convert_type(wide, jnp.uint32).reshape(-1)
        return pairs[: int(np.prod(shape))].reshape(shape)

    keys = jax.random.split(jax.random.fold_in(jax.random.key(2024), len(shape)), 3)
    fast = jax.jit(jax.vmap(lambda k: random_words(k, shape)))(keys)
    np.testing.assert_array_equal(np.asarray(fast), np.asarray(jax.vmap(reference)(keys)))
    assert fast.dtype == jnp.uint32


@pytest.mark.parametrize("x64", [True, False], ids=["x64", "x32"])
def test_unrolled_splits_and_integers_are_jax_random_bit_for_bit(x64):
    """split_key = jax.random.split and random_integers = jax.random.randint (jitted, vmapped)."""
    keys = jax.random.split(jax.random.key(11), 4)
    spans = [((256,), 0, 64), ((7,), 0, 8), ((5, 3), 0, 1_000_003), ((33,), -5, 11), ((4,), 3, 3)]
    with jax.enable_x64(x64):
        for num in (2, 4):
            fast = jax.jit(jax.vmap(lambda k, n=num: jax.random.key_data(split_key(k, n))))(keys)
            slow = jax.vmap(lambda k, n=num: jax.random.key_data(jax.random.split(k, n)))(keys)
            np.testing.assert_array_equal(fast, slow)
        for shape, low, high in spans:
            fast = jax.jit(jax.vmap(lambda k, a=shape, b=low, c=high: random_integers(k, a, b, c)))
            slow = jax.vmap(lambda k, a=shape, b=low, c=high: jax.random.randint(k, a, b, c))
            assert fast(keys).dtype == slow(keys).dtype
            np.testing.assert_array_equal(fast(keys), slow(keys))


def test_standard_normal_is_standard_normal():
    x = np.asarray(standard_normal(jax.random.key(1), (400_000,)), dtype=np.float64)
    assert stats.kstest(x, "norm").pvalue > KS_PVALUE
    # both words of a 64-bit draw are used: neighbours are uncorrelated
    assert abs(np.corrcoef(x[0::2], x[1::2])[0, 1]) < 5 / np.sqrt(x.size / 2)
    assert standard_normal(jax.random.key(1), (3,), jnp.float64).dtype == jnp.float64


@pytest.mark.parametrize("dof", [1, 2, 7, 64])  # past 2 * MAX_ERLANG: jax.random.chisquare
def test_chi_square_is_chi_square(dof):
    x = np.asarray(chi_square(jax.random.key(dof), dof, (200_000,)), dtype=np.float64)
    assert stats.kstest(x, "chi2", args=(dof,)).pvalue > KS_PVALUE


def test_naive_baseline_trains_the_project_model_on_the_project_loss():
    """Same needles: the naive loss on real keys = the project's on keys = on inner products,
    gradients alike, and the naive step is SGD on it (one compilation: naive draws are slow to build).
    """
    config = TrainConfig(stride=4, chunks=8, dim=8)
    shape = (4, config.chunks, config.stride, config.dim)
    model = init_model(jax.random.key(0), config.model, config.gain, 0.5, jnp.float32)
    logits = model.compressor.pooling_logits[0]
    step = naive_trainer.make_step(*shape, lr=2.0, gain=config.gain).__wrapped__

    @jax.jit
    def naive(logits, key):
        batch = naive_trainer.naive_batch(jax.random.split(key)[1], *shape)
        value_grad = jax.value_and_grad(naive_trainer.naive_loss)(logits, *batch, config.gain)
        return batch, value_grad, step(logits, key)

    (keys, query, target), (loss, grad), (new, _, step_loss) = naive(logits, jax.random.key(1))
    np.testing.assert_allclose(step_loss, loss, rtol=RTOL32)
    np.testing.assert_allclose(new, logits - 2.0 * grad, rtol=RTOL32)

    phase = jnp.zeros_like(target)  # unused by the loss
    gram = jnp.einsum("bd,bcjd->bcj", query, keys)
    project = eqx.filter_jit(eqx.filter_value_and_grad(objective))
    for batch in (
        Batch(target=target, phase=phase, keys=keys, query=query),
        Batch(target=target, phase=phase, gram=gram),
    ):
        value, grads = project(model, batch, config.loss, 0.0)
        np.testing.assert_allclose(value, loss, rtol=RTOL32)
        np.testing.assert_allclose(grads.compressor.pooling_logits[0], grad, rtol=1e-4, atol=1e-7)


def test_rng_limit_draws_with_the_trainers_keys():
    config = TrainConfig(steps=2)
    hyper = trainer.Hyper.stack([config.replace(seed=s) for s in (0, 7)])
    keys = rng_limit.trainer_keys(config, hyper)
    expected = jax.vmap(lambda h: trainer.init(config.static, h).key)(hyper)
    np.testing.assert_array_equal(jax.random.key_data(keys), jax.random.key_data(expected))
    assert jax.random.key_impl(keys) == jax.random.key_impl(expected)
    sums = rng_limit.draw_many(config.static, keys, 2)
    assert sums.shape == (2, 2) and np.all(np.isfinite(sums))


def test_trainer_program_is_float32_throughout():
    """No float64 in the compiled training step and evaluation (the precision policy is x64)."""
    config = TrainConfig(steps=2).static
    hyper = trainer.Hyper.stack([config.replace(seed=s) for s in (0, 1)])
    states = jax.eval_shape(lambda h: jax.vmap(lambda x: trainer.init(config, x))(h), hyper)
    held_out = trainer.held_out_gram(config)
    program = trainer._advance_many.lower(config, states, hyper, held_out, jnp.asarray(True))
    text = program.as_text()
    assert "f32" in text and "f64" not in text


def test_scipy_gradient_is_the_reduced_loss_gradient():
    logits = np.random.default_rng(0).normal(size=(2, 8))
    gain = np.array([16.0, 9.0])
    expected = jax.grad(reduced_loss)(jnp.asarray(logits), jnp.asarray(gain), 64.0)
    np.testing.assert_allclose(
        scipy_flow.reduced_gradient(logits, gain, 64.0), expected, rtol=1e-12
    )


def test_scipy_and_diffrax_flows_agree():
    logits0, gains = scipy_flow.problems(2, init_scale=0.05)
    ts = np.linspace(0.0, 300.0, 7)
    tol = {"rtol": bench.FLOW_RTOL, "atol": bench.FLOW_ATOL}
    lsoda = scipy_flow.solve_all(logits0, gains, 64.0, ts, **tol)
    diffrax = bench.diffrax_trajectories(
        jnp.asarray(logits0), jnp.asarray(gains), 64.0, jnp.asarray(ts), stride=8
    )
    assert np.max(np.abs(lsoda - np.asarray(diffrax))) < bench.FLOW_AGREEMENT
    assert np.max(np.abs(lsoda[:, -1] - lsoda[:, 0])) > 0.05  # it moved: the check has teeth


def test_operator_step_plain_forms_swap_and_restore():
    """The benchmark's plain forms are the ones traced inside the context, and only there."""
    from weakspots.idealized import deepseek_v4 as deepseek
    from weakspots.idealized.toy import compression, task

    current = (task.random_words, compression.low_rank, deepseek._window_pool)
    with operator_step.plain_forms():
        assert task.random_words is operator_step.bits_random_words
        assert compression.low_rank is operator_step.factored_low_rank
        assert deepseek._window_pool is operator_step.softmax_window_pool
    assert (task.random_words, compression.low_rank, deepseek._window_pool) == current


def test_paired_ratio_takes_ratios_within_rounds():
    t = bench.Timing
    times = {
        "a": [t(1.0, 1.0), t(10.0, 1.0), t(1.0, 1.0)],
        "b": [t(2.0, 1.0), t(20.0, 1.0), t(4.0, 4.0)],
    }
    work = {"a": 1.0, "b": 1.0}
    assert bench.paired_ratio(times, work, "a", "b", "wall") == 2.0
    assert bench.paired_ratio(times, work, "a", "b", "cpu") == 1.0


def _fake_result():
    targets = {
        name: {"value": 2 * v, "target": v, "met": True} for name, v in bench.TARGETS.items()
    }
    return {
        "targets": targets,
        "platform": "cpu",
        "sharding_speedup": 1.3,
        "compile_seconds": 12.0,
        "flow_compile_seconds": 7.0,
        "peak_memory_mb": 50.7,
        "flow_max_disagreement": 3e-7,
        "cpu_time_ratios": {k: 1.0 for k in bench.TARGETS},
        "details": {},
        "absolute": None,
        "bench_seconds": 100.0,
    }


def test_text_report_lists_every_target():
    report = bench_cli.text_report(_fake_result())
    for name in bench.TARGETS:
        assert name in report
    assert "sharding_speedup" in report and "peak_memory_mb" in report


@pytest.mark.slow
def test_bench_quick_json(capsys):
    from weakspots.cli import main

    assert main(["bench", "--quick", "--json", "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    for key in (
        *bench.TARGETS,
        "sharding_speedup",
        "peak_memory_mb",
        "compile_seconds",
        "flow_compile_seconds",
        "lm_vs_hf_step_speedup",
        "lm_flop_utilisation",
        "pretrain_vs_hf_step_speedup",
        "pretrain_flop_utilisation",
    ):
        assert key in result
    assert result["flow_agree"]
    assert result["details"]["fraction_of_rng_limit_evaluating_at_ends"] > 0
    evaluations = result["details"]["evaluations_per_run"]
    assert evaluations["at_ends"] == 2 and evaluations["trainer"] >= 2
    assert "lm_speedup_vs_loop" not in result["targets"]  # measured, no longer a target


def test_gpu_script_refuses_a_cpu_and_tabulates_a_record():
    from weakspots.benchmarks import gpu

    done = subprocess.run(
        [sys.executable, "-m", "weakspots.benchmarks.gpu", "--skip-paper"],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=120,
    )
    assert done.returncode == 1 and "not a GPU" in done.stderr
    result = {**_fake_result(), "fraction_of_rng_limit": 0.9, "speedup_vs_naive_loop": 500.0,
              "flow_speedup_vs_scipy": 80.0, "absolute": {"trainer_model_steps_per_second": 1e5}}  # fmt: skip
    record = {
        "device": {"kind": "NVIDIA H200", "count": 1, "jax": "0.10.2"},
        "date": "2030-01-01",
        "bench": result,
        "paper_seconds": 321.0,
    }
    text = gpu.table(record)
    assert "| fraction_of_rng_limit (trainer / RNG limit on this GPU) | 0.9 |" in text
    assert (
        "| trainer model-steps/s | 1e+05 |" in text and "| paper_repro.py --full | 321 s |" in text
    )
    assert "| RNG limit model-steps/s | - |" in text

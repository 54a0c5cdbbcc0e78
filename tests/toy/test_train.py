import json
import os
import platform
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.idealized.toy.config import ConfigError, TrainConfig
from weakspots.idealized.xla import jit
from weakspots.sims.toy import train as trainer
from weakspots.sims.toy.train import TrainingDiverged, train, train_many

CANONICAL = TrainConfig(
    eval_samples=1024
)  # stride 8, 64 chunks, d 64, gain 16, SGD lr 2, batch 256
SMALL = TrainConfig(
    stride=4, chunks=16, dim=16, gain=8.0, batch=64, steps=40, eval_every=10, eval_samples=128
)


def test_canonical_run_collapses_onto_three_phases():
    """docs/theory.md §6.4/§6.7: past the threshold (N_c = 15.78) SGD collapses onto 3 phases."""
    for result in train_many([CANONICAL.replace(seed=s) for s in range(3)]):
        summary = result.summary()
        assert summary["support_size"] == [3], summary["pooling_weights"]
        assert summary["delta_max"] >= 0.6
        covered = np.asarray(summary["pooling_weights"][0]) > 1 / 16
        acc = np.asarray(summary["phase_accuracy"])
        assert acc[covered].min() > 0.9 and acc[~covered].max() < 0.1


def test_below_threshold_pooling_stays_uniform():
    """N = 12 < N_c = 15.78: uniform pooling is stable; only minibatch noise moves the weights."""
    results = train_many([CANONICAL.replace(chunks=12, seed=s) for s in range(4)])
    deltas = []
    for result in results:
        summary = result.summary()
        assert summary["support_size"] == [8]
        weights = np.asarray(summary["pooling_weights"][0])
        assert np.abs(weights - 1 / 8).max() < 0.05
        deltas.append(summary["delta_max"])
    # The spread that remains is SGD's stationary noise around the stable point plus the
    # held-out error (theory.noise_floor): its 95% interval for the mean of these 4 runs.
    low, high = theory.noise_floor(8, 12, 64, 16.0, 2.0, 256, 600, 1024, seeds=4, level=0.95)[
        "mean_of_seeds_interval"
    ]
    assert low <= np.mean(deltas) <= high


@pytest.mark.slow
def test_one_ce_head_delta_max_is_the_sgd_noise_floor():
    """docs/theory.md §6.8: one ce head does not specialise; what delta_max remains is SGD noise
    (theory.noise_floor), 0.3-0.45 at lr 2, not specialisation."""
    configs = [TrainConfig(loss="ce", eval_every=600, eval_samples=2048, seed=s) for s in range(8)]
    results = train_many(configs)
    deltas = np.array([r.summary()["delta_max"] for r in results])
    weights = np.stack([np.asarray(r.model.pooling_weights())[0] for r in results])
    pred = theory.noise_floor(8, 64, 64, 16.0, 2.0, 256, 600, 2048, "ce", seeds=8, level=0.95)
    assert weights.std() == pytest.approx(pred["weight_std"], rel=0.25)
    low, high = pred["mean_of_seeds_interval"]
    assert low <= deltas.mean() <= high


def test_vmapped_runs_equal_single_runs_and_are_deterministic():
    configs = [SMALL.replace(seed=1, lr=1.0), SMALL.replace(seed=2, gain=6.0, init_scale=0.3)]
    batched = train_many(configs)
    for config, together in zip(configs, batched, strict=True):
        alone = train(config)
        again = train(config)
        np.testing.assert_array_equal(alone.history.pooling_weights, again.history.pooling_weights)
        np.testing.assert_array_equal(alone.history.phase_accuracy, again.history.phase_accuracy)
        np.testing.assert_allclose(
            together.history.pooling_weights, alone.history.pooling_weights, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(together.step_loss, alone.step_loss, rtol=1e-5)


# XLA compiles a batch of R runs as its own program for each R and picks fusion, vector
# width and vectorised transcendentals per shape and per CPU, so a run's numbers may differ
# in the last bits with the runs batched with it (measured: the held-out loss 1 float32 ulp
# apart, 6e-8, with XLA limited to AVX or SSE4.2; bit for bit with AVX2). Within one batch
# composition on one machine, results repeat bit for bit (test above). BATCH_RTOL: 1e-5 is
# ~80 float32 ulps, room for per-operation rounding differences summed over these 40 steps,
# which the dynamics cannot amplify much: near uniform pooling the perturbation grows by
# exp(lambda * lr * steps) (docs/theory.md §5), checked below to stay under 2.
BATCH_RTOL = 1e-5


def test_a_run_does_not_depend_on_the_runs_batched_with_it():
    # paper_repro trains every figure's runs in one call (sims.experiments.train_planned):
    # a run must give the numbers it gives alone, whatever shares its batch.
    config = SMALL.replace(seed=3)
    growth = theory.growth_rate(config.stride, config.chunks, config.gain, 1, config.loss)
    assert np.exp(max(growth, 0.0) * config.lr * config.steps) < 2.0
    alone = train(config)
    others = [SMALL.replace(seed=1, lr=0.5), SMALL.replace(seed=4, gain=5.0, init_scale=0.3)]
    together = train_many([others[0], config, others[1]])[1]
    for field in ("pooling_weights", "phase_accuracy", "loss"):
        np.testing.assert_allclose(
            getattr(together.history, field), getattr(alone.history, field), rtol=BATCH_RTOL
        )
    np.testing.assert_allclose(together.step_loss, alone.step_loss, rtol=BATCH_RTOL)


BATCH_SCRIPT = """
import json, sys
import numpy as np
from weakspots.idealized.toy.config import ConfigError, TrainConfig
from weakspots.sims.toy.train import train, train_many
small = TrainConfig(stride=4, chunks=16, dim=16, gain=8.0, batch=64, steps=40, eval_every=10,
                    eval_samples=128)
config = small.replace(seed=3)
alone = train(config)
together = train_many([small.replace(seed=1, lr=0.5), config])[1]
out = {}
for name, result in (("alone", alone), ("together", together)):
    out[name] = {f: np.asarray(getattr(result.history, f)).tolist()
                 for f in ("pooling_weights", "phase_accuracy", "loss")}
    out[name]["step_loss"] = result.step_loss.tolist()
print(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 ISAs")
def test_batch_composition_and_cpu_change_numbers_only_at_float32_rounding():
    # Other CPUs, emulated by capping the instructions XLA may use: each compiles its own
    # programs, and every run agrees with every other within BATCH_RTOL.
    results = {}
    for isa in ("SSE4_2", "AVX", "AVX2"):
        env = {**os.environ, "XLA_FLAGS": f"--xla_cpu_max_isa={isa}"}
        done = subprocess.run(
            [sys.executable, "-c", BATCH_SCRIPT], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        results[isa] = json.loads(done.stdout.strip().splitlines()[-1])
    reference = results["AVX2"]["alone"]
    for isa, runs in results.items():
        for name, fields in runs.items():
            for field, values in fields.items():
                np.testing.assert_allclose(
                    values, reference[field], rtol=BATCH_RTOL, err_msg=f"{isa} {name} {field}"
                )


def test_new_hyperparameter_values_do_not_recompile():
    learned = SMALL.replace(learn_gain=True)  # weight decay acts on a learned gain
    train_many([learned.replace(seed=0), learned.replace(seed=1)])
    sizes = trainer._advance_many._cache_size(), trainer._init_many._cache_size()
    train_many(
        [
            learned.replace(seed=5, lr=0.3, gain=3.0),
            learned.replace(seed=6, weight_decay=1e-3, init_scale=0.5),
        ]
    )
    assert (trainer._advance_many._cache_size(), trainer._init_many._cache_size()) == sizes


def test_held_out_set_is_shared_by_configs_that_draw_it_alike():
    # The set depends on the sampler's fields only: a config that differs elsewhere gets the
    # same numbers from the same compiled draw, equal to drawing with its own full config.
    base = SMALL.replace(eval_samples=64)
    other = base.replace(heads=2, phase_entropy=0.1, operator="low_rank", steps=7, lr=0.5)
    draw = jax.vmap(lambda p: trainer._eval_slice(other, False, 64, p, 0))
    direct = jit(lambda: draw(jnp.arange(4)))()  # compiled as the trainer's draw is
    shared = trainer.held_out_gram(base)
    size = trainer._held_out_gram._cache_size()
    for a, b in zip(
        jax.tree.leaves(trainer.held_out_gram(other)), jax.tree.leaves(direct), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(jax.tree.leaves(shared), jax.tree.leaves(direct), strict=True):
        np.testing.assert_array_equal(a, b)
    assert trainer._held_out_gram._cache_size() == size
    moved = trainer.held_out_gram(base.replace(chunks=17))
    assert moved.gram.shape[2] == 17 and trainer._held_out_gram._cache_size() == size + 1


def test_history_times_are_lr_times_steps():
    result = train(SMALL.replace(lr=0.5, steps=35, eval_every=10))
    np.testing.assert_array_equal(result.history.steps, [0, 10, 20, 30, 35])
    np.testing.assert_allclose(result.history.times, 0.5 * np.array([0, 10, 20, 30, 35]))
    assert result.step_loss.shape == (35,)


def test_divergence_names_the_step():
    with pytest.raises(TrainingDiverged, match=r"step \d+"):
        train(SMALL.replace(operator="linear", lr=1e38, gain=1e30))


def test_a_learned_gain_that_reaches_zero_is_a_divergence():
    # The decay step lr * wd * gain^2 = 2 * 1e3 * 64 sends log(gain) to -1e5: gain = 0 in float32.
    config = SMALL.replace(learn_gain=True, weight_decay=1e3)
    with pytest.raises(TrainingDiverged, match="learned gain reached 0 by step 10"):
        train(config)
    history, _, step_loss = trainer.run_batch(
        config, trainer.Hyper.stack([config]), stop_on_divergence=False
    )
    assert trainer.failure(step_loss[0], history.gain[0], history.steps[0]).startswith(
        "the learned gain reached 0"
    )
    assert trainer.failure(np.ones(3), np.ones((2, 1)), np.arange(2)) is None
    assert "step 2" in trainer.failure(np.array([1.0, np.nan]), np.ones((2, 1)), np.arange(2))


MEMORY_CASES = [
    TrainConfig(eval_samples=2048),  # inner products: the shared held-out set dominates
    TrainConfig(stride=4, chunks=256, dim=16, batch=512, eval_samples=512, heads=4),
    TrainConfig(operator="max_pool", eval_samples=256),  # per-token maps dominate
    TrainConfig(learn_projections=True, stride=4, chunks=32, dim=32, batch=128, eval_samples=256),
    TrainConfig(operator="low_rank", chunks=32, dim=32, batch=128, eval_samples=256),
    TrainConfig(operator="deepseek_v4", stride=4, chunks=32, dim=32, batch=128, eval_samples=256),
]


@pytest.mark.slow
@pytest.mark.parametrize("config", MEMORY_CASES, ids=lambda c: c.operator)
def test_memory_estimate_is_xlas_within_a_factor_of_two(config):
    # Against the compiler's own memory analysis of the training program, for 1 and 4 runs.
    for runs in (1, 4):
        hyper = trainer.Hyper.stack([config.replace(seed=s) for s in range(runs)])
        states = trainer._init_many(config.static, hyper)
        held = trainer._shared_held_out(config) if config.model.uses_gram else None
        compiled = trainer._advance_many.lower(
            config.static, states, hyper, held, jnp.asarray(True)
        ).compile()
        m = compiled.memory_analysis()
        xla = (m.temp_size_in_bytes + m.argument_size_in_bytes + m.output_size_in_bytes
               - m.alias_size_in_bytes)  # fmt: skip
        need, _ = trainer.memory_needed(config, runs)
        assert 0.5 < need / xla < 2.0, (runs, need, xla)


def test_a_batch_too_large_for_memory_is_refused_before_compiling():
    config = SMALL.replace(chunks=10_000_000, dim=10_000, operator="max_pool")
    size = trainer._advance_many._cache_size()
    message = r"^--eval-samples: training 1 run at once needs about .* lower --eval-samples"
    with pytest.raises(ConfigError, match=message):
        train(config)
    assert trainer._advance_many._cache_size() == size  # nothing compiled


@pytest.mark.parametrize("operator", ["max_pool", "low_rank", "deepseek_v4"])
def test_real_key_operators_train(operator):
    result = train(SMALL.replace(operator=operator, steps=10, eval_every=5, eval_samples=32))
    assert np.isfinite(result.step_loss).all()
    assert result.history.phase_accuracy.shape == (3, 4)

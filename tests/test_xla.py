"""idealized.xla: functions compiled with the project's options also compose with jax's transforms."""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots.idealized.toy.config import TrainConfig
from weakspots.idealized.toy.model import init_model
from weakspots.idealized.xla import (
    COMPILER_OPTIONS,
    filter_jit,
    jit,
    mapped_regions,
    release_compiled_programs,
)
from weakspots.sims.toy import train as trainer

pytestmark = pytest.mark.skipif(not COMPILER_OPTIONS, reason="no compiler options to refuse")


def twice_sin(x):
    return 2.0 * jnp.sin(x)


@pytest.mark.parametrize("decorate", [jit, filter_jit], ids=["jit", "filter_jit"])
def test_staged_and_differentiated_calls_match_the_closed_form(decorate):
    # jax refuses compiler options on a jit staged into another trace; these calls raised
    # ValueError before the fallback to a plain jit.
    f = decorate(twice_sin)
    x = jnp.linspace(-2.0, 2.0, 5)
    np.testing.assert_allclose(f(x), 2 * np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(f)(x), 2 * np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(eqx.filter_jit(f)(x), 2 * np.sin(x), rtol=1e-12)
    np.testing.assert_allclose(jax.vmap(jax.grad(f))(x), 2 * np.cos(x), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.grad(lambda y: f(y).sum()))(x), 2 * np.cos(x))


def test_static_arguments_hold_in_the_fallback():
    power = partial(jit, static_argnums=1)(lambda x, n: x**n)
    assert jax.grad(lambda x: power(x, 3))(2.0) == 12.0
    assert jax.jit(lambda x: power(x, 2))(3.0) == 9.0
    with pytest.raises(ValueError, match="hashable"):  # a traced value cannot be static
        jax.jit(lambda x, n: power(x, n))(3.0, 2)


def test_other_errors_still_raise():
    bad = jit(lambda x: x.reshape(7))
    with pytest.raises(TypeError):
        bad(jnp.ones(3))
    with pytest.raises(TypeError):
        jax.jit(bad)(jnp.ones(3))


def test_wrapper_keeps_the_jitted_interface():
    f = jit(twice_sin)
    assert f.__wrapped__ is twice_sin and f.__name__ == "twice_sin"
    size = f._cache_size()
    f(1.0)
    assert f._cache_size() == size + 1
    assert f.lower(1.0).compile()(1.0) == pytest.approx(2 * np.sin(1.0))


def test_evaluate_draws_its_held_out_set_inside_an_outer_jit():
    # evaluate(held_out=None) calls held_out_gram, which is jitted with options: traced in an
    # outer jit it raised before. Staged or not, it must score the same held-out set.
    config = TrainConfig(stride=4, chunks=16, dim=16, gain=8.0, eval_samples=64)
    model = init_model(jax.random.key(0), config.model, config.gain, 0.3)
    acc, loss = trainer.evaluate(config, model)
    staged_acc, staged_loss = jax.jit(lambda m: trainer.evaluate(config, m))(model)
    np.testing.assert_array_equal(staged_acc, acc)
    np.testing.assert_allclose(staged_loss, loss, rtol=1e-6)


def test_options_are_the_cpus_only(monkeypatch):
    # Read at the first call, from jax's default backend: CPU here; a GPU/TPU compiles plainly.
    on_cpu = jit(twice_sin)
    assert jax.default_backend() == "cpu" and on_cpu.compiler_options == COMPILER_OPTIONS
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    elsewhere = jit(twice_sin)
    assert elsewhere.compiler_options == {}
    assert float(elsewhere(1.0)) == pytest.approx(2 * np.sin(1.0))
    assert elsewhere._top is elsewhere._nested  # one plain jit: no options anywhere


@pytest.mark.skipif(mapped_regions() is None, reason="needs Linux's /proc memory maps")
def test_release_drops_compiled_programs_and_their_memory_maps():
    """Counted by the kernel (/proc/self/maps), independent of jax: 60 compiled programs
    hold at least 120 mappings, and releasing them gives those back; under the threshold
    nothing is released."""
    before, limit = mapped_regions()
    programs = [jax.jit(lambda x, k=k: jnp.sin(x) * k + jnp.cumsum(x)) for k in range(60)]
    for k, f in enumerate(programs):
        f(jnp.ones(7 + k)).block_until_ready()
    held, _ = mapped_regions()
    assert held - before >= 120
    assert not release_compiled_programs(fraction=1.0)  # far under the limit: kept
    assert mapped_regions()[0] >= held - 10
    assert release_compiled_programs(fraction=(before - 1) / limit)
    assert mapped_regions()[0] <= held - 120

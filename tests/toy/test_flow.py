"""The reduced flow's API (sims.toy.flow.solve_many, FlowConfig): an independent integrator,
closed-form growth rates, invariants, the event, compilation, batch independence, failures."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from weakspots import theory
from weakspots.idealized.toy.config import (
    FLOW_HYPER_FIELDS,
    ConfigError,
    FlowConfig,
    ModelConfig,
    TrainConfig,
)
from weakspots.idealized.toy.model import initial_pooling_logits
from weakspots.sims.experiments.measure import rk4
from weakspots.sims.toy import flow, train
from weakspots.sims.toy.flow import FlowFailed, solve, solve_many, stack
from weakspots.sims.toy.train import Hyper
from weakspots.theory import reduced_loss, specialization_order

RK4_TOLERANCE = 1e-6  # diffrax (rtol 1e-10) vs numpy RK4 at dt = 0.05: both far below this
GROWTH_RTOL = 1e-3  # early exponential phase (start 1e-7, t in [20, 50]) vs closed form
# Every run of the file saves 101 times and comes 8 to a call: one program per (s, H, ...).
SAVES, BATCH = 101, 8


def canonical(**changes) -> list[FlowConfig]:
    """BATCH configs from per-run lists (or shared scalars) of FlowConfig fields."""
    rows = [{} for _ in range(BATCH)]
    for name, value in changes.items():
        for row, v in zip(rows, np.broadcast_to(np.asarray(value, object), (BATCH,)), strict=True):
            row[name] = v.item() if hasattr(v, "item") else v
    return [FlowConfig(**{"saves": SAVES, **row}) for row in rows]


# ----------------------------------------------------------------------------- the config


def test_flow_config_defaults_are_the_canonical_and_trainers():
    config, train = FlowConfig(), TrainConfig()
    assert (config.stride, config.chunks, config.heads) == (8, 64, 1)
    assert config.dim is None  # d = infinity
    assert config.gain == train.gain and config.init_scale == train.init_scale
    assert config.t1 == train.lr * train.steps  # the flow time a default training run covers
    assert config.event_level == 0.25  # theory.specialization_time's default


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"stride": 0}, "--stride"),
        ({"chunks": 1}, "--chunks"),
        ({"dim": 0}, "--dim"),
        ({"dim": 64, "heads": 2}, "--dim"),
        ({"dim": 64, "loss": "ce"}, "--dim"),
        ({"gain": float("inf")}, "--gain"),
        ({"loss": "hinge"}, "--loss"),
        ({"learn_gain": 1}, "--learn-gain"),
        ({"gain_parametrisation": "exp"}, "--gain-parametrisation"),
        ({"phase_entropy": -1.0}, "--phase-entropy"),
        ({"t1": float("inf")}, "--t1"),
        ({"saves": 1}, "--saves"),
        ({"rtol": 0.0}, "--rtol"),
        ({"max_steps": 0}, "--max-steps"),
        ({"event_level": float("nan")}, "--event-level"),
    ],
)
def test_flow_config_errors_name_the_flag_and_value(changes, flag):
    with pytest.raises(ConfigError) as error:
        FlowConfig(**changes)
    message = str(error.value)
    assert message.startswith(flag + ":")
    assert any(str(v) in message for v in changes.values())


def test_static_keeps_only_what_a_program_is_specialised_to():
    base = FlowConfig()
    for name in FLOW_HYPER_FIELDS:
        if name == "dim":  # only whether it is set is static
            continue
        other = {bool: True, int: 7, float: 0.5}[type(getattr(base, name))]
        assert base.replace(**{name: other}).static == base.static, name
    assert FlowConfig(dim=64).static == FlowConfig(dim=1024).static != base.static
    for name, other in [("stride", 4), ("heads", 2), ("loss", "ce"), ("max_steps", 10)]:
        assert base.replace(**{name: other}).static != base.static, name
    assert base.replace(gain_parametrisation="linear").static != base.static
    assert FlowConfig(dim=64).static.dim == ModelConfig.dim


def trainer_starts(configs) -> np.ndarray:
    """The trainer's own initial pooling logits `(R, H, s)`, drawn by its compiled init."""
    state = train._init_many(configs[0].static, Hyper.stack(configs))  # noqa: SLF001
    return np.asarray(state.model.compressor.pooling_logits)


def test_initial_pooling_logits_are_the_trainers():
    configs = [
        TrainConfig(heads=2, seed=seed, init_scale=scale)
        for seed, scale in [(0, 0.01), (7, 0.3), (123, 1e-3)]
    ]
    seeds = jnp.asarray([c.seed for c in configs], jnp.uint32)
    scales = jnp.asarray([c.init_scale for c in configs], jnp.float32)
    draw = jax.jit(jax.vmap(lambda k, a: initial_pooling_logits(k, 2, 8, a)))
    # bit for bit, both compiled (eager evaluation may round the last bit differently)
    np.testing.assert_array_equal(draw(seeds, scales), trainer_starts(configs))


# ----------------------------------------------------------------------------- the solution


@pytest.mark.parametrize("heads", [1, 2])
def test_solve_many_matches_an_independent_rk4(heads):
    chunks = [64, 11, 256, 20, 64, 30, 64, 11]
    gain = np.array([16.0, 9.0, 16.0, 16.0, 24.0, 12.0, 8.0, 4.0])
    starts = 0.3 * np.random.default_rng(heads).standard_normal((BATCH, heads, 8))
    configs = canonical(chunks=chunks, gain=gain, heads=heads, t1=300.0, rtol=1e-10, atol=1e-12)
    ts = np.linspace(0.0, 300.0, SAVES)
    hist = stack(solve_many(configs, starts=starts, times=ts))
    np.testing.assert_allclose(hist.times, np.broadcast_to(ts, (BATCH, SAVES)), rtol=1e-15)
    for run in range(0, BATCH, 2):  # half the runs: the numpy RK4 is the slow part
        logits = rk4(starts[run], np.full(heads, gain[run]), chunks[run], ts[::20], dt=0.05)
        weights = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(hist.pooling_weights[run, ::20], weights, atol=RK4_TOLERANCE)


def test_early_flow_grows_at_the_closed_form_rate():
    chunks = np.array([64, 256, 20, 64, 64, 30, 100, 17])
    gain = np.array([16, 16, 16, 24, 12, 16, 20, 16], float)
    configs = canonical(
        chunks=chunks, gain=gain, seed=range(BATCH), init_scale=1e-7, t1=50.0, rtol=1e-11
    )
    hist = stack(solve_many([c.replace(atol=1e-18) for c in configs]))
    delta = np.asarray(specialization_order(jnp.log(hist.pooling_weights)))  # (B, T)
    rate = np.log(delta[:, 100] / delta[:, 20]) / (hist.times[0, 100] - hist.times[0, 20])
    np.testing.assert_allclose(rate, theory.growth_rate(8, chunks, gain), rtol=GROWTH_RTOL)


def test_flow_starts_at_the_trainers_start_and_loss_never_increases():
    scales = [1e-3, 0.3, 1e-2, 1e-3, 1e-2, 0.1, 1e-2, 1e-2]
    configs = canonical(
        seed=range(BATCH),
        init_scale=scales,
        chunks=[64, 256, 11, 20, 64, 64, 64, 64],
        gain=[24.0, 16.0, 9.0, 16.0, 8.0, 4.0, 1.0, 1.0],
        weight_decay=[0, 0, 0, 0, 0, 0, 1e-4, 1e-3],
        learn_gain=[False] * 6 + [True] * 2,
        t1=2000.0,
    )
    hist = stack(solve_many(configs))
    assert np.all(np.diff(hist.loss, axis=1) <= 1e-12)  # gradient flow: the loss never rises
    starts = trainer_starts([TrainConfig(seed=c.seed, init_scale=c.init_scale) for c in configs])
    for run, config in enumerate(configs):
        start = jnp.asarray(starts[run], jnp.float64)
        np.testing.assert_allclose(
            hist.pooling_weights[run, 0], jax.nn.softmax(start, -1), rtol=1e-12
        )
        gain = jnp.array([config.gain])
        loss0 = reduced_loss(start, gain, float(config.chunks), "mse", config.weight_decay)
        np.testing.assert_allclose(hist.loss[run, 0], loss0, rtol=1e-12)
    # a learned gain under weight decay moves; a fixed one does not
    assert np.all(np.abs(hist.gain[-2:, -1] - 1.0) > 1e-3)
    np.testing.assert_allclose(hist.gain[:-2, -1], hist.gain[:-2, 0], rtol=1e-12)


def test_specialization_time_is_where_the_order_parameter_reaches_the_level():
    configs = canonical(seed=range(BATCH), init_scale=[1e-3, 1e-2] * 4, t1=400.0)
    configs[-1] = configs[-1].replace(chunks=8)  # below N_c: never specialises
    configs[-2] = configs[-2].replace(init_scale=0.3)  # starts above the level
    hist = stack(solve_many(configs))
    t_star = hist.specialization_time
    assert np.isinf(t_star[-1]) and t_star[-2] == 0.0
    # Independently: solve each run again to 2 t*, saved at t* (index 50), where the order
    # parameter must be at the level; that solve's own event lands on the same t*.
    again = [c.replace(t1=2 * float(t)) for c, t in zip(configs[:-2], t_star[:-2], strict=True)]
    ends = stack(solve_many(again, batch_size=BATCH))
    np.testing.assert_allclose(ends.times[:, 50], t_star[:-2], rtol=1e-14)
    order = specialization_order(jnp.log(ends.pooling_weights[:, 50]))
    np.testing.assert_allclose(order, 0.25, rtol=1e-6)  # the solver's rtol 1e-8, amplified
    np.testing.assert_allclose(ends.specialization_time, t_star[:-2], rtol=1e-6)


def test_a_run_does_not_depend_on_the_runs_solved_with_it():
    configs = canonical(
        seed=range(BATCH), gain=[16.0, 9.0, 24.0, 4.0] * 2, chunks=[64, 11, 256, 20] * 2
    )
    together = solve_many(configs)
    alone = solve_many([configs[2]] * BATCH)[0]  # same program, companions all alike
    # Float64 rounding of a vectorised loop may differ with the batch's contents; the
    # adaptive step control can turn that into differences far below rtol (1e-8).
    for name in ("pooling_weights", "gain", "loss", "specialization_time"):
        np.testing.assert_allclose(
            getattr(alone.history, name), getattr(together[2].history, name), rtol=1e-9
        )


@pytest.mark.slow
def test_one_compilation_per_static_group_serves_every_hyperparameter():
    heads2 = dict(heads=2, stride=8)
    first = canonical(gain=16.0, init_scale=1e-2) + canonical(gain=12.0, **heads2)
    solve_many(first)
    before = flow._solve_batch._cache_size()
    varied = canonical(
        chunks=range(10, 18),
        gain=np.linspace(4.0, 30.0, BATCH),
        init_scale=np.geomspace(1e-4, 0.3, BATCH),
        seed=range(100, 108),
        weight_decay=[0, 1e-4] * 4,
        learn_gain=[True, False] * 4,
        phase_entropy=[0.0, 1e-3] * 4,
        rtol=1e-7,
        event_level=0.5,
    ) + canonical(gain=20.0, seed=range(BATCH), **heads2)
    results = solve_many(varied)
    assert flow._solve_batch._cache_size() == before
    assert [r.config for r in results] == varied
    # t1 and saves travel too: runs that save at different times share one program
    mixed = canonical(t1=np.linspace(100.0, 800.0, BATCH), saves=[101, 64] * 4)
    solve_many(mixed)
    after = flow._solve_batch._cache_size()
    assert after <= before + 1  # at most the variant whose save times differ per run
    out = solve_many([c.replace(t1=c.t1 * 2) for c in mixed])
    assert flow._solve_batch._cache_size() == after
    assert [len(r.history.times) for r in out] == [101, 64] * 4
    assert all(r.history.times[-1] == r.config.t1 for r in out)


@pytest.mark.slow  # L_d's quadrature: a long compile; the CLI test exercises dim by default
def test_finite_d_flow_has_the_finite_d_growth_rate():
    dims = [64, 256, 1024, 10_000_000]
    configs = [FlowConfig(dim=d, seed=d % 97, init_scale=1e-7, t1=50.0, rtol=1e-11) for d in dims]
    hist = stack(solve_many([c.replace(atol=1e-18) for c in configs]))
    delta = np.asarray(specialization_order(jnp.log(hist.pooling_weights)))
    rate = np.log(delta[:, 100] / delta[:, 20]) / (hist.times[0, 100] - hist.times[0, 20])
    expected = [theory.growth_rate_finite_d(8, 64, 16.0, d) for d in dims]
    np.testing.assert_allclose(rate, expected, rtol=GROWTH_RTOL)
    assert rate[0] < rate[1] < rate[2]  # L_d's growth rate approaches L_inf's from below
    np.testing.assert_allclose(rate[-1], theory.growth_rate(8, 64, 16.0), rtol=GROWTH_RTOL)


# ----------------------------------------------------------------------------- failures

FAILING = FlowConfig(stride=4, chunks=8, t1=1e12, saves=5, max_steps=64)


def test_a_failed_solve_raises_naming_the_run_and_why():
    with pytest.raises(FlowFailed, match=r"run 0 .*t1=1e\+12.*--max-steps 64"):
        solve(FAILING)


def test_without_throw_a_failed_run_is_marked_and_nan():
    result = solve(FAILING, throw=False)
    assert "--max-steps 64" in result.failure
    assert all(np.all(np.isnan(x)) for x in dataclasses.astuple(result.history)[1:])
    fine = solve(FAILING.replace(t1=5.0))  # the same program, a horizon it can reach
    assert fine.failure is None and np.all(np.isfinite(fine.history.loss))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="must end at its t1"):
        solve(FlowConfig(t1=10.0, saves=3), times=[0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="strictly increasing"):
        solve(FlowConfig(t1=10.0, saves=3), times=[0.0, 0.0, 10.0])
    with pytest.raises(ValueError, match="starts"):
        solve(FlowConfig(), starts=np.zeros((2, 8)))
    with pytest.raises(TypeError, match="FlowConfig"):
        solve_many([TrainConfig()])


def test_specialization_time_is_the_first_crossing_between_saves():
    """A learned gain at weight decay 1e-4 specialises, then returns to uniform pooling
    (THEORY 6.6) before the middle save: every save of the 3-save run is below the level,
    yet its t* is the crossing, where a second solve saved at t* finds the order parameter
    at the level."""
    config = FlowConfig(
        learn_gain=True,
        weight_decay=1e-4,
        init_scale=1e-3,
        t1=1.2e5,  # saved at 0, 6e4, 1.2e5 (and 3e4 added by the solve's padding)
        saves=3,
        gain_parametrisation="linear",
    )
    sparse = solve(config)
    t_star = float(sparse.history.specialization_time)
    assert np.isfinite(t_star) and t_star < config.t1 / 2
    orders = specialization_order(jnp.log(sparse.history.pooling_weights))
    assert np.all(np.asarray(orders) < config.event_level)  # crossed and returned unseen
    again = solve(config.replace(t1=2 * t_star)).history  # saved at 0, t*, 2 t*
    np.testing.assert_allclose(again.times[1], t_star, rtol=1e-14)
    order = specialization_order(jnp.log(again.pooling_weights[1]))
    np.testing.assert_allclose(order, config.event_level, rtol=1e-6)  # rtol 1e-8, amplified
    np.testing.assert_allclose(again.specialization_time, t_star, rtol=1e-6)

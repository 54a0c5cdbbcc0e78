"""Growth rates, thresholds and time to specialise (theory.thresholds) vs the reduced flow."""

import numpy as np
import pytest

from weakspots.idealized.toy.config import FlowConfig
from weakspots.sims.experiments.canonical import keyed_starts
from weakspots.sims.experiments.measure import fitted_rates, log_weights_centred
from weakspots.sims.toy.flow import solve_many, stack
from weakspots.theory import (
    critical_chunks,
    critical_gain,
    growth_rate,
    growth_rates,
    specialization_time,
)

GROWTH_RTOL = 1e-3  # early exponential phase vs closed form
TIME_RTOL = 0.10  # time to specialise: prediction vs ODE
N_SAVE = 101
BATCH = 8


def _flows(starts, stride, chunks, gain, heads=1, **fields):
    """The reduced flows from `starts` (B, H, s), one per entry of `chunks` and `gain`
    (numbers or (B,)), stacked: a FlowHistory with a leading (B,) axis."""
    runs = len(starts)
    configs = [
        FlowConfig(stride=stride, heads=heads, chunks=int(n), gain=float(g), **fields)
        for n, g in zip(
            np.broadcast_to(chunks, (runs,)), np.broadcast_to(gain, (runs,)), strict=True
        )
    ]
    return stack(solve_many(configs, starts=starts))


def test_closed_form_numbers_in_theory():
    np.testing.assert_allclose(growth_rate(8, 64, 16.0), 0.058524, atol=5e-7)
    np.testing.assert_allclose(growth_rate(4, 64, 8.0), 0.117048, atol=5e-7)
    np.testing.assert_allclose(critical_chunks(16.0, 8), 15.78, atol=5e-3)
    np.testing.assert_allclose(critical_gain(critical_chunks(16.0, 8), 8), 16.0, rtol=1e-12)
    np.testing.assert_allclose(critical_gain(critical_chunks(16.0, 8, 3), 8, 3), 16.0, rtol=1e-12)
    assert growth_rate(8, 64, 16.0, loss="ce") < 0.0  # one ce head is convex


@pytest.mark.parametrize(
    ("stride", "chunks", "gain"),
    [
        (8, [64, 256, 20, 64, 64, 30, 100, 17], [16, 16, 16, 24, 12, 16, 20, 16]),
        (4, [64, 64, 20, 256, 64, 40, 30, 100], [8, 6, 8, 8, 10, 8, 5, 12]),
    ],
)
def test_growth_rate_matches_early_flow(stride, chunks, gain):
    chunks, gain = np.asarray(chunks, float), np.asarray(gain, float)
    hist = _flows(
        keyed_starts(stride, BATCH, 1, stride, 1e-7),
        stride,
        chunks,
        gain,
        t1=50.0,
        saves=N_SAVE,
        rtol=1e-11,
        atol=1e-18,
    )
    common, _ = fitted_rates(hist, 20, 100)
    np.testing.assert_allclose(common, growth_rate(stride, chunks, gain), rtol=GROWTH_RTOL)


def test_multi_head_growth_rates_match_early_flow():
    chunks = np.array([64, 64, 256, 20, 64, 30, 100, 64], float)
    gain = np.array([16, 24, 16, 16, 12, 16, 20, 8], float)
    hist = _flows(
        keyed_starts(3, BATCH, 2, 8, 1e-7),
        8,
        chunks,
        gain,
        heads=2,
        t1=50.0,
        saves=N_SAVE,
        rtol=1e-11,
        atol=1e-18,
    )
    common, differential = fitted_rates(hist, 20, 100)
    lam_c, lam_d = growth_rates(8, chunks, gain, heads=2)
    np.testing.assert_allclose(common, lam_c, rtol=GROWTH_RTOL)
    np.testing.assert_allclose(differential, lam_d, rtol=GROWTH_RTOL)


def test_growth_rate_figure_measures_each_mode_of_two_heads():
    # Figure 4 fits rates over a window of the flow. Fitting delta itself mixed the common
    # and differential modes and read 1-4% below lambda_differential at --full; each mode's
    # own amplitude (measure.mode_norms) grows at its own rate.
    from weakspots.sims.experiments.canonical import random_starts
    from weakspots.sims.experiments.toy.growth_rate import measure_growth_rate

    lam_c, lam_d = (float(x) for x in growth_rates(8, 64, 16.0, heads=2))
    assert lam_c / lam_d == pytest.approx(0.867, abs=1e-3)  # close: the modes would mix
    starts = random_starts(4, 2, 8, 1e-6, seed=11)
    rates = measure_growth_rate(8, 64, 16.0, 2, starts, lam_d)
    np.testing.assert_allclose(rates["rates"], lam_d, rtol=GROWTH_RTOL)
    np.testing.assert_allclose(rates["common_rates"], lam_c, rtol=GROWTH_RTOL)


@pytest.mark.parametrize("heads", [1, 2])
def test_threshold_uniform_below_specialised_above(heads):
    pairs = [(12.0, 8), (16.0, 8), (20.0, 8), (24.0, 8)]
    gains, chunks = [], []
    for gain, stride in pairs:
        n_c = float(critical_chunks(gain, stride, heads))
        gains += [gain, gain]
        chunks += [np.floor(n_c), np.ceil(n_c)]
    starts = keyed_starts(4, BATCH, heads, 8, 1e-3)
    hist = _flows(starts, 8, chunks, gains, heads=heads, t1=2e5, saves=N_SAVE)
    spread = np.linalg.norm(log_weights_centred(hist.pooling_weights), axis=(-2, -1))
    below, above = slice(0, None, 2), slice(1, None, 2)
    assert np.all(spread[below, -1] < 1e-3 * spread[below, 0])  # decayed back to uniform
    assert np.all(np.isinf(hist.specialization_time[below]))
    assert np.all(np.isfinite(hist.specialization_time[above]))
    assert np.all(spread[above, -1] > 1.0)


@pytest.mark.parametrize(
    ("stride", "chunks", "gain"), [(8, 64, 16.0), (8, 256, 16.0), (4, 64, 8.0)]
)
def test_specialization_time_within_ten_percent(stride, chunks, gain):
    rng = np.random.default_rng(stride + chunks)
    for init_scale in (1e-6, 1e-4, 1e-2):
        logits0 = init_scale * rng.standard_normal((BATCH, 1, stride))
        hist = _flows(logits0, stride, chunks, gain, t1=3000.0, saves=N_SAVE, rtol=1e-9, atol=1e-14)
        ode = np.asarray(hist.specialization_time)
        per_start = [
            specialization_time(stride, chunks, gain, init_scale, pooling_logits=z) for z in logits0
        ]
        np.testing.assert_allclose(per_start, ode, rtol=TIME_RTOL)
        typical = specialization_time(stride, chunks, gain, init_scale)
        np.testing.assert_allclose(typical, np.mean(ode), rtol=TIME_RTOL)

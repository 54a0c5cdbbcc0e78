"""The finite-d support prediction (theory.support, dim=d) against the exact L_d and its flow."""

import math

import jax
import numpy as np
import pytest

from weakspots.theory import (
    covered,
    finite_d_loss,
    finite_d_support_loss,
    finite_d_support_rates,
    growth_rate_finite_d,
    internal_rate,
    interpolated_finite_d_loss,
    interpolated_growth_rate,
    isotropic_starts,
    per_phase_loss_coefficients,
    reentry_rate,
    sampled_final_weights,
    support_loss,
)

LOSS_ATOL = 1e-6  # interpolant vs quadrature, value (measured <= 2e-8 at degrees (64, 24))
GRAD_ATOL = 1e-5  # and gradient in the logits (measured <= 3e-7)
RATE_RTOL = 1e-4  # lambda_d: interpolant's Jacobian vs the quadrature's autodiff Hessian
LIMIT_RTOL = 2e-3  # d = 1e6 against the d = inf closed forms (O(1/sqrt(d)) corrections)


@pytest.mark.parametrize(("stride", "chunks"), [(4, 64.0), (8, 24.0)])
def test_interpolant_reproduces_the_quadrature_loss_and_gradient(stride, chunks):
    coefficients = per_phase_loss_coefficients(chunks, 16.0, 64.0)
    rng = np.random.default_rng(0)
    scales = np.repeat([0.01, 1.0, 3.0], 3)[:, None]  # near uniform, spread, nearly one-hot
    logits = rng.standard_normal((len(scales), stride)) * scales
    exact = jax.jit(jax.vmap(jax.value_and_grad(finite_d_loss), (0, None, None, None)))
    approx = jax.jit(jax.vmap(jax.value_and_grad(interpolated_finite_d_loss), (0, None)))
    loss, grad = exact(logits, 16.0, chunks, 64.0)
    loss_i, grad_i = approx(logits, coefficients)
    np.testing.assert_allclose(loss_i, loss, atol=LOSS_ATOL)
    np.testing.assert_allclose(grad_i, grad, atol=GRAD_ATOL)


def test_interpolated_growth_rate_matches_the_quadrature_hessian():
    got = interpolated_growth_rate(8, 24.0, 16.0, 64.0)
    assert got == pytest.approx(growth_rate_finite_d(8, 24.0, 16.0, 64.0), rel=RATE_RTOL)


def test_support_rates_and_loss_reach_the_closed_forms_at_large_dim():
    for k in (2, 3, 4):
        internal, reentry = finite_d_support_rates(8, 64.0, 16.0, 1e6, k)
        assert internal == pytest.approx(float(internal_rate(8, 64.0, 16.0, k)), rel=LIMIT_RTOL)
        assert reentry == pytest.approx(float(reentry_rate(8, 64.0, 16.0, k)), rel=LIMIT_RTOL)
        assert finite_d_support_loss(8, 64.0, 16.0, 1e6, k) == pytest.approx(
            float(support_loss(8, 64.0, 16.0, k)), rel=LIMIT_RTOL
        )


def test_stable_uniform_point_stays_uniform():
    # N = 12 < N_c(64) = 18.4 at s = 8: lambda_d < 0, so every start stays uniform
    weights = sampled_final_weights(8, 12.0, 16.0, samples=4, dim=64.0)
    np.testing.assert_allclose(weights, 1 / 8)


@pytest.mark.slow  # about 2-3 min on 2 cores: the diffrax flow on the exact quadrature
def test_finite_d_support_matches_the_diffrax_flow_of_the_quadrature_from_the_same_starts():
    """s=8 N=24 gain 16 d=64: per start, the RK4 flow of the interpolant and diffrax's Tsit5
    flow of theory.finite_d_loss itself end on the same phases."""
    from weakspots.idealized.toy.config import FlowConfig
    from weakspots.sims.toy.flow import solve_many, stack

    stride, chunks, starts, amplitude = 8, 24.0, 6, 1e-2
    z = isotropic_starts(stride, starts, seed=3, amplitude=amplitude)
    ours = sampled_final_weights(
        stride, chunks, 16.0, samples=starts, seed=3, amplitude=amplitude, dim=64.0
    )[:, 0]
    t_end = math.log(1 / amplitude) / interpolated_growth_rate(stride, chunks, 16.0, 64.0) + 1200
    config = FlowConfig(
        stride=stride,
        chunks=int(chunks),
        gain=16.0,
        dim=64,
        t1=t_end,
        saves=2,
        rtol=1e-6,
        atol=1e-8,
    )
    hist = stack(solve_many([config] * starts, starts=z, times=[0.0, t_end]))
    theirs = np.asarray(hist.pooling_weights[:, -1, 0])
    np.testing.assert_array_equal(covered(ours, stride), covered(theirs, stride))
    assert set(covered(ours, stride).sum(-1).tolist()) >= {5}

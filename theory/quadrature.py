"""Quadrature rules shared by theory/: the query norm rho ~ chi_d and standard normals.

Finite-d predictions condition on the query norm (docs/theory.md §6.12): with r = |q|^2,
rho = sqrt(r d) ~ chi_d, and every other inner product is Gaussian given rho. Two rules
integrate over rho:

* chi_nodes: generalised Gauss-Laguerre in t = rho^2 / 2 ~ Gamma(d/2), nodes from the
  eigenvalues of the Jacobi matrix (Golub-Welsch). Exact for polynomials of degree
  2 n - 1 in rho^2; numpy, for a concrete d.
* chi_nodes_traced: Gauss-Hermite nodes around the mode sqrt(d - 1) of chi_d, reweighted by
  the ratio of the chi_d density to the Gaussian; jax, so d may be traced (one compilation
  serves every d, as theory.finite_d needs).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64_module


def _read_only(*arrays):
    for a in arrays:
        a.flags.writeable = False
    return arrays


@functools.lru_cache(maxsize=64)
def chi_nodes(dof, nodes):
    """Nodes and weights for E f(rho), rho ~ chi_dof: generalised Gauss-Laguerre (module docstring).

    dof: degrees of freedom (> 0; d for the query norm); nodes: n. Returns read-only
    (rho (n,), weights (n,)) with weights summing to 1.
    """
    shape = dof / 2.0 - 1.0  # t = rho^2 / 2 has density t^shape e^-t / Gamma(dof / 2)
    i = np.arange(nodes, dtype=float)
    diagonal = 2.0 * i + shape + 1.0
    off = np.sqrt(i[1:] * (i[1:] + shape))
    t, vectors = np.linalg.eigh(np.diag(diagonal) + np.diag(off, 1) + np.diag(off, -1))
    weights = vectors[0] ** 2
    return _read_only(np.sqrt(2.0 * np.maximum(t, 0.0)), weights / weights.sum())


@functools.lru_cache(maxsize=16)
def normal_nodes(nodes):
    """Nodes and weights for E f(Z), Z ~ N(0, 1): probabilists' Gauss-Hermite, weights summing to 1.

    Returns read-only (z (n,), weights (n,)).
    """
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    return _read_only(z, w / w.sum())


def chi_nodes_traced(dof, nodes):
    """rho nodes and log-weights for E f(rho), rho ~ chi_dof, with dof a jax value (may be traced).

    Gauss-Hermite nodes around the mode sqrt(dof - 1) with standard deviation sqrt(1/2),
    weights times the ratio of the chi_dof density to that Gaussian, normalised (module
    docstring). Returns (rho (n,), log_weights (n,)) as jax arrays.
    """
    z, w = normal_nodes(nodes)
    z, log_w = jnp.asarray(z), jnp.log(jnp.asarray(w))
    centre = jnp.sqrt(jnp.maximum(dof - 1.0, 0.0))
    rho = centre + math.sqrt(0.5) * z
    inside = rho > 0.0
    safe = jnp.where(inside, rho, 1.0)
    log_density = (dof - 1.0) * jnp.log(safe) - safe**2 / 2.0 + z**2 / 2.0
    log_weight = jnp.where(inside, log_w + log_density, -jnp.inf)
    return safe, log_weight - jax.nn.logsumexp(log_weight)


def log_chi_mean(dof):
    """E log chi_k = (log 2 + digamma(k/2)) / 2 for an integer k >= 1 (digamma by recursion)."""
    half = dof / 2.0
    if dof % 2 == 0:
        digamma, x = -np.euler_gamma, 1.0
    else:
        digamma, x = -np.euler_gamma - 2.0 * math.log(2.0), 0.5
    while x < half - 1e-9:
        digamma += 1.0 / x
        x += 1.0
    return 0.5 * (math.log(2.0) + digamma)


float64_module(__name__)  # 64-bit types inside these functions only

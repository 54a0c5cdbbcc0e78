"""Coverage of the induction model under SGD: heads driven by their own start and by the
minibatch noise they all share (docs/induction.md §9 derives it).

Static gates, SGD with learning rate `lr` on the mean loss of `batch` problems. A problem's
loss is its query position's, `l_r` (r = 0..S-2, `idealized.induction.position_losses`), so
one step's gradient is `sum_r (n_r / B) grad l_r` with `n ~ Multinomial(B, 1/(S-1))`: the
noise `sum_r e_r grad l_r`, `e = n/B - 1/(S-1)`, `Cov(e) = C = (diag(p) - p p^T) / B`, is the
same draw `e` for every head. Around the mean path `theta_bar` (uniform start, plain gradient
descent on the population loss: it stays symmetric in the pairs and only drifts the common
modes) the fluctuation `x = theta - theta_bar` (every head's key and value logits) obeys, to
first order in x,

    x_{k+1} = (I - lr H_k) x_k - lr sum_r e_{k,r} (g_{k,r} + H_{k,r} x_k),

`H_k` the population Hessian, `g_{k,r}`, `H_{k,r}` the gradient and Hessian of `l_r`, all at
`theta_bar_k` and over all heads together. Its covariance is exact for this linear system:

    Sigma_{k+1} = M Sigma M^T + lr^2 (G^T C G + sum_{r,r'} C_{rr'} H_r Sigma H_{r'}),
    M = I - lr H_k,  G = (g_{k,r})_r,  Sigma_0 = rho^2 I.

`G^T C G` is the shared part (one e for all heads); the `H_r Sigma H_r'` part is the noise
that depends on each head's own state. The propagation stops where the pair modes leave the
linear regime (their spread reaches `LINEAR_LIMIT`), or at the last step. Each head then
selects the argmax over r of its growing pair mode `wK thetaK(r) + wV thetaV(r+1)`, (wK, wV)
the top eigenvector of the one-head key/value block of -H on the pair modes; P(k distinct
positions) is a Monte Carlo of that argmax under N(0, Sigma). As lr -> 0, Sigma is rho^2
times the flow's own propagator, the heads' modes are independent up to the O(1/N) coupling
through the normaliser, and the law is the occupancy law (`induction.coverage_distribution`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized import induction
from weakspots.idealized.induction import KEY, VALUE, StaticGates
from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit

LINEAR_LIMIT = 1.0  # pair-mode spread (logits) at which selection is read: softmax turns nonlinear
DRAWS = 2**16  # Gaussian draws for P(k distinct)


def _position_losses(flat, heads, stride, chunks, sc):
    gates = StaticGates(flat.reshape(heads, 2, stride))
    return induction.position_losses(gates, chunks, sc)


@functools.lru_cache(maxsize=16)
def _propagator(heads: int, stride: int, chunks: int):
    dim = heads * 2 * stride
    p = 1.0 / (stride - 1)
    # key logits 0..S-2 of head 0, centred: the pair modes' spread
    pair = np.zeros((stride - 1, dim))
    pair[np.arange(stride - 1), np.arange(stride - 1)] = 1.0
    centre = jnp.asarray(pair - pair.mean(axis=0, keepdims=True))

    def run(sc, lr, batch, rho, limit, steps, mask):
        losses = functools.partial(
            _position_losses, heads=heads, stride=stride, chunks=chunks, sc=sc
        )
        grads = jax.jacrev(losses)
        hessians = jax.jacfwd(jax.jacrev(losses))
        cov_e = (p * jnp.eye(stride - 1) - p * p) / batch

        def step(carry):
            k, theta, sigma, log_scale, _ = carry
            g = grads(theta)  # (S-1, D)
            h_r = hessians(theta)  # (S-1, D, D)
            m = jnp.eye(dim) - lr * jnp.mean(h_r, axis=0)
            own = jnp.einsum("rs,rij,jk,slk->il", cov_e, h_r, sigma, h_r)
            shared = jnp.exp(-log_scale) * (g.T @ cov_e @ g)
            new = m @ sigma @ m.T + lr**2 * mask * (shared + own)  # in units of exp(log_scale)
            norm = jnp.trace(new)
            spread = jnp.sqrt(
                jnp.exp(log_scale) * jnp.trace(centre @ new @ centre.T) / (stride - 1)
            )
            theta = theta - lr * jnp.mean(g, axis=0)
            return k + 1, theta, new / norm, log_scale + jnp.log(norm), spread >= limit

        def going(carry):
            k, *_, done = carry
            return (k < steps) & ~done

        carry = (
            jnp.asarray(0),
            jnp.zeros(dim),
            jnp.eye(dim) / dim,
            jnp.log(dim * rho**2),
            jnp.asarray(False),
        )
        k, theta, sigma, log_scale, done = jax.lax.while_loop(going, step, carry)
        return k, theta, sigma, log_scale, done, jnp.mean(hessians(theta), axis=0)

    return jit(run)


def fluctuation_covariance(
    heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps, limit=LINEAR_LIMIT,
    head_batches=False,
) -> dict:  # fmt: skip
    """The linearised SGD's fluctuation about the mean path, where selection is read
    (module docstring): `covariance` (D, D) over every head's key and value logits, D = 2 m S,
    in the layout (head, branch, position), scaled by exp(`log_scale`); `mean` the mean
    path's logits there; `hessian` the population Hessian there; `stopped` whether the pair
    modes reached `limit` before the last step, and `step` where. `head_batches`: each head
    draws its own batch, so the noise has no part across heads."""
    dim = 2 * int(stride)
    heads_of = np.arange(int(heads) * dim) // dim
    mask = (
        (heads_of[:, None] == heads_of[None, :]) if head_batches else np.ones((len(heads_of),) * 2)
    )
    sc = induction.Scales(*(jnp.asarray(v, jnp.float64) for v in (vocab, gamma, beta, 0.0)))
    k, theta, sigma, log_scale, done, hessian = _propagator(int(heads), int(stride), int(chunks))(
        sc,
        *(jnp.asarray(v, jnp.float64) for v in (lr, batch, init_scale, limit)),
        jnp.asarray(steps),
        jnp.asarray(mask, jnp.float64),
    )
    return {
        "covariance": np.asarray(sigma),
        "log_scale": float(log_scale),
        "mean": np.asarray(theta).reshape(heads, 2, stride),
        "hessian": np.asarray(hessian),
        "stopped": bool(done),
        "step": int(k),
    }


def pair_mode_readout(hessian, heads: int, stride: int) -> np.ndarray:
    """The linear map (m (S-1), D) from every head's logits to its pair modes' growing
    amplitude `wK thetaK_h(r) + wV thetaV_h(r+1)`, r = 0..S-2, where (wK, wV) is the top
    eigenvector of minus the one-head key/value block of `hessian` on the zero-sum pair modes."""
    dim = heads * 2 * stride
    key = np.zeros(dim)
    value = np.zeros(dim)
    key[[KEY * stride + 0, KEY * stride + 1]] = (1.0, -1.0)  # head 0, pair mode (0) - (1)
    value[[VALUE * stride + 1, VALUE * stride + 2]] = (1.0, -1.0)
    basis = np.stack([key, value]) / math.sqrt(2.0)
    block = -basis @ np.asarray(hessian) @ basis.T
    _, vectors = np.linalg.eigh(block)
    w = vectors[:, -1] * np.sign(vectors[:, -1].sum() or 1.0)
    out = np.zeros((heads, stride - 1, dim))
    for h in range(heads):
        for r in range(stride - 1):
            out[h, r, (h * 2 + KEY) * stride + r] = w[0]
            out[h, r, (h * 2 + VALUE) * stride + r + 1] = w[1]
    return out.reshape(heads * (stride - 1), dim)


@functools.lru_cache(maxsize=64)
def _pair_modes(
    heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps, limit, head_batches
):
    """The covariance (m (S-1), m (S-1)) of every head's growing pair modes where selection
    is read (`fluctuation_covariance` through `pair_mode_readout`), read-only."""
    f = fluctuation_covariance(
        heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps, limit,
        head_batches,
    )  # fmt: skip
    readout = pair_mode_readout(f["hessian"], heads, stride)
    cov = readout @ f["covariance"] @ readout.T
    cov = (cov + cov.T) / 2
    cov.flags.writeable = False
    return cov


def _settings(
    heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps, limit, head_batches
):  # fmt: skip
    return (
        int(heads), int(stride), int(chunks), int(vocab), float(gamma), float(beta),
        float(lr), float(batch), float(init_scale), int(steps), float(limit), bool(head_batches),
    )  # fmt: skip


def sgd_coverage_distribution(
    heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps,
    limit=LINEAR_LIMIT, draws=DRAWS, seed=0, head_batches=False,
) -> np.ndarray:  # fmt: skip
    """P(k distinct positions), k = 0..m, for SGD on static gates from the linearised
    dynamics with shared minibatch noise (module docstring): the argmax of each head's pair
    modes in `draws` Gaussian draws (numpy `seed`).

    heads m, stride S, chunks L, vocab N, gamma, beta: the model; lr, batch B, init_scale
    rho, steps: SGD's; limit: the pair modes' spread (logits) where selection is read;
    head_batches: each head draws its own batch. Returns (m + 1,) probabilities."""
    key = _settings(
        heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps, limit, head_batches
    )
    m, s = key[0], key[1]
    cov = _pair_modes(*key)
    root = np.linalg.cholesky(cov + 1e-12 * np.trace(cov) / len(cov) * np.eye(len(cov)))
    rng = np.random.default_rng(seed)
    y = (rng.standard_normal((draws, len(cov))) @ root.T).reshape(draws, m, s - 1)
    picks = np.sort(np.argmax(y, axis=-1), axis=-1)
    distinct = 1 + np.sum(np.diff(picks, axis=-1) != 0, axis=-1)
    return np.bincount(distinct, minlength=m + 1)[: m + 1] / draws


def shared_noise_ratio(
    heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps, limit=LINEAR_LIMIT,
    head_batches=False,
) -> float:  # fmt: skip
    """The shared part of a head's pair-mode variance over its independent part (the
    start's, the state-dependent noise's), where selection is read: with c the correlation
    of two heads' centred pair modes, c / (1 - c). 0 is the flow's independence (the
    occupancy law); it may dip below 0 by the normaliser's O(1/N) repulsion."""
    key = _settings(
        heads, stride, chunks, vocab, gamma, beta, lr, batch, init_scale, steps, limit, head_batches
    )
    m, s = key[0], key[1]
    if m < 2:
        raise ValueError("the shared part needs two heads")
    cov = _pair_modes(*key)
    p = s - 1
    centre = np.eye(p) - 1.0 / p
    own = np.trace(centre @ cov[:p, :p] @ centre)
    across = np.trace(centre @ cov[:p, p : 2 * p] @ centre)
    corr = across / own
    return float(corr / (1.0 - corr))


float64_module(__name__)

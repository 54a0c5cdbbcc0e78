"""The scipy baseline for the reduced gradient flow: `solve_ivp` (LSODA), one problem at a time.

The reduced flow of docs/theory.md §5 with a fixed gain, `da_h/dt = -dL_inf/da_h`, written as a
user would for scipy: the gradient by hand in numpy,

    L_inf = N/(N-1) mean_phi (1 - Pbar[phi])^2,   Pbar[phi] = mean_h sigma(beta_h alpha_h[phi] - log(N-1)),
    dL/dalpha_h[phi] = -2 N/(N-1) (1 - Pbar[phi]) sigma'(.) beta_h / (s H),
    dL/da_h = alpha_h * (dL/dalpha_h - <dL/dalpha_h, alpha_h>)   (softmax chain rule),

integrated by `scipy.integrate.solve_ivp(method="LSODA")` at the same tolerances and
save times as `sims.toy.flow.solve_many`. `weakspots bench` times both on the same
problems and checks that they agree (`flow_speedup_vs_scipy`).

    python benchmarks/scipy_flow.py --problems 16
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.integrate import solve_ivp


def reduced_gradient(pooling_logits: np.ndarray, gain: np.ndarray, chunks: float) -> np.ndarray:
    """`dL_inf/da` for pooling logits `(H, s)` and gains `(H,)` (mse loss, fixed gain)."""
    heads, stride = pooling_logits.shape
    shifted = pooling_logits - pooling_logits.max(axis=-1, keepdims=True)
    alpha = np.exp(shifted)
    alpha /= alpha.sum(axis=-1, keepdims=True)
    sigma = 1.0 / (1.0 + np.exp(np.log(chunks - 1.0) - gain[:, None] * alpha))
    pbar = sigma.mean(axis=0)
    d_pbar = -2.0 * chunks / (chunks - 1.0) * (1.0 - pbar) / stride
    d_alpha = d_pbar[None, :] * sigma * (1.0 - sigma) * gain[:, None] / heads
    return alpha * (d_alpha - np.sum(d_alpha * alpha, axis=-1, keepdims=True))


def solve(pooling_logits0, gain, chunks, ts, *, rtol=1e-8, atol=1e-10):
    """One reduced flow from `(H, s)` logits; returns the pooling weights at `ts`, `(T, H, s)`."""
    shape = np.shape(pooling_logits0)
    gain = np.broadcast_to(np.asarray(gain, dtype=np.float64), shape[:1])

    def vector_field(t, y):
        return -reduced_gradient(y.reshape(shape), gain, chunks).ravel()

    ts = np.asarray(ts, dtype=np.float64)
    sol = solve_ivp(
        vector_field,
        (ts[0], ts[-1]),
        np.asarray(pooling_logits0, dtype=np.float64).ravel(),
        method="LSODA",
        t_eval=ts,
        rtol=rtol,
        atol=atol,
    )
    if not sol.success:
        raise RuntimeError(f"LSODA failed: {sol.message}")
    logits = sol.y.T.reshape(len(ts), *shape)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def problems(count: int, *, heads=1, stride=8, init_scale=1e-3, seed=0):
    """`count` problems: initial logits `(count, H, s)` from seeds, gains spread over [12, 24]."""
    rng = np.random.default_rng(seed)
    logits0 = init_scale * rng.standard_normal((count, heads, stride))
    gains = np.linspace(12.0, 24.0, count)
    return logits0, gains


def solve_all(logits0, gains, chunks, ts, **tolerances) -> np.ndarray:
    """Every problem in turn: `(P, T, H, s)` pooling weights."""
    return np.stack(
        [solve(a, g, chunks, ts, **tolerances) for a, g in zip(logits0, gains, strict=True)]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=16)
    args = parser.parse_args()
    logits0, gains = problems(args.problems)
    ts = np.linspace(0.0, 1000.0, 101)
    start = time.perf_counter()
    solve_all(logits0, gains, 64.0, ts)
    rate = args.problems / (time.perf_counter() - start)
    print(f"scipy LSODA: {rate:.2f} reduced-flow solves/s (s=8, N=64, H=1)")


if __name__ == "__main__":
    main()

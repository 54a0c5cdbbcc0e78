"""What `theory.induction_eps_bound` guarantees at eps > 0 (docs/induction.md §8).

If every Gram entry is off by at most eps, every gate's loss moves by at most
b(eps) = 2 beta m (eps + 2 gamma eps (1 + eps)) (`theory.induction.eps_bound`). So a
property P of the eps = 0 optimum survives while 2 b(eps) is below the eps = 0 loss gap
between the optimum and the best gates without P: a minimiser at eps has
L_0 <= L_eps + b <= L_eps(opt) + b <= L_0(opt) + 2 b. Two such properties:

* coverage (distinct positions; `theory.induction.eps_for_coverage`): the gap is the
  collision cost, O(1/N);
* concentration (every head's key >= level on one position and its value >= level on the
  next): the gap is `concentration_gap`, the least eps = 0 loss of gates with one head's
  key or value capped at `level`, minus the optimum's.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import minimize

from weakspots.theory.induction import (
    collision_cost,
    distinct_assignment,
    optimal_assignments,
    population_loss,
)


def eps_for_gap(heads: int, gamma: float, beta: float, gap: float) -> float:
    """The eps at which 2 eps_bound(eps) = gap: the root of
    4 beta m (2 gamma eps^2 + (1 + 2 gamma) eps) = gap."""
    a = 4.0 * beta * heads * 2.0 * gamma
    b = 4.0 * beta * heads * (1.0 + 2.0 * gamma)
    return float((-b + math.sqrt(b * b + 4.0 * a * gap)) / (2.0 * a))


def _softmax(x):
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def concentration_gap(heads: int, stride: int, chunks: int, vocab: int, gamma: float, beta: float,
                      level: float = 0.99, bound: float = 30.0) -> float:  # fmt: skip
    """min L_0 over static gates in which head 0's key (or value) weight on its top position
    is exactly `level` (the rest spread by free logits), the other gates free, minus the
    optimum's L_0 (distinct one-hot positions, `optimal_assignments`). L-BFGS-B on the
    closed form `theory.induction.population_loss`, logits in [-bound, bound], from the
    distinct assignment, over every capped position and both branches (the loss falls
    towards one-hot, so the least loss without concentration sits where the cap binds)."""
    m, s = heads, stride
    best, _ = optimal_assignments(m, s, chunks, vocab, gamma, beta)
    home = distinct_assignment(m, s) if m <= s - 1 else tuple(r % (s - 1) for r in range(m))
    start = np.full((m, 2, s), -bound / 2)
    for h, r in enumerate(home):
        start[h, 0, r] = start[h, 1, r + 1] = bound / 2
    gaps = []
    for branch in (0, 1):
        for top in range(s):
            others = [i for i in range(s) if i != top]

            def weights(x, branch=branch, top=top, others=others):
                logits = x[: m * 2 * s].reshape(m, 2, s)
                w = _softmax(logits)
                capped = np.zeros(s)
                capped[top] = level
                capped[others] = (1.0 - level) * _softmax(x[m * 2 * s :])
                w[0, branch] = capped
                return w

            def loss(x, weights=weights):
                w = weights(x)
                return population_loss(w[:, 0], w[:, 1], chunks, vocab, gamma, beta)

            x0 = np.concatenate([start.ravel(), np.zeros(s - 1)])
            res = minimize(loss, x0, method="L-BFGS-B", bounds=[(-bound, bound)] * x0.size)
            gaps.append(res.fun - best)
    return float(min(gaps))


def eps_for_concentration(heads: int, stride: int, chunks: int, vocab: int, gamma: float,
                          beta: float, level: float = 0.99) -> float:  # fmt: skip
    """The eps below which the bound keeps every minimiser concentrated at `level`:
    2 eps_bound(eps) = concentration_gap."""
    gap = concentration_gap(heads, stride, chunks, vocab, gamma, beta, level)
    return eps_for_gap(heads, gamma, beta, gap)


def eps_for_coverage_exact(
    heads: int, stride: int, chunks: int, vocab: int, gamma: float, beta: float
) -> float:
    """`theory.induction.eps_for_coverage` with the bound's eps^2 term kept:
    2 eps_bound(eps) = collision cost."""
    return eps_for_gap(
        heads, gamma, beta, collision_cost(heads, stride, chunks, vocab, gamma, beta)
    )

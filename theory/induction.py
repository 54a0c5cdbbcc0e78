"""Closed forms of the induction model (PAPER.md §5; docs/induction.md derives each).

Notation: stride S, heads m, chunks L, vocab N, attention scale gamma, readout scale beta.
A one-hot assignment puts head h's key on position r_h and its value on r_h + 1
(0 <= r_h <= S - 2); `counts[r]` heads sit on r. `E = e^gamma / (e^gamma + L - 1)` is the
attention a head on r* gives the query's chunk, `D = 1 / (e^gamma + L - 1)` each other
chunk; a head elsewhere attends 1/L everywhere.
"""

from __future__ import annotations

import math
from itertools import combinations_with_replacement

import numpy as np
from scipy.special import comb, stirling2

from weakspots.idealized.metrics import delta_max as delta_max  # one home: best minus worst phase


def _attention(gamma: float, chunks: int) -> tuple[float, float]:
    e = math.exp(gamma)
    return e / (e + chunks - 1), 1.0 / (e + chunks - 1)


def population_loss(key_weights, value_weights, chunks: int, vocab: int, gamma: float, beta: float) -> float:
    """The population cross-entropy of static gates at eps = 0 (docs/induction.md §2):

        L = 1/(S-1) sum_{r*} [ -beta sum_h A_h pV_h(r*+1)
              + log(N - LS + sum_r e^{beta sum_h A_h pV_h(r)} + (L-1) sum_r e^{beta sum_h B_h pV_h(r)}) ],
        A_h = e^{g_h} / (e^{g_h} + L - 1),  B_h = 1 / (e^{g_h} + L - 1),  g_h = gamma pK_h(r*).

    key_weights, value_weights: (m, S) distributions per head."""
    pk, pv = np.asarray(key_weights, float), np.asarray(value_weights, float)
    s = pk.shape[1]
    total = 0.0
    for r in range(s - 1):
        g = gamma * pk[:, r]
        a = np.exp(g) / (np.exp(g) + chunks - 1)
        b = 1.0 / (np.exp(g) + chunks - 1)
        on, off = beta * a @ pv, beta * b @ pv  # (S,) logits in the query's chunk, in the others
        normaliser = vocab - chunks * s + np.exp(on).sum() + (chunks - 1) * np.exp(off).sum()
        total += -on[r + 1] + math.log(normaliser)
    return total / (s - 1)


def counts_of(positions, stride: int) -> np.ndarray:
    """Heads per position (S,) of an assignment r_1..r_m (each in 0..S-2)."""
    positions = np.asarray(positions, int)
    if positions.size == 0 or positions.min() < 0 or positions.max() > stride - 2:
        raise ValueError(f"positions must lie in 0..{stride - 2}, got {positions.tolist()}")
    return np.bincount(positions, minlength=stride)


def normaliser_excess(positions, stride: int, chunks: int, gamma: float, beta: float) -> np.ndarray:
    """F(r*) per query position (S-1,): the normaliser of a one-hot assignment minus N,

        F(r*) = sum_{r: c_r > 0} (e^{beta c_r X(r)} - 1) + (L-1)(e^{beta c_r Y(r)} - 1),

    X = E, Y = D at r = r*, X = Y = 1/L elsewhere; independent of N."""
    c = counts_of(positions, stride)
    e, d = _attention(gamma, chunks)
    out = np.zeros(stride - 1)
    for q in range(stride - 1):
        for r in np.flatnonzero(c):
            x, y = (e, d) if r == q else (1.0 / chunks, 1.0 / chunks)
            out[q] += math.expm1(beta * c[r] * x) + (chunks - 1) * math.expm1(beta * c[r] * y)
    return out


def assignment_loss(positions, stride: int, chunks: int, vocab: int, gamma: float, beta: float) -> float:
    """The population loss of a one-hot assignment (Theorem 1's candidates):

        L = -beta E m / (S-1) + 1/(S-1) sum_{r*} log(N + F(r*)),

    the first term the same for every assignment of m heads (docs/induction.md §3)."""
    m = len(np.atleast_1d(positions))
    e, _ = _attention(gamma, chunks)
    f = normaliser_excess(positions, stride, chunks, gamma, beta)
    return float(-beta * e * m / (stride - 1) + np.mean(np.log(vocab + f)))


def assignments(heads: int, stride: int) -> list[tuple[int, ...]]:
    """Every one-hot assignment up to relabelling heads (sorted position tuples)."""
    return list(combinations_with_replacement(range(stride - 1), heads))


def optimal_assignments(heads: int, stride: int, chunks: int, vocab: int, gamma: float, beta: float):
    """(loss, assignments) of the least population loss among one-hot assignments; Theorem 1
    says they are the assignments with distinct positions when m <= S - 1."""
    losses = {a: assignment_loss(a, stride, chunks, vocab, gamma, beta) for a in assignments(heads, stride)}
    best = min(losses.values())
    return best, [a for a, v in losses.items() if v - best <= 1e-12 * max(1.0, abs(best))]


def distinct_assignment(heads: int, stride: int) -> tuple[int, ...]:
    """Heads on positions 0, 1, ..., m-1 (needs m <= S - 1)."""
    if heads > stride - 1:
        raise ValueError(f"{heads} heads cannot take distinct positions among {stride - 1}")
    return tuple(range(heads))


def collided_assignment(heads: int, stride: int) -> tuple[int, ...]:
    """Heads 0 and 1 on position 0, the rest distinct: the cheapest kind of collision."""
    return (0, *range(heads - 1))


def collision_cost(heads: int, stride: int, chunks: int, vocab: int, gamma: float, beta: float) -> float:
    """L(collided) - L(distinct), exactly: mean_{r*} log((N + F_c) / (N + F_d))."""
    return assignment_loss(
        collided_assignment(heads, stride), stride, chunks, vocab, gamma, beta
    ) - assignment_loss(distinct_assignment(heads, stride), stride, chunks, vocab, gamma, beta)


def collision_coefficient(heads: int, stride: int, chunks: int, gamma: float, beta: float) -> float:
    """lim_{N -> inf} N (L(collided) - L(distinct)) = mean_{r*} (F_c(r*) - F_d(r*)): the
    O(1/N) by which distinct positions win (docs/induction.md §3)."""
    fc = normaliser_excess(collided_assignment(heads, stride), stride, chunks, gamma, beta)
    fd = normaliser_excess(distinct_assignment(heads, stride), stride, chunks, gamma, beta)
    return float(np.mean(fc - fd))


def collision_second_order(heads: int, stride: int, chunks: int, gamma: float, beta: float) -> float:
    """The 1/N^2 coefficient of the collision cost: -mean (F_c^2 - F_d^2) / 2."""
    fc = normaliser_excess(collided_assignment(heads, stride), stride, chunks, gamma, beta)
    fd = normaliser_excess(distinct_assignment(heads, stride), stride, chunks, gamma, beta)
    return float(-np.mean(fc**2 - fd**2) / 2)


def assignment_phase_accuracy(positions, stride: int, chunks: int, gamma: float, beta: float) -> np.ndarray:
    """Top-1 accuracy per query position r* = 0..S-2 of a one-hot assignment (any N > LS).

    Covered (c_{r*} > 0): the successor's logit beta c_{r*} E against beta c_r / L (value
    positions read uniformly), beta c_{r*} D (the same position in other chunks) and 0
    (every other token): 1 when it is above them all. Uncovered: the successor's logit is
    0, the same as every token outside the context, below beta c_r / L > 0: accuracy 0, a
    guess's 1/N at most (docs/induction.md §5)."""
    c = counts_of(positions, stride)
    e, d = _attention(gamma, chunks)
    acc = np.zeros(stride - 1)
    for q in range(stride - 1):
        if c[q] == 0:
            continue
        target = beta * c[q] * e
        rivals = [0.0, beta * c[q] * d] + [beta * c[r] / chunks for r in np.flatnonzero(c) if r != q]
        acc[q] = 1.0 if target > max(rivals) else 0.0
    return acc


def selected_positions(key_logits, value_logits) -> np.ndarray:
    """The position each head selects from a small start (the linearised flow,
    docs/induction.md §4): argmax_r (thetaK_h(r) + thetaV_h(r+1)), r = 0..S-2.

    key_logits, value_logits: (..., m, S) initial gate logits."""
    k, v = np.asarray(key_logits, float), np.asarray(value_logits, float)
    return np.argmax(k[..., :-1] + v[..., 1:], axis=-1)


def coverage_distribution(heads: int, stride: int) -> np.ndarray:
    """P(k distinct positions), k = 0..m, for m heads each selecting one of the S-1 pairs
    uniformly and independently (docs/induction.md §4):
    P(k) = C(S-1, k) k! S(m, k) / (S-1)^m, with S(m, k) Stirling numbers of the 2nd kind."""
    p = stride - 1
    k = np.arange(heads + 1)
    out = comb(p, k) * np.array([math.factorial(int(i)) for i in k], float) * stirling2(heads, k)
    return out / float(p) ** heads


def expected_uncovered(heads: int, stride: int) -> float:
    """E[non-final positions no head selects] = (S-1)(1 - 1/(S-1))^m."""
    p = stride - 1
    return p * (1.0 - 1.0 / p) ** heads


def pair_coupling(stride: int, chunks: int, gamma: float, beta: float) -> float:
    """The key-value coupling c of one head's pair modes at uniform gates: the loss's
    quadratic part holds -c sum_r u_r w_r (u: centred key logits on r, w: centred value
    logits on r + 1), with

        c = beta gamma A0 (1 - A0) / ((S-1) S^2),  A0 = e^{gamma/S} / (e^{gamma/S} + L - 1)

    (docs/induction.md §4); independent of N (the normaliser enters at O(1/N))."""
    a0 = math.exp(gamma / stride) / (math.exp(gamma / stride) + chunks - 1)
    return beta * gamma * a0 * (1.0 - a0) / ((stride - 1) * stride**2)


def _head_loss(key_logits, value_logits, chunks, gamma, beta):
    """One head's loss to leading order in 1/N: -beta/(S-1) sum_r A(gamma pK(r)) pV(r+1)."""
    pk = np.exp(key_logits - key_logits.max())
    pk /= pk.sum()
    pv = np.exp(value_logits - value_logits.max())
    pv /= pv.sum()
    g = gamma * pk[:-1]
    a = np.exp(g) / (np.exp(g) + chunks - 1)
    return -beta * float(np.sum(a * pv[1:])) / (len(pk) - 1)


def pair_growth_rate(stride: int, chunks: int, gamma: float, beta: float, emptied: bool = False) -> float:
    """The rate at which a head's pair modes grow: the top eigenvalue of minus the Hessian of
    one head's leading-order loss (`_head_loss`) on the zero-sum pair modes (centred key
    logits on 0..S-2, centred value logits on 1..S-1), at uniform gates, or with `emptied`
    at the state the early drift leads to (final key and first value position empty:
    uniform on the other S - 1). Central differences of the closed form (h = 1e-4)."""
    s = stride
    base_k = np.zeros(s)
    base_v = np.zeros(s)
    if emptied:
        base_k[-1] = base_v[0] = -np.inf
    basis = []
    for m in range(s - 2):
        x = np.zeros(s - 1)
        x[m], x[m + 1] = 1.0, -1.0
        basis.append(np.concatenate([x, np.zeros(s - 1)]))
        basis.append(np.concatenate([np.zeros(s - 1), x]))
    q, _ = np.linalg.qr(np.array(basis).T)

    def loss(y):
        k, v = base_k.copy(), base_v.copy()
        k[:-1] += y[: s - 1]
        v[1:] += y[s - 1 :]
        return _head_loss(k, v, chunks, gamma, beta)

    h = 1e-4
    n = q.shape[1]
    hess = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            e, f = h * q[:, i], h * q[:, j]
            hess[i, j] = hess[j, i] = (
                loss(e + f) - loss(e - f) - loss(-e + f) + loss(-e - f)
            ) / (4 * h * h)
    return float(np.linalg.eigvalsh(-hess).max())


def concentration_slope(stride: int, chunks: int, gamma: float, beta: float) -> float:
    """d t / d log(1/rho) of the time to concentrate for small rho: 1 / the pair modes' rate
    at the drifted state (`pair_growth_rate(emptied=True)`; docs/induction.md §4)."""
    return 1.0 / pair_growth_rate(stride, chunks, gamma, beta, emptied=True)


def eps_bound(heads: int, gamma: float, beta: float, eps: float) -> float:
    """A bound on |L_eps - L_0| for any gates when the Gram error is at most eps:
    every logit moves by at most delta = beta m (eps + 2 gamma eps (1 + eps)) (kappa cancels),
    and cross-entropy by at most 2 delta (docs/induction.md §6)."""
    return 2.0 * beta * heads * (eps + 2.0 * gamma * eps * (1.0 + eps))


def eps_for_coverage(heads: int, stride: int, chunks: int, vocab: int, gamma: float, beta: float) -> float:
    """The eps below which the bound keeps distinct positions strictly optimal among one-hot
    assignments: 2 eps_bound < collision cost."""
    cost = collision_cost(heads, stride, chunks, vocab, gamma, beta)
    per_eps = 2.0 * 2.0 * beta * heads * (1.0 + 2.0 * gamma)  # to first order in eps
    return cost / per_eps

"""Closed forms of the content-gated induction model (`idealized.induction_content`;
docs/induction.md §7 derives each).

Notation as `theory.induction`, and: prior lambda (query position r* ~ lambda e_f +
(1 - lambda) U on 0..S-2), reliability q (the query's chunk is marked at r* with
probability q, uniformly otherwise), mu = q pi + (1 - q) U the law of every chunk's mark.

To leading order in 1/N a rule's loss is `log N - m beta E h` with h its hit rate (the
probability that the successor gets the head's evidence, docs/induction.md §7): a static
head on the favourite f hits when r* = f, `h_static = lambda + (1 - lambda)/(S - 1)`; a
content head (key on the marked token, value on the token after it) hits when the query's
chunk is marked at r*, `h_content = q + (1 - q)/(S - 1)`. Their difference is
`(q - lambda)(S - 2)/(S - 1)`: content wins exactly when q > lambda.
"""

from __future__ import annotations

import math

import numpy as np

from weakspots.theory.induction import assignment_phase_accuracy


def query_prior(stride: int, prior: float, favourite: int) -> np.ndarray:
    """pi(r*), r* = 0..S-2."""
    p = stride - 1
    return prior * (np.arange(p) == favourite) + (1.0 - prior) / p


def mark_law(stride: int, prior: float, reliability: float, favourite: int) -> np.ndarray:
    """mu(m) = q pi(m) + (1 - q)/(S - 1), m = 0..S-2."""
    return reliability * query_prior(stride, prior, favourite) + (1.0 - reliability) / (stride - 1)


def hit_rates(stride: int, prior: float, reliability: float) -> tuple[float, float]:
    """(h_static, h_content): lambda + (1 - lambda)/(S - 1) and q + (1 - q)/(S - 1)."""
    p = stride - 1
    return prior + (1.0 - prior) / p, reliability + (1.0 - reliability) / p


def leading_loss_gap(stride: int, heads: int, chunks: int, gamma: float, beta: float,
                     prior: float, reliability: float) -> float:  # fmt: skip
    """L(static) - L(content) to leading order in 1/N: m beta E (h_content - h_static),
    E = e^gamma / (e^gamma + L - 1); > 0 when content wins."""
    e = math.exp(gamma) / (math.exp(gamma) + chunks - 1)
    h_static, h_content = hit_rates(stride, prior, reliability)
    return heads * beta * e * (h_content - h_static)


def content_wins(prior: float, reliability: float) -> bool:
    """The regime of the global optimum between the two rules as N -> infinity: q > lambda."""
    return reliability > prior


def boundary_reliability(prior: float) -> float:
    """The reliability at which the two rules' losses cross, to leading order in 1/N: q* = lambda."""
    return float(prior)


def regime_offsets(stride: int, prior: float, reliability: float, favourite: int, regime: str):
    """(static, per-window) effective offsets of every gate at the one-hot limit of a regime:
    static (1, 1); content (exp(H(mu)), 1), the same for key and value gates (the value's
    law is mu moved one position on)."""
    if regime == "static":
        return 1.0, 1.0
    if regime != "content":
        raise ValueError(f"regime must be static or content, got {regime!r}")
    mu = mark_law(stride, prior, reliability, favourite)
    mu = mu[mu > 0]
    return float(np.exp(-np.sum(mu * np.log(mu)))), 1.0


def regime_phase_accuracy(stride: int, heads: int, chunks: int, gamma: float, beta: float,
                          reliability: float, favourite: int, regime: str) -> np.ndarray:  # fmt: skip
    """Top-1 accuracy per query position at the one-hot limit of a regime. Static: every
    head on the favourite, `theory.induction_assignment_phase_accuracy` (1 at f, 0
    elsewhere). Content: on a hit the successor's logit m beta E beats m beta D (the other
    chunks' values) and 0; on a miss it is 0, below the values' m beta / L: accuracy
    P(m* = r* | r*) = q + (1 - q)/(S - 1) at every position."""
    if regime == "static":
        return assignment_phase_accuracy([favourite] * heads, stride, chunks, gamma, beta)
    if regime != "content":
        raise ValueError(f"regime must be static or content, got {regime!r}")
    e, d = math.exp(gamma) / (math.exp(gamma) + chunks - 1), 1.0 / (math.exp(gamma) + chunks - 1)
    hit = 1.0 if e > max(d, 0.0) else 0.0
    _, h = hit_rates(stride, 0.0, reliability)
    return np.full(stride - 1, hit * h)

"""sigma_N, the mse per-phase loss's drive w and its curvature, in numpy (docs/theory.md §5, §6).

With the needle logit m and the N - 1 distractor logits at 0 (d = inf), the needle chunk's
soft mass is sigma_N(m) = 1 / (1 + (N - 1) e^-m) (theory.reduced.retrieval_probability is
the same in jax). For the mse per-phase loss l(m) = (1 - sigma_N(m))^2, with g = 1 - sigma_N:
w(m) = -l'(m) = 2 sigma_N g^2 and l''(m) = 2 g^2 (1 - g)(2 - 3 g) (docs/theory.md §6).
"""

import numpy as np


def sigma_n(margin, chunks):
    """sigma_N(m): the needle chunk's soft mass at needle logit m (distractors at 0)."""
    return 1.0 / (1.0 + (chunks - 1.0) * np.exp(-margin))


def mse_drive(margin, chunks):
    """w(m) = -l'(m) = 2 sigma_N (1 - sigma_N)^2 for l(m) = (1 - sigma_N(m))^2."""
    s = sigma_n(margin, chunks)
    return 2.0 * s * (1.0 - s) ** 2


def mse_curvature(margin, chunks):
    """l''(m) = 2 g^2 (1 - g)(2 - 3 g), g = 1 - sigma_N(m), for l(m) = (1 - sigma_N(m))^2."""
    g = 1.0 - sigma_n(margin, chunks)
    return 2.0 * g**2 * (1.0 - g) * (2.0 - 3.0 * g)

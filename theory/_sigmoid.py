"""sigma_N and the mse needle drive w, in numpy, for the closed forms of theory/ (THEORY 5, 6.4).

sigma_N(m) = 1 / (1 + (N - 1) e^-m) is theory.reduced.retrieval_probability without jax;
w(m) = -l'(m) = 2 sigma (1 - sigma)^2 for the mse per-phase loss l(m) = (1 - sigma_N(m))^2.
"""

import numpy as np


def sigma_n(margin, chunks):
    """sigma_N(m): the needle chunk's soft mass at needle logit m (distractors at 0)."""
    return 1.0 / (1.0 + (chunks - 1.0) * np.exp(-margin))


def mse_drive(margin, chunks):
    """w(m) = -l'(m) = 2 sigma_N (1 - sigma_N)^2 for l(m) = (1 - sigma_N(m))^2."""
    s = sigma_n(margin, chunks)
    return 2.0 * s * (1.0 - s) ** 2

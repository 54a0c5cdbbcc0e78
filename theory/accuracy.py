"""Finite-d retrieval accuracy per phase from the pooling weights (docs/theory.md §6.12, §7).

Derivation (single head, query q = x[c*, phi], keys i.i.d. N(0, I/d)). Condition on
q and write r = |q|^2 ~ chi2_d / d. Every other key x is independent of q, so
q . x ~ N(0, r/d), independently across keys. Hence, given r,

    needle logit     z* = beta (alpha_phi r + sqrt(r/d) s_phi Z),  s_phi^2 = sum_{j != phi} alpha_j^2,
    distractor logit z_c = beta sqrt(r/d) |alpha| Z_c,              c != c*,

all independent Gaussians. beta > 0 and sqrt(r/d) drop out of the argmax; with
rho = sqrt(r d) ~ chi_d and M the max of N-1 standard normals,

    acc[phi] = P(|alpha| M < alpha_phi rho + s_phi Z) = E_{rho, Z} Phi((alpha_phi rho + s_phi Z)/|alpha|)^(N-1),

a 2-D integral done here by generalised Gauss-Laguerre in rho (theory.quadrature.chi_nodes)
and Gauss-Hermite in Z: exact up to quadrature error. docs/theory.md §7's simpler approximation
replaces r by its mean and the needle variance by (2 alpha_phi^2 + s_phi^2)/d
(phase_accuracy_gaussian).
"""

import math

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from weakspots.idealized.metrics import delta_max as delta_max
from weakspots.idealized.metrics import phase_sensitivity, phase_sensitivity_std
from weakspots.idealized.precision import float64_module

from .quadrature import chi_nodes, normal_nodes

psc = phase_sensitivity  # the theory's name for the measured phase sensitivity
psc_std = phase_sensitivity_std


def _beats_max_of_distractors(margin, chunks):
    """Phi(margin)^(N-1): probability a needle at this standardised margin wins."""
    return np.asarray(jnp.exp((chunks - 1.0) * log_ndtr(jnp.asarray(margin))))


def needle_accuracy(needle_weight, weight_norm2, chunks, dim, kappa=1.0, nodes=96):
    """Probability the needle beats all N-1 distractors, for one slot of one head (docs/theory.md §6.12).

    needle_weight alpha_phi, weight_norm2 |alpha|^2, kappa (the needle product's
    attenuation, theory.rope.rope_attenuation_at; 1 without RoPE): arrays that broadcast.
    chunks N, dim d (finite). With s_phi^2 = |alpha|^2 - alpha_phi^2 the needle's margin is
    (kappa alpha_phi rho + s_phi Z) / |alpha|, so acc = E_{rho, Z} Phi(margin)^(N-1)
    (module docstring, the needle's mean scaled by kappa). Returns the broadcast shape.
    """
    alpha, norm2, kappa = np.broadcast_arrays(
        *(np.asarray(x, dtype=float) for x in (needle_weight, weight_norm2, kappa))
    )
    norm = np.sqrt(np.maximum(norm2, 1e-300))[..., None, None]
    others = np.sqrt(np.maximum(norm2 - alpha**2, 0.0))[..., None, None]
    rho, w_rho = chi_nodes(float(dim), int(nodes))
    z, w_z = normal_nodes(int(nodes))
    margin = ((kappa * alpha)[..., None, None] * rho[:, None] + others * z) / norm
    win = _beats_max_of_distractors(margin, chunks)
    return np.einsum("...ij,i,j->...", win, w_rho, w_z)


def phase_accuracy(pooling_weights, gain, chunks, dim, nodes=96):
    """acc[phi]: probability the needle chunk's logit beats all N-1 distractors (docs/theory.md §6.12).

    pooling_weights: (s,) alpha of one head; gain: beta > 0 (the argmax does not depend
    on it for one head); chunks: N; dim: d, or inf for the large-d limit (needle logit
    beta alpha_phi against distractors at 0: accuracy 1 where alpha_phi > 0, 1/N for
    an exactly dropped phase, all N logits tied). Exact 2-D quadrature (module docstring,
    needle_accuracy). Returns (s,).
    """
    del gain
    alpha = np.asarray(pooling_weights, dtype=float)
    if math.isinf(dim):
        return np.where(alpha > 0.0, 1.0, 1.0 / chunks)
    return needle_accuracy(alpha, np.sum(alpha**2), chunks, dim, nodes=nodes)


def phase_accuracy_gaussian(pooling_weights, gain, chunks, dim, nodes=96):
    """acc[phi] from docs/theory.md §7's independent-Gaussian approximation (one 1-D integral).

    Needle logit ~ N(beta alpha_phi, beta^2 (2 alpha_phi^2 + s_phi^2)/d), distractors
    ~ N(0, beta^2 |alpha|^2 / d), independent. Arguments as phase_accuracy. Returns (s,).
    """
    del gain
    alpha = np.asarray(pooling_weights, dtype=float)
    norm = np.linalg.norm(alpha)
    needle_sd = np.sqrt((norm**2 + alpha**2) / dim)
    z, w_z = normal_nodes(int(nodes))
    margin = (alpha[:, None] + needle_sd[:, None] * z[None, :]) / (norm / math.sqrt(dim))
    return _beats_max_of_distractors(margin, chunks) @ w_z


def phase_accuracy_heads(pooling_weights, gain, chunks, dim, nodes=96):
    """acc[phi] with H heads, approximated by the best head at each phase.

    pooling_weights: (H, s); gain: (H,) (unused); chunks N; dim d. Approximation: the
    averaged readout Pbar is decided by the head with the largest needle margin, so
    acc[phi] ~ max_h acc_h[phi] (exact when one head covers each phase and the others
    are flat across chunks; it ignores the heads' shared keys and their soft votes).
    Returns (s,).
    """
    weights = np.atleast_2d(np.asarray(pooling_weights, dtype=float))
    per_head = [phase_accuracy(w, None, chunks, dim, nodes) for w in weights]
    return np.max(np.stack(per_head), axis=0)


def support_weights(stride, support):
    """Equal weights 1/k on a support: support is a size k (phases 0..k-1) or a (s,) mask.

    Returns (s,) pooling weights (the k-phase state of docs/theory.md §6.4).
    """
    if np.ndim(support) == 0:
        mask = np.arange(stride) < int(support)
    else:
        mask = np.asarray(support, dtype=bool)
    return mask / mask.sum()


def phase_accuracy_profile(stride, chunks, support, dim, dropped_weight=0.0):
    """acc[phi] of the k-phase state (docs/theory.md §6.4): covered phases vs dropped weak spots.

    stride s, chunks N, support (size k or (s,) mask), dim d (inf allowed);
    dropped_weight: weight left on each dropped phase (the flow leaves them small, not 0;
    renormalised). Returns (s,).
    """
    weights = support_weights(stride, support)
    weights = np.where(weights > 0, weights, dropped_weight)
    return phase_accuracy(weights / weights.sum(), None, chunks, dim)


float64_module(__name__)  # 64-bit types inside these functions only

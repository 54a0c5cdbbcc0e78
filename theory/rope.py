"""RoPE anchoring: a compressed key carries its chunk's first position (docs/theory.md §7).

Derivation. With rotary pairs on the last rope_dim of d channels, pair i turning at
theta_i = rope_theta^(-2i/rope_dim), a needle at phase phi sits phi tokens after its
chunk's anchor, so its self-product q . R(phi) q becomes
|q_plain|^2 + sum_i |q_pair_i|^2 cos(phi theta_i); in expectation over the key
(each pair carries 2/d of |q|^2 = 1) the needle logit is scaled by

    kappa[phi] = 1 - rho + rho * mean_i cos(phi theta_i),   rho = rope_dim / d,

while cross terms (distractors, other phases) stay mean-zero with unchanged variance.
kappa is deterministic and periodic in position with period s, so it pins *which*
phases are weak: the reduced flow with a phase-dependent needle gain beta kappa[phi]
(theory.reduced_loss's phase_scale) favours the phases with the largest kappa.
"""

import numpy as np

from weakspots.idealized.precision import float64_module
from weakspots.idealized.rope import ROPE_THETA
from weakspots.idealized.rope import rope_frequencies as rope_frequencies


def rope_attenuation_at(relative, rope_dim, dim, rope_theta=ROPE_THETA, *, xp=np):
    """kappa(rel): the needle logit's mean scale when its key is anchored `rel` tokens back.

    kappa(rel) = (d - rope_dim)/d + (2/d) sum_i cos(rel theta_i)
               = 1 - rho + rho * mean_i cos(rel theta_i)   (module docstring; 1 for rope_dim = 0).
    relative: any shape; rope_dim, dim d, rope_theta; xp: numpy, or jax.numpy to trace it.
    Returns the shape of `relative`.
    """
    rel = xp.asarray(relative, xp.float64)
    freqs = rope_frequencies(rope_dim, rope_theta, xp=xp)
    freqs = freqs.reshape((1,) * rel.ndim + freqs.shape)  # explicit: jax raises on rank promotion
    rotary = xp.sum(xp.cos(rel[..., None] * freqs), axis=-1)
    return (dim - rope_dim) / dim + 2.0 * rotary / dim


def rope_attenuation(stride, rope_dim, dim, rope_theta=ROPE_THETA):
    """kappa[phi]: the needle logit's mean scale at phase phi under RoPE anchoring (module docstring).

    stride s, rope_dim, dim d, rope_theta. Returns (s,); kappa[0] = 1.
    """
    return rope_attenuation_at(np.arange(stride), rope_dim, dim, rope_theta)


def rope_weak_phases(stride, rope_dim, dim, support_size, rope_theta=ROPE_THETA):
    """Predicted weak spots under RoPE anchoring: phases outside the support_size largest kappa.

    stride s, rope_dim, dim d, support_size k (e.g. from theory.predicted_support_size).
    Returns a (s,) bool mask (True = weak).
    """
    kappa = rope_attenuation(stride, rope_dim, dim, rope_theta)
    keep = np.argsort(-kappa, kind="stable")[:support_size]
    weak = np.ones(stride, dtype=bool)
    weak[keep] = False
    return weak


float64_module(__name__)  # 64-bit types inside these functions only

"""Mitigations of periodic weak spots and their predicted effect on delta_max (docs/theory.md §7).

* Phase-entropy regulariser -epsilon * mean_h H(alpha_h): near uniform,
  H(alpha) = log s - (1/(2s)) |P u|^2 + O(u^3) in the logits u, which adds
  -epsilon/(H s) to every growth rate. Uniform pooling is restored iff
  epsilon >= epsilon_c = H s lambda; the transition is sharp, so delta_max drops from
  the specialised state's value to the uniform one (0 at d = inf) at epsilon_c.
* Staggered chunk boundaries (head h shifted by h s // H tokens): in the reduced flow each
  head's loss only relabels its phases, phi -> (phi + o_h) mod s, and independent heads
  start from i.i.d. logits, so the distribution of outcomes -- hence of delta_max -- is
  unchanged (no effect for untied heads). It helps only when heads share one compressor
  (tied pooling weights): the covered set becomes the union of shifted supports
  (staggered_coverage).
* Overlapping windows (2s slots, stride s, either aliased entry retrieves): phase phi is
  held by slot s + phi of its own entry and slot phi of the next, so it is covered iff
  either slot is (overlap_coverage).
* Offset ensembling at inference over K chunkings shifted by k s // K: at d = inf the
  averaged readout puts more mass on the needle than on any distractor as soon as one
  shift covers the needle's phase, so acc[phi] = 1 iff some shift covers phi; at finite d
  the mean of the shifted accuracies is used (offset_ensemble_accuracy).
"""

import numpy as np

from weakspots.idealized.stagger import stagger_offsets

from .thresholds import growth_rate


def entropy_critical_weight(stride, chunks, gain, heads=1, loss="mse"):
    """epsilon_c = H s lambda: the phase-entropy weight that keeps pooling uniform.

    stride s, chunks N, gain beta, heads H, loss. Returns a float (0 if already stable).
    """
    lam = float(growth_rate(stride, chunks, gain, heads, loss))
    return max(heads * stride * lam, 0.0)


def staggered_coverage(support, offsets):
    """Phases covered when head h reads phase phi at slot (phi + o_h) mod s.

    support: (H, s) or (s,) bool mask of covered slots per head (tied weights: one row
    broadcast to all heads); offsets: (H,). Returns (s,) bool.
    """
    support = np.asarray(support, dtype=bool)
    offsets = np.asarray(offsets)
    stride = support.shape[-1]
    support = np.broadcast_to(support, (offsets.shape[0], stride))
    phases = np.arange(stride)
    return np.any(
        support[np.arange(offsets.shape[0])[:, None], (phases[None] + offsets[:, None]) % stride],
        axis=0,
    )


def overlap_coverage(window_support):
    """Phases covered by an overlapping window: window_support (2s,) bool. Returns (s,)."""
    window_support = np.asarray(window_support, dtype=bool)
    stride = window_support.shape[0] // 2
    return window_support[:stride] | window_support[stride:]


def offset_ensemble_accuracy(accuracy, ensemble, dim=np.inf, chunks=None):
    """Per-phase accuracy with the readout averaged over K shifted chunkings.

    accuracy: (s,) single-chunking accuracy; ensemble K; dim d: at d = inf a phase is
    retrieved iff some shift covers it (1, else 1/N with chunks N); at finite d, the
    mean over shifts (approximation: the shifts' errors treated as averaging).
    Returns (s,).
    """
    accuracy = np.asarray(accuracy, dtype=float)
    stride = accuracy.shape[0]
    shifts = stagger_offsets(stride, ensemble)
    shifted = np.stack([np.roll(accuracy, -k) for k in shifts])
    if np.isinf(dim):
        covered = np.any(shifted > (1.0 / chunks if chunks else 0.0) + 1e-12, axis=0)
        return np.where(covered, 1.0, 1.0 / chunks if chunks else 0.0)
    return shifted.mean(axis=0)

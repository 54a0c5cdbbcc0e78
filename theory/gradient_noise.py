"""The trainer's loss per problem, its gradients and Hessian, on a Monte Carlo sample of problems.

SGD's gradient noise at pooling logits a is the covariance of the per-problem gradient of the
trainer's own loss (idealized.toy.loss.retrieval_loss) over problems drawn as the trainer draws
them; theory.noise_floor and theory.escape read curvatures and noise from here (one head,
fixed gain, the inner-product sampler of idealized.toy.task, drawn in numpy: r = |q|^2 ~ chi2_d/d,
q . x ~ N(0, r/d) for every other key, the needle's entry r).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized.precision import float64, float64_module
from weakspots.idealized.toy.loss import retrieval_loss
from weakspots.idealized.xla import jit


def problem_sample(stride, chunks, dim, samples, seed):
    """`samples` problems (gram (P, N, s), target (P,)) from `seed`, phases uniform (module docstring)."""
    rng = np.random.default_rng(seed)
    n = int(chunks)
    norm2 = rng.chisquare(dim, samples) / dim
    gram = np.sqrt(norm2 / dim)[:, None, None] * rng.standard_normal((samples, n, stride))
    target = rng.integers(0, n, samples)
    phase = rng.integers(0, stride, samples)
    gram[np.arange(samples), target, phase] = norm2
    return jnp.asarray(gram), jnp.asarray(target)


def problem_loss(logits_a, gram, target, gain, loss):
    """The trainer's loss on one problem (gram (N, s), target) at pooling logits (s,)."""
    return retrieval_loss((gain * gram @ jax.nn.softmax(logits_a))[None], target, loss)


def _per_problem(logits_a, gram, target, gain, loss):
    grad = jax.grad(problem_loss)
    return jax.vmap(grad, (None, 0, 0, None, None))(logits_a, gram, target, gain, loss)


@float64
@functools.partial(jit, static_argnums=4)
def problem_gradients(logits_a, gram, target, gain, loss):
    """Per-problem gradients (P, s) of problem_loss at logits (s,) on a sample (problem_sample)."""
    return _per_problem(logits_a, gram, target, gain, loss)


@float64
@functools.partial(jit, static_argnums=4)
def loss_derivatives(logits_a, gram, target, gain, loss):
    """(sample-mean loss, its Hessian (s, s), per-problem gradients (P, s)) at logits (s,)."""

    def mean_loss(a):
        per = jax.vmap(problem_loss, (None, 0, 0, None, None))(a, gram, target, gain, loss)
        return jnp.mean(per)

    grads = _per_problem(logits_a, gram, target, gain, loss)
    return mean_loss(logits_a), jax.hessian(mean_loss)(logits_a), grads


float64_module(__name__)  # 64-bit types inside these functions only

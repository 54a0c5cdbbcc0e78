"""The induction model at eps > 0 (issue 59, part B): explicit nearly-equiangular embeddings.

`idealized.induction` realises eps = 0 (`x_n = sqrt(kappa) u + e_n`) and needs no Gram
matrix. Here the vocabulary is explicit vectors

    x_n = sqrt(kappa) u + sqrt(1 - a) e_n + sqrt(a) z_n,

z_n unit vectors drawn uniformly in d dimensions (orthogonal to u and the e_n), so the Gram
matrix is `G = kappa 11^T + (1 - a) I + a Z Z^T`: a token overlaps itself exactly kappa + 1
and another token kappa + a z_n . z_m. Choosing `a = eps / max_{n != m} |z_n . z_m|` meets
the paper's bound `|x . x' - kappa - 1{x = x'}| <= eps` with equality: every G is PSD by
construction, and eps reaches up to the largest overlap of the z's (about
sqrt(2 log(N^2) / d)). Tokens close in z are the ones the perturbation confuses, as in a
learned embedding.

The model is `idealized.induction`'s with static gates (the same gates in every chunk,
Theorem 1's query-independent rules), every inner product read from G: for the query
x_q = x_{l*, r*},

    att_{h,l} = softmax_l(gamma sum_r pK_h(r) G[q, t(l, r)]),
    z_n = beta sum_h sum_l att_{h,l} sum_r pV_h(r) G[n, t(l, r)],

the cross-entropy of the successor t(l*, r* + 1) over all N tokens. At eps > 0 the loss
depends on the tokens, so the population loss is estimated on a fixed sample of contexts
(every query of each); at eps = 0 it equals `idealized.induction.population_loss`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from weakspots import validation as check
from weakspots.errors import ConfigError
from weakspots.idealized import induction
from weakspots.idealized.induction import StaticGates

Gram = Float[Array, "N N"]


@dataclass(frozen=True)
class GramConfig:
    """The induction model with explicit embeddings (field names = flags): stride S, heads
    m, chunks L, vocab N, gamma, beta, kappa, eps (the bound met with equality), dim d (of
    the z's), gram_seed (the z's), contexts (the fixed sample the loss averages), init_scale
    rho, seed."""

    stride: int = 4
    heads: int = 2
    chunks: int = 8
    vocab: int = 256
    gamma: float = 6.0
    beta: float = 2.0
    kappa: float = 0.0
    eps: float = 0.0
    dim: int = 16
    gram_seed: int = 0
    contexts: int = 16
    init_scale: float = 0.01
    seed: int = 0

    def __post_init__(self):
        for name in ("gamma", "beta", "kappa", "eps", "init_scale"):
            object.__setattr__(self, name, float(getattr(self, name)))
        induction.check_task(self)
        check.int_at_least("dim", self.dim, 1)
        check.int_at_least("contexts", self.contexts, 1)
        check.int_at_least("gram_seed", self.gram_seed, 0)
        check.nonnegative_finite("kappa", self.kappa)
        check.nonnegative_finite("eps", self.eps)
        reach = max_overlap(self.vocab, self.dim, self.gram_seed)
        if self.eps > reach:
            raise ConfigError(
                "eps", f"must be at most the largest overlap of the z's, {reach:.4g} (raise "
                f"--vocab or lower --dim), got {self.eps:g}"
            )  # fmt: skip

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def induction_config(self) -> induction.InductionConfig:
        """The eps = 0 model of the same shape and physics."""
        return induction.InductionConfig(
            stride=self.stride, heads=self.heads, chunks=self.chunks, vocab=self.vocab,
            gamma=self.gamma, beta=self.beta, kappa=self.kappa, init_scale=self.init_scale,
            seed=self.seed,
        )  # fmt: skip


def directions(vocab: int, dim: int, gram_seed: int) -> np.ndarray:
    """The z's: N unit vectors uniform on the sphere in d dimensions (numpy, float64)."""
    z = np.random.default_rng(gram_seed).standard_normal((vocab, dim))
    return z / np.linalg.norm(z, axis=1, keepdims=True)


def max_overlap(vocab: int, dim: int, gram_seed: int) -> float:
    """max_{n != m} |z_n . z_m|: the largest eps this family of embeddings reaches."""
    z = directions(vocab, dim, gram_seed)
    c = np.abs(z @ z.T)
    np.fill_diagonal(c, 0.0)
    return float(c.max())


def gram(config: GramConfig) -> np.ndarray:
    """G = kappa 11^T + (1 - a) I + a Z Z^T with a = eps / max overlap (numpy, float64);
    `max |G - kappa - I| = eps` exactly."""
    z = directions(config.vocab, config.dim, config.gram_seed)
    a = config.eps / max_overlap(config.vocab, config.dim, config.gram_seed)
    return config.kappa + (1.0 - a) * np.eye(config.vocab) + a * (z @ z.T)


def embeddings(config: GramConfig) -> np.ndarray:
    """Explicit vectors (N, 1 + N + d) whose Gram matrix is `gram(config)`: the columns u,
    e_1..e_N, then the z's."""
    z = directions(config.vocab, config.dim, config.gram_seed)
    a = config.eps / max_overlap(config.vocab, config.dim, config.gram_seed)
    n = config.vocab
    return np.concatenate(
        [
            np.full((n, 1), math.sqrt(config.kappa)),
            math.sqrt(1.0 - a) * np.eye(n),
            math.sqrt(a) * z,
        ],
        axis=1,
    )


def query_loss_and_hit(logits, g: Gram, tokens: Int[Array, "L S"], chunk, position, gamma, beta):
    """(cross-entropy of the successor over all N tokens, top-1 hit with ties shared) of
    the query at (chunk, position), static gates `logits` (H, 2, S), every inner product
    read from G."""
    p = jax.nn.softmax(logits, axis=-1)
    pk, pv = p[:, induction.KEY], p[:, induction.VALUE]  # (H, S)
    q = tokens[chunk, position]
    overlap = g[q][tokens]  # (L, S): x_q . x_{l,r}
    attention = jax.nn.softmax(gamma * jnp.einsum("hr,lr->hl", pk, overlap), axis=-1)
    read = jnp.einsum("hl,hr->lr", attention, pv)  # weight of each context token in the output
    z = beta * (g[:, tokens.reshape(-1)] @ read.reshape(-1))  # (N,)
    target = tokens[chunk, position + 1]
    loss = jax.nn.logsumexp(z) - z[target]
    best = jnp.max(z)
    hit = jnp.where(z[target] == best, 1.0 / jnp.sum(z == best), 0.0)
    return loss, hit


def _queries(chunks: int, stride: int):
    chunk, position = jnp.meshgrid(jnp.arange(chunks), jnp.arange(stride - 1), indexing="ij")
    return chunk.reshape(-1), position.reshape(-1)


def context_measures(
    logits, g: Gram, tokens, gamma, beta
) -> tuple[Float[Array, "L Sm1"], Float[Array, "L Sm1"]]:
    """Loss and hit of every query (l*, r*) of one context."""
    chunks, stride = tokens.shape
    chunk, position = _queries(chunks, stride)
    loss, hit = jax.vmap(lambda c, r: query_loss_and_hit(logits, g, tokens, c, r, gamma, beta))(
        chunk, position
    )
    return loss.reshape(chunks, stride - 1), hit.reshape(chunks, stride - 1)


def sample_loss(logits, g: Gram, contexts: Int[Array, "C L S"], gamma, beta) -> Float[Array, ""]:
    """The mean loss over every query of every context of the sample."""
    losses, _ = jax.vmap(lambda t: context_measures(logits, g, t, gamma, beta))(contexts)
    return jnp.mean(losses)


def sample_phase_accuracy(logits, g: Gram, contexts, gamma, beta) -> Float[Array, " Sm1"]:
    """Top-1 accuracy per query position, over every chunk of every context of the sample."""
    _, hits = jax.vmap(lambda t: context_measures(logits, g, t, gamma, beta))(contexts)
    return jnp.mean(hits, axis=(0, 1))


def contexts(config: GramConfig, key_seed: int) -> Int[Array, "C L S"]:
    """`config.contexts` contexts (`induction.sample_contexts`) from seed `key_seed`."""
    return induction.sample_contexts(
        jax.random.key(key_seed), config.induction_config(), config.contexts
    )


def one_hot_logits(positions, stride: int, strength: float = 40.0) -> np.ndarray:
    """Static logits at the one-hot limit of an assignment: key +strength on r_h, value on r_h + 1."""
    logits = np.zeros((len(positions), 2, stride))
    for h, r in enumerate(positions):
        logits[h, induction.KEY, r] = strength
        logits[h, induction.VALUE, r + 1] = strength
    return logits


def start(config: GramConfig, seed=None) -> StaticGates:
    """The static start of run `seed` (`induction.start` of the eps = 0 config)."""
    return induction.start(config.induction_config(), seed)

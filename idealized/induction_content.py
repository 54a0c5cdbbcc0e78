"""The induction model with gates that follow content as well as position (issue 59, part B).

The smallest extension of `idealized.induction` (eps = 0, its Gram and its loss) in which a
gate can select by content: every chunk l has one *marked* token, at a non-final position
m_l, and each gate reads, beside its position, two binary features of the token it weighs:
`marked` (r = m_l) and `after` (r = m_l + 1, the token after the marked one; a real model's
previous-token heads put it in the hidden state the gate reads). The features are read by
the gates only (the paper's payload maps C_i can drop them), so attention and readout see
the eps = 0 Gram of `idealized.induction` unchanged. Head h's gate of branch B at (l, r):

    pB_h(l, r) ~ exp(position[h, B, r] + content[h, B, r, 0] marked(l, r)
                                       + content[h, B, r, 1] after(l, r)),

per-offset parameters, as the paper's `Z_i, b_i`.

The task has two knobs. `prior` lambda: the query position r* is drawn from
`pi = lambda e_f + (1 - lambda) U` (U uniform on 0..S-2, f the `favourite`), the position
prior a static gate can exploit. `reliability` q: in the query's chunk the mark sits on r*
with probability q and is uniform on 0..S-2 otherwise, so P(m* = r*) = q + (1 - q)/(S - 1).
Every other chunk's mark is drawn from the same marginal, `mu = q pi + (1 - q) U`, so a
mark says nothing about which chunk is queried.

At eps = 0 the loss of a query depends on the marks through the gates only; the L - 1
other chunks are exchangeable, so the population loss is an exact finite sum over r*, m*
and the composition of the other chunks' marks (`cases`), with multinomial weights
(`case_weights`) that are functions of (prior, reliability) as arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from itertools import combinations_with_replacement

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int, PRNGKeyArray

from weakspots import validation as check
from weakspots.errors import ConfigError
from weakspots.idealized import induction
from weakspots.idealized.induction import KEY, VALUE, Scales

FEATURES = 2  # marked, after


@dataclass(frozen=True)
class ContentConfig:
    """The content-gated induction model and task (field names = flags).

    stride S, heads m, chunks L, vocab N, gamma, beta (as `InductionConfig`, eps = 0, kappa
    drops out: the gates read no token identity); prior lambda in [0, 1] (the weight of the
    favourite query position), favourite f in 0..S-2, reliability q in [0, 1] (how often the
    query's chunk is marked at the query); init_scale rho (std of every start parameter),
    seed; t1, saves, rtol, atol, max_steps: the flow's (`sims.induction.content.solve`).
    """

    stride: int = 4
    heads: int = 2
    chunks: int = 8
    vocab: int = 4096
    gamma: float = 6.0
    beta: float = 2.0
    prior: float = 0.3
    favourite: int = 1
    reliability: float = 0.5
    init_scale: float = 0.01
    seed: int = 0
    t1: float = 4000.0
    saves: int = 41
    rtol: float = 1e-7
    atol: float = 1e-9
    max_steps: int = 100_000

    def __post_init__(self):
        for name in ("gamma", "beta", "prior", "reliability", "init_scale", "t1", "rtol", "atol"):
            object.__setattr__(self, name, float(getattr(self, name)))
        induction.check_task(self, min_stride=3)
        check.int_at_least("saves", self.saves, 2)
        check.int_at_least("max_steps", self.max_steps, 1)
        for name in ("t1", "rtol", "atol"):
            check.positive_finite(name, getattr(self, name))
        for name in ("prior", "reliability"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(name, f"must lie in [0, 1], got {value:g}")
        if not 0 <= self.favourite <= self.stride - 2:
            raise ConfigError(
                "favourite", f"must lie in 0..{self.stride - 2}, got {self.favourite}"
            )
        if self.beta * self.heads > 700.0:
            raise ConfigError(
                "beta", f"beta * heads must be <= 700 (exp overflows), got {self.beta:g}"
            )

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @property
    def shape(self) -> ContentConfig:
        """The fields that fix the compiled program (everything else travels as arrays)."""
        return ContentConfig(
            stride=self.stride, heads=self.heads, chunks=self.chunks, favourite=self.favourite,
            t1=1.0, saves=self.saves, rtol=self.rtol, atol=self.atol, max_steps=self.max_steps,
        )  # fmt: skip


class ContentGates(eqx.Module):
    """Per head, branch (key, value) and position: a position logit and the weights of the
    two content features (marked, after)."""

    position: Float[Array, "H 2 S"]
    content: Float[Array, "H 2 S 2"]

    def chunk_gates(
        self, marks: Int[Array, " L"]
    ) -> tuple[Float[Array, "H L S"], Float[Array, "H L S"]]:
        """The key and value gates of every chunk, given each chunk's marked position."""
        s = self.position.shape[-1]
        r = jnp.arange(s)
        features = jnp.stack(
            [(r[None, :] == marks[:, None]), (r[None, :] == marks[:, None] + 1)], axis=-1
        ).astype(self.position.dtype)  # (L, S, 2)
        logits = self.position[:, :, None, :] + jnp.einsum("hbrf,lrf->hblr", self.content, features)
        p = jax.nn.softmax(logits, axis=-1)
        return p[:, KEY], p[:, VALUE]

    def mark_gates(self) -> Float[Array, "M H 2 S"]:
        """The gates of a chunk marked at m, for m = 0..S-2."""
        s = self.position.shape[-1]

        def one(m):
            pk, pv = self.chunk_gates(m[None])
            return jnp.stack([pk[:, 0], pv[:, 0]], axis=1)

        return jax.vmap(one)(jnp.arange(s - 1))


def init_gates(key: PRNGKeyArray, config: ContentConfig, init_scale=None) -> ContentGates:
    """Every parameter ~ N(0, rho^2); `init_scale` (an array under vmap) overrides rho."""
    rho = config.init_scale if init_scale is None else init_scale
    k1, k2 = jax.random.split(key)
    h, s = config.heads, config.stride
    return ContentGates(
        rho * jax.random.normal(k1, (h, 2, s)), rho * jax.random.normal(k2, (h, 2, s, FEATURES))
    )


class Knobs(eqx.Module):
    """The task's law as arrays: prior lambda, reliability q."""

    prior: Float[Array, ""]
    reliability: Float[Array, ""]


def knobs(config: ContentConfig, dtype=None) -> Knobs:
    dtype = jnp.float64 if dtype is None else dtype
    return Knobs(jnp.asarray(config.prior, dtype), jnp.asarray(config.reliability, dtype))


def query_prior(stride: int, favourite: int, prior) -> Float[Array, " Sm1"]:
    """pi(r*) = lambda e_f + (1 - lambda) / (S - 1)."""
    p = stride - 1
    return prior * (jnp.arange(p) == favourite) + (1.0 - prior) / p


def mark_given_query(stride: int, reliability) -> Float[Array, "Sm1 Sm1"]:
    """P(m* = m | r* = r) = q 1{m = r} + (1 - q) / (S - 1), indexed [r, m]."""
    p = stride - 1
    return reliability * jnp.eye(p) + (1.0 - reliability) / p


def mark_marginal(stride: int, favourite: int, kn: Knobs) -> Float[Array, " Sm1"]:
    """mu(m) = sum_r pi(r) P(m | r): the law of every chunk's mark."""
    return query_prior(stride, favourite, kn.prior) @ mark_given_query(stride, kn.reliability)


@functools.lru_cache(maxsize=32)
def cases(stride: int, chunks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every (r*, m*, composition of the other L - 1 chunks' marks): query positions (K,),
    marks (K, L) (the query's chunk first), compositions (K, S-1) and log multinomial
    coefficients (K,)."""
    p = stride - 1
    compositions = []
    for combo in combinations_with_replacement(range(p), chunks - 1):
        compositions.append(np.bincount(np.asarray(combo, int), minlength=p))
    queries, marks, counts, logc = [], [], [], []
    for r in range(p):
        for m in range(p):
            for n in compositions:
                queries.append(r)
                marks.append([m, *np.repeat(np.arange(p), n)])
                counts.append(n)
                logc.append(math.lgamma(chunks) - sum(math.lgamma(k + 1) for k in n))
    return (
        np.asarray(queries, np.int32),
        np.asarray(marks, np.int32).reshape(-1, chunks),
        np.asarray(counts, np.float64).reshape(-1, p),
        np.asarray(logc, np.float64),
    )


def case_weights(stride: int, chunks: int, favourite: int, kn: Knobs) -> Float[Array, " K"]:
    """The probability of each of `cases`: pi(r*) P(m* | r*) multinomial(n) prod mu^n."""
    queries, marks, counts, logc = cases(stride, chunks)
    pi = query_prior(stride, favourite, kn.prior)
    given = mark_given_query(stride, kn.reliability)
    mu = mark_marginal(stride, favourite, kn)
    other = jnp.exp(
        logc + jnp.sum(jnp.asarray(counts) * jnp.log(jnp.maximum(mu, 1e-300))[None, :], axis=-1)
    )
    other = jnp.where(jnp.sum(jnp.where(mu[None, :] > 0, 0.0, counts), axis=-1) > 0, 0.0, other)
    return pi[queries] * given[queries, marks[:, 0]] * other


def _per_case(fn, gates: ContentGates, stride: int, chunks: int, sc: Scales):
    queries, marks, _, _ = cases(stride, chunks)

    def one(r, m):
        pk, pv = gates.chunk_gates(m)
        return fn(pk, pv, 0, r, sc)

    return jax.vmap(one)(jnp.asarray(queries), jnp.asarray(marks))


def population_loss(
    gates: ContentGates, config: ContentConfig, sc: Scales, kn: Knobs
) -> Float[Array, ""]:
    """The exact population cross-entropy: sum over `cases` of weight x `induction.query_loss`."""
    s, big_l = config.stride, config.chunks
    losses = _per_case(induction.query_loss, gates, s, big_l, sc)
    return jnp.sum(case_weights(s, big_l, config.favourite, kn) * losses)


def phase_accuracy(
    gates: ContentGates, config: ContentConfig, sc: Scales, kn: Knobs
) -> Float[Array, " Sm1"]:
    """Exact top-1 accuracy per query position r* = 0..S-2 (ties shared, as
    `induction.query_correct`)."""
    s, big_l = config.stride, config.chunks
    hits = _per_case(induction.query_correct, gates, s, big_l, sc)
    w = case_weights(s, big_l, config.favourite, kn)
    queries = jnp.asarray(cases(s, big_l)[0])
    per = jax.ops.segment_sum(w * hits, queries, num_segments=s - 1)
    return per / query_prior(s, config.favourite, kn.prior)


def weighted_offsets(alpha: Float[Array, "W S"], weights: Float[Array, " W"]):
    """The paper's effective offsets over windows drawn with probabilities `weights`: static
    exp(H(E[alpha])) and per-window E[exp(H(alpha))] (`induction.effective_offsets` with
    equal weights)."""

    def entropy(p):
        return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)

    return jnp.exp(entropy(weights @ alpha)), weights @ jnp.exp(entropy(alpha))


def gate_offsets(gates: ContentGates, config: ContentConfig, kn: Knobs) -> Float[Array, "H 2 2"]:
    """Per head and branch: (static, per-window) effective offsets over windows, exact (a
    window's gates depend only on its mark, drawn from mu)."""
    mu = mark_marginal(config.stride, config.favourite, kn)
    per_mark = gates.mark_gates()  # (M, H, 2, S)
    alpha = jnp.moveaxis(per_mark, 0, 2)  # (H, 2, M, S)
    flat = alpha.reshape(-1, *alpha.shape[2:])
    out = jax.vmap(lambda a: jnp.stack(weighted_offsets(a, mu)))(flat)
    return out.reshape(*alpha.shape[:2], 2)


def mean_gates(gates: ContentGates, config: ContentConfig, kn: Knobs) -> Float[Array, "H 2 S"]:
    """The gates averaged over windows (over marks drawn from mu)."""
    mu = mark_marginal(config.stride, config.favourite, kn)
    return jnp.einsum("m,mhbs->hbs", mu, gates.mark_gates())


def sample_problems(key: PRNGKeyArray, config: ContentConfig, kn: Knobs, count: int):
    """`count` problems drawn from the task's law: query positions (B,) and marks (B, L),
    the query's chunk first (chunks are exchangeable, so its index does not matter)."""
    p = config.stride - 1
    k1, k2, k3 = jax.random.split(key, 3)
    pi = query_prior(config.stride, config.favourite, kn.prior)
    given = mark_given_query(config.stride, kn.reliability)
    mu = mark_marginal(config.stride, config.favourite, kn)
    r = jax.random.categorical(k1, jnp.log(pi), shape=(count,))
    m_star = jax.random.categorical(k2, jnp.log(given[r]), axis=-1)
    others = jax.random.categorical(k3, jnp.log(mu), shape=(count, config.chunks - 1))
    del p
    return r, jnp.concatenate([m_star[:, None], others], axis=1)


def batch_loss(gates: ContentGates, queries, marks, sc: Scales) -> Float[Array, ""]:
    """The mean loss of sampled problems: what SGD minimises; its expectation is
    `population_loss`."""

    def one(r, m):
        pk, pv = gates.chunk_gates(m)
        return induction.query_loss(pk, pv, 0, r, sc)

    return jnp.mean(jax.vmap(one)(queries, marks))

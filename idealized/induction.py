"""The seed paper's idealised model (PAPER.md §5): induction with key and value gates per head.

A vocabulary of N tokens whose Gram matrix is `kappa 11^T + I` (eps = 0; realised as
`x_n = sqrt(kappa) u + e_n`). A context holds L chunks of S distinct tokens (all L*S
distinct, uniform without replacement). A query repeats the token at a non-final position
r* of chunk l* and asks for its successor, the token at r* + 1 of the same chunk. Head h
compresses chunk l into `k = sum_r pK_h(l, r) x_{l,r}`, `v = sum_r pV_h(l, r) x_{l,r}`,
attends over the L entries with `softmax_l(gamma q . k_{h,l})`; the heads' outputs are
summed and read out against every token, `z_n = beta x_n . O`; the loss is the
cross-entropy of the successor.

At eps = 0 everything is an inner product of the Gram matrix: kappa adds the same constant
to every attention logit of a head and to every vocabulary logit, so both softmaxes drop
it, and relative to a token outside the context (logit 0) the token at (l, r) has

    z_{l,r} = beta sum_h a_{h,l} pV_h(l, r),   a_{h,l} = softmax_l(gamma pK_h(l*, r*) [l = l*]).

`query_loss` evaluates that exactly (the N - L*S outside tokens are one log-count in the
normaliser). Gates: `static` (free logits per head and position, the same for every chunk)
or `loglinear` (`pB_h(l, r) ~ exp(c^B_{h,r} . x_{l,r})`, with `c . x_n = sqrt(kappa) a + b_n`
in the basis (u, e_1..e_N): a shared logit per position and a table over the vocabulary).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int, PRNGKeyArray

from weakspots import validation as check
from weakspots.errors import ConfigError

GATES = ("static", "loglinear")
KEY, VALUE = 0, 1  # the branch axis of the gate logits

GateLogits = Float[Array, "H 2 S"]
ChunkGates = Float[Array, "H L S"]
Tokens = Int[Array, "L S"]


def check_task(config, min_stride: int = 2) -> None:
    """The checks every induction model's config shares (`InductionConfig`, and the eps and
    content models' configs): stride S >= `min_stride`, heads, chunks, a vocabulary of at
    least L S tokens, positive gamma and beta, a start's scale and a seed. Raises ConfigError."""
    check.int_at_least("stride", config.stride, min_stride)
    check.int_at_least("heads", config.heads, 1)
    check.int_at_least("chunks", config.chunks, 1)
    check.int_at_least("vocab", config.vocab, config.stride * config.chunks)
    check.positive_finite("gamma", config.gamma)
    check.positive_finite("beta", config.beta)
    check.nonnegative_finite("init_scale", config.init_scale)
    check.int_at_least("seed", config.seed, 0)


@dataclass(frozen=True)
class InductionConfig:
    """The induction model and task (field names = the CLI's flags).

    stride S (tokens per chunk), heads m, chunks L, vocab N, gamma (attention scale), beta
    (readout scale), kappa (overlap of distinct tokens), eps (Gram error; the population
    loss here is eps = 0's), gate `static` | `loglinear`, init_scale rho (std of the static
    start's logits; the log-linear start's |c_{h,r}|), seed.
    """

    stride: int = 4
    heads: int = 2
    chunks: int = 8
    vocab: int = 4096
    gamma: float = 6.0
    beta: float = 2.0
    kappa: float = 0.0
    eps: float = 0.0
    gate: str = "static"
    init_scale: float = 0.01
    seed: int = 0

    def __post_init__(self):
        for name in ("gamma", "beta", "kappa", "eps", "init_scale"):
            object.__setattr__(self, name, float(getattr(self, name)))
        check_task(self)
        check.nonnegative_finite("kappa", self.kappa)
        check.nonnegative_finite("eps", self.eps)
        if self.eps != 0.0:
            raise ConfigError(
                "eps",
                f"the simulations are at eps = 0 (theory.induction_eps_bound covers eps > 0), got {self.eps:g}",
            )
        if self.gate not in GATES:
            raise ConfigError("gate", f"must be one of {', '.join(GATES)}, got {self.gate!r}")
        if self.beta * self.heads > 700.0:
            raise ConfigError(
                "beta", f"beta * heads must be <= 700 (exp overflows), got {self.beta:g}"
            )

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class InductionTrainConfig(InductionConfig):
    """An `InductionConfig` trained by SGD: lr, batch (problems per step: a context and one
    query each), steps, eval_every (steps between records), eval_contexts (held-out contexts
    for log-linear gates' measures), head_batches (static gates: each head's gradient from
    its own batch, so the heads share no minibatch noise; docs/induction.md §9)."""

    lr: float = 1.0
    batch: int = 64
    steps: int = 2000
    eval_every: int = 100
    eval_contexts: int = 64
    head_batches: bool = False

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "lr", float(self.lr))
        check.positive_finite("lr", self.lr)
        for name in ("batch", "steps", "eval_every", "eval_contexts"):
            check.int_at_least(name, getattr(self, name), 1)
        object.__setattr__(self, "head_batches", bool(self.head_batches))
        if self.head_batches and self.gate != "static":
            raise ConfigError("head_batches", "a batch per head is for static gates")

    @property
    def static(self) -> InductionTrainConfig:
        """The fields that fix the compiled program (a sweep's bucket)."""
        return self.replace(seed=0, init_scale=0.0, lr=1.0, gamma=1.0, beta=1.0, kappa=0.0)


@dataclass(frozen=True)
class InductionFlowConfig(InductionConfig):
    """An `InductionConfig` integrated by gradient flow: t1, saves (log-spaced times from
    t1/1000 to t1, and 0), rtol, atol, max_steps; contexts: the fixed sample whose mean loss
    log-linear gates follow (static gates follow the exact population loss)."""

    t1: float = 4000.0
    saves: int = 41
    rtol: float = 1e-7
    atol: float = 1e-9
    max_steps: int = 100_000
    contexts: int = 64

    def __post_init__(self):
        super().__post_init__()
        for name in ("t1", "rtol", "atol"):
            object.__setattr__(self, name, float(getattr(self, name)))
            check.positive_finite(name, getattr(self, name))
        check.int_at_least("saves", self.saves, 2)
        check.int_at_least("max_steps", self.max_steps, 1)
        check.int_at_least("contexts", self.contexts, 1)

    @property
    def static(self) -> InductionFlowConfig:
        """The fields that fix the compiled program (a sweep's bucket)."""
        return self.replace(seed=0, init_scale=0.0, gamma=1.0, beta=1.0, kappa=0.0, t1=1.0)


class StaticGates(eqx.Module):
    """Free gate logits per head, branch (key, value) and position; the same in every chunk."""

    logits: GateLogits

    def chunk_gates(self, tokens: Tokens, kappa) -> tuple[ChunkGates, ChunkGates]:
        del kappa
        p = jax.nn.softmax(self.logits, axis=-1)
        shape = (p.shape[0], tokens.shape[0], p.shape[-1])
        return (
            jnp.broadcast_to(p[:, KEY, None, :], shape),
            jnp.broadcast_to(p[:, VALUE, None, :], shape),
        )

    def weights(self) -> Float[Array, "H 2 S"]:
        """The gates (key, value) per head: each a distribution over positions."""
        return jax.nn.softmax(self.logits, axis=-1)


class LogLinearGates(eqx.Module):
    """`p_h(l, r) ~ exp(sqrt(kappa) shared[h, B, r] + table[h, B, r, token(l, r)])`: the
    coordinates of `c^B_{h,r}` along u and along each e_n."""

    shared: GateLogits
    table: Float[Array, "H 2 S N"]

    def chunk_gates(self, tokens: Tokens, kappa) -> tuple[ChunkGates, ChunkGates]:
        s = tokens.shape[1]
        per_token = self.table[:, :, jnp.arange(s)[None, :], tokens]  # (H, 2, L, S)
        logits = jnp.sqrt(kappa) * self.shared[:, :, None, :] + per_token
        p = jax.nn.softmax(logits, axis=-1)
        return p[:, KEY], p[:, VALUE]


def init_gates(key: PRNGKeyArray, config: InductionConfig, init_scale=None):
    """The start: static logits ~ N(0, rho^2); log-linear c_{h,r} ~ N(0, rho^2 I / (N + 1))
    (|c| close to rho). `init_scale` (an array under vmap) overrides config.init_scale."""
    rho = config.init_scale if init_scale is None else init_scale
    h, s, n = config.heads, config.stride, config.vocab
    if config.gate == "static":
        return StaticGates(rho * jax.random.normal(key, (h, 2, s)))
    k1, k2 = jax.random.split(key)
    scale = rho / math.sqrt(n + 1)
    return LogLinearGates(
        scale * jax.random.normal(k1, (h, 2, s)), scale * jax.random.normal(k2, (h, 2, s, n))
    )


def start(config: InductionConfig, seed=None, init_scale=None):
    """The start of run `seed` (default config.seed): `init_gates` from `jax.random.key(seed)`,
    so SGD and the flow of one seed begin at the same gates."""
    seed = config.seed if seed is None else seed
    return init_gates(jax.random.key(seed), config, init_scale)


class Scales(eqx.Module):
    """The physics that does not change shapes, as arrays (one compiled program serves many):
    vocab N, gamma, beta, kappa."""

    vocab: Float[Array, ""]
    gamma: Float[Array, ""]
    beta: Float[Array, ""]
    kappa: Float[Array, ""]


def scales(config: InductionConfig, dtype=None) -> Scales:
    """`Scales` of a config (float64 unless `dtype`)."""
    dtype = jnp.float64 if dtype is None else dtype
    return Scales(
        *(jnp.asarray(getattr(config, f), dtype) for f in ("vocab", "gamma", "beta", "kappa"))
    )


def token_logits(
    key_gates: ChunkGates,
    value_gates: ChunkGates,
    chunk: Int[Array, ""],
    position: Int[Array, ""],
    gamma,
    beta,
) -> Float[Array, "L S"]:
    """z_{l,r} of every context token for the query at (chunk, position), relative to a token
    outside the context (module docstring)."""
    n_chunks = key_gates.shape[1]
    on = jnp.arange(n_chunks) == chunk
    attention = jax.nn.softmax(
        gamma * jnp.where(on[None, :], key_gates[:, chunk, position][:, None], 0.0), axis=-1
    )  # (H, L)
    return beta * jnp.einsum("hl,hlr->lr", attention, value_gates)


def query_loss(key_gates, value_gates, chunk, position, sc: Scales):
    """The cross-entropy of the successor (chunk, position + 1), exact over all N tokens: the
    N - L*S tokens outside the context enter the normaliser as one log-count."""
    z = token_logits(key_gates, value_gates, chunk, position, sc.gamma, sc.beta)
    outside = jnp.log(jnp.asarray(sc.vocab - z.size, z.dtype))  # -inf when N = L*S
    flat = jnp.concatenate([z.reshape(-1), outside[None]])
    return jax.nn.logsumexp(flat) - z[chunk, position + 1]


def query_correct(key_gates, value_gates, chunk, position, sc: Scales):
    """Top-1 of the successor among all N tokens, ties shared (the expected hit of a uniform
    tie-break)."""
    z = token_logits(key_gates, value_gates, chunk, position, sc.gamma, sc.beta)
    outside = sc.vocab - z.size
    best = jnp.where(outside > 0, jnp.maximum(jnp.max(z), 0.0), jnp.max(z))
    ties = jnp.sum(z == best) + jnp.where(best == 0.0, outside, 0.0)
    return jnp.where(z[chunk, position + 1] == best, 1.0 / ties, 0.0)


def _queries(chunks: int, stride: int):
    chunk, position = jnp.meshgrid(jnp.arange(chunks), jnp.arange(stride - 1), indexing="ij")
    return chunk.reshape(-1), position.reshape(-1)


def context_losses(gates, tokens: Tokens, sc: Scales) -> Float[Array, "L Sm1"]:
    """The loss of every query (l*, r*) of one context."""
    pk, pv = gates.chunk_gates(tokens, sc.kappa)
    chunks, stride = tokens.shape
    chunk, position = _queries(chunks, stride)
    losses = jax.vmap(lambda c, r: query_loss(pk, pv, c, r, sc))(chunk, position)
    return losses.reshape(chunks, stride - 1)


def context_correct(gates, tokens: Tokens, sc: Scales) -> Float[Array, "L Sm1"]:
    """`query_correct` of every query (l*, r*) of one context."""
    pk, pv = gates.chunk_gates(tokens, sc.kappa)
    chunks, stride = tokens.shape
    chunk, position = _queries(chunks, stride)
    hits = jax.vmap(lambda c, r: query_correct(pk, pv, c, r, sc))(chunk, position)
    return hits.reshape(chunks, stride - 1)


def position_losses(gates: StaticGates, chunks: int, sc: Scales) -> Float[Array, " Sm1"]:
    """Static gates' loss per query position r* = 0..S-2, at chunk 0 (chunks are exchangeable
    under static gates, so every chunk gives the same)."""
    s = gates.logits.shape[-1]
    pk, pv = gates.chunk_gates(jnp.zeros((chunks, s), jnp.int32), sc.kappa)
    return jax.vmap(lambda r: query_loss(pk, pv, 0, r, sc))(jnp.arange(s - 1))


def population_loss(gates: StaticGates, chunks: int, sc: Scales) -> Float[Array, ""]:
    """The population loss of static gates: the mean over every query of one context (static
    gates do not read tokens, so every context gives the same)."""
    tokens = jnp.zeros((chunks, gates.logits.shape[-1]), jnp.int32)
    return jnp.mean(context_losses(gates, tokens, sc))


def phase_accuracy(gates: StaticGates, chunks: int, sc: Scales) -> Float[Array, " Sm1"]:
    """Static gates' top-1 accuracy per query position r* = 0..S-2 (exact at eps = 0)."""
    tokens = jnp.zeros((chunks, gates.logits.shape[-1]), jnp.int32)
    return jnp.mean(context_correct(gates, tokens, sc), axis=0)


def sample_contexts(key: PRNGKeyArray, config: InductionConfig, count: int) -> Int[Array, "C L S"]:
    """`count` contexts: L*S distinct tokens each, uniform without replacement (the top L*S of
    N i.i.d. uniforms, in random order)."""
    n, size = config.vocab, config.chunks * config.stride
    keys = jax.random.split(key, count)

    def one(k):
        _, picked = jax.lax.top_k(jax.random.uniform(k, (n,)), size)
        return picked.reshape(config.chunks, config.stride)

    return jax.vmap(one)(keys)


def sample_queries(key: PRNGKeyArray, config: InductionConfig, count: int):
    """`count` queries (chunk l*, position r*), each uniform."""
    k1, k2 = jax.random.split(key)
    return (
        jax.random.randint(k1, (count,), 0, config.chunks),
        jax.random.randint(k2, (count,), 0, config.stride - 1),
    )


def batch_loss(
    gates, contexts: Int[Array, "B L S"], chunk, position, sc: Scales
) -> Float[Array, ""]:
    """The mean loss of B sampled (context, query) problems: the loss SGD minimises; its
    expectation is `population_loss` (static) or the context-averaged loss (log-linear)."""

    def one(tokens, c, r):
        pk, pv = gates.chunk_gates(tokens, sc.kappa)
        return query_loss(pk, pv, c, r, sc)

    return jnp.mean(jax.vmap(one)(contexts, chunk, position))


def effective_offsets(
    key_or_value: Float[Array, "W S"],
) -> tuple[Float[Array, ""], Float[Array, ""]]:
    """The paper's effective numbers of offsets of one gate over W windows (PAPER.md §4):
    static `exp(H(E[alpha]))` and per-window `E[exp(H(alpha))]`."""
    alpha = key_or_value

    def entropy(p):
        return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)

    return jnp.exp(entropy(jnp.mean(alpha, axis=0))), jnp.mean(jnp.exp(entropy(alpha)))


def gate_offsets(gates, contexts: Int[Array, "C L S"], kappa) -> Float[Array, "H 2 2"]:
    """Per head and branch (key, value): (static, per-window) effective offsets over the
    chunks of `contexts`."""
    pk, pv = jax.vmap(lambda t: gates.chunk_gates(t, kappa))(contexts)  # (C, H, L, S)
    out = []
    for p in (pk, pv):
        windows = jnp.moveaxis(p, 1, 0).reshape(p.shape[1], -1, p.shape[-1])  # (H, C*L, S)
        out.append(jnp.stack(jax.vmap(effective_offsets)(windows), axis=-1))  # (H, 2)
    return jnp.stack(out, axis=1)


def mean_gates(gates, contexts: Int[Array, "C L S"], kappa) -> Float[Array, "H 2 S"]:
    """The gates averaged over the chunks of `contexts` (static gates: the gates)."""
    pk, pv = jax.vmap(lambda t: gates.chunk_gates(t, kappa))(contexts)
    return jnp.stack([pk.mean(axis=(0, 2)), pv.mean(axis=(0, 2))], axis=1)

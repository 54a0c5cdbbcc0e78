"""The paper's three mechanism measurements (PAPER.md §4) in the induction model, where a
known assignment gives exact answers (issue 51): mean-replacement knockout of one head,
cycling the gates' position parameters by delta, and per-phase accuracy over the whole
vocabulary.

Logits are dense over all N tokens here (`vocabulary_logits`), so a head's output can be
replaced by its mean over calibration problems: x_n . mean(O_h) = kappa + (that mean's
weight on token n), the kappa part common to every token (it cancels).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from weakspots.idealized import induction
from weakspots.idealized.precision import float64_module


def head_token_weights(gates, tokens, chunk, position, sc, vocab: int):
    """(H, N): each head's output O_h written on the vocabulary, e_n . O_h (its kappa part
    dropped), for the query at (chunk, position) of context `tokens`."""
    pk, pv = gates.chunk_gates(tokens, sc.kappa)
    n_chunks = tokens.shape[0]
    on = jnp.arange(n_chunks) == chunk
    attention = jax.nn.softmax(
        sc.gamma * jnp.where(on[None, :], pk[:, chunk, position][:, None], 0.0), axis=-1
    )
    weights = attention[:, :, None] * pv  # (H, L, S)
    return jnp.zeros((pk.shape[0], vocab)).at[:, tokens.reshape(-1)].add(
        weights.reshape(pk.shape[0], -1)
    )


def _problems(chunks: int, stride: int):
    c, r = jnp.meshgrid(jnp.arange(chunks), jnp.arange(stride - 1), indexing="ij")
    return c.reshape(-1), r.reshape(-1)


def mean_head_outputs(gates, contexts, sc, vocab: int):
    """(H, N): each head's output averaged over every query of the calibration `contexts`."""
    chunks, stride = contexts.shape[1:]
    c, r = _problems(chunks, stride)

    def per_context(tokens):
        return jax.vmap(lambda a, b: head_token_weights(gates, tokens, a, b, sc, vocab))(c, r).mean(0)

    return jax.vmap(per_context)(contexts).mean(0)


def phase_accuracy(gates, contexts, sc, vocab: int, replaced=None):
    """Top-1 accuracy per query position over every query of `contexts`, the logits dense
    over all N tokens; `replaced`: (H,) mask of heads whose output is replaced by the rows
    of `replaced_outputs` (H, N) (mean-replacement knockout), as `(mask, outputs)`."""
    chunks, stride = contexts.shape[1:]
    c, r = _problems(chunks, stride)

    def hit(tokens, a, b):
        out = head_token_weights(gates, tokens, a, b, sc, vocab)
        if replaced is not None:
            mask, means = replaced
            out = jnp.where(mask[:, None], means, out)
        z = sc.beta * out.sum(0)
        target = tokens[a, b + 1]
        best = z.max()
        ties = jnp.sum(z == best)
        return jnp.where(z[target] == best, 1.0 / ties, 0.0)

    hits = jax.vmap(lambda t: jax.vmap(lambda a, b: hit(t, a, b))(c, r))(contexts)
    return hits.reshape(contexts.shape[0], chunks, stride - 1).mean(axis=(0, 1))


def knockout(gates, head: int, calibration, evaluation, sc, vocab: int):
    """Per-phase accuracy with head `head`'s output replaced, at every query, by its mean
    over the calibration contexts (disjoint from the evaluation contexts)."""
    means = mean_head_outputs(gates, calibration, sc, vocab)
    mask = jnp.arange(means.shape[0]) == head
    return phase_accuracy(gates, evaluation, sc, vocab, replaced=(mask, means))


def cycle(gates: induction.StaticGates, delta: int) -> induction.StaticGates:
    """The gates with their position parameters shifted by delta (logit_r <- logit_{r-delta},
    key and value alike), as the paper cycles Z_i, b_i."""
    return induction.StaticGates(jnp.roll(gates.logits, delta, axis=-1))


float64_module(__name__)

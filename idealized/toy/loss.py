"""Readout, losses and accuracy of the retrieval model (docs/theory.md §3).

`mse` is `|Pbar - onehot(c*)|^2` (canonical); `ce` is `-log Pbar[c*]` (a control:
for one head it is convex in the pooling weights at d = infinity, so no
spontaneous specialisation). The training objective adds the weight-decay
penalty `weight_decay/2 * sum |w|^2` over `RetrievalModel.decayed()`, and with
`phase_entropy` > 0 the regulariser `-phase_entropy * mean_h entropy(alpha_h)`.
Offset ensembles act at inference only: `batch_correct` reads `inference_logits`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from weakspots.idealized.toy.model import RetrievalModel
from weakspots.idealized.toy.task import Batch
from weakspots.idealized.types import Logits


def head_average(logits: Logits) -> Float[Array, " N"]:
    """`Pbar = mean_h softmax_c(z_h)`."""
    return jnp.mean(jax.nn.softmax(logits, axis=-1), axis=0)


def retrieval_loss(logits: Logits, target: Int[Array, ""], kind: str) -> Float[Array, ""]:
    """One problem's loss: `mse` = `|Pbar - onehot|^2`, `ce` = `-log Pbar[target]`."""
    if kind == "mse":
        onehot = jax.nn.one_hot(target, logits.shape[-1], dtype=logits.dtype)
        return jnp.sum((head_average(logits) - onehot) ** 2)
    if kind == "ce":
        log_p = jax.nn.log_softmax(logits, axis=-1)[:, target]
        return jnp.log(logits.shape[0]) - jax.nn.logsumexp(log_p)
    raise ValueError(f"unknown loss {kind!r}")


def needle_position(batch: Batch) -> Int[Array, " B"]:
    """Token index `c* s + phi` of each needle."""
    stride = (batch.gram if batch.gram is not None else batch.keys).shape[2]
    return batch.target * stride + batch.phase


def batch_logits(model: RetrievalModel, batch: Batch) -> Float[Array, "B H N"]:
    if model.needs_position:  # stagger / overlap / rope_anchor: entries aligned to the needle
        if batch.gram is not None:
            return jax.vmap(lambda p, g, r: model.logits_at(p, gram=g, rope_norms=r))(
                needle_position(batch), batch.gram, batch.rope_norms
            )
        return jax.vmap(lambda p, k, q: model.logits_at(p, keys=k, query=q))(
            needle_position(batch), batch.keys, batch.query
        )
    if batch.gram is not None:
        return jax.vmap(model.logits_from_gram)(batch.gram)
    return jax.vmap(model.logits_from_keys)(batch.keys, batch.query)


def inference_logits(model: RetrievalModel, batch: Batch) -> Float[Array, "B KH N"]:
    """The readout's logits: `batch_logits`, or every member of the offset ensemble (K > 1)."""
    if model.offset_ensemble == 1:
        return batch_logits(model, batch)
    if batch.gram is not None:
        return jax.vmap(lambda p, g, r: model.inference_logits(p, gram=g, rope_norms=r))(
            needle_position(batch), batch.gram, batch.rope_norms
        )
    return jax.vmap(lambda p, k, q: model.inference_logits(p, keys=k, query=q))(
        needle_position(batch), batch.keys, batch.query
    )


def phase_entropy(model: RetrievalModel) -> Float[Array, ""]:
    """`mean_h entropy(alpha_h)` of the pooling weights (the phase-entropy regulariser's term)."""
    weights = model.pooling_weights()
    logs = jnp.log(jnp.where(weights > 0, weights, 1.0))
    return -jnp.mean(jnp.sum(weights * logs, axis=-1))


def correct(logits: Logits, target: Int[Array, ""]) -> Bool[Array, ""]:
    """Retrieval succeeds when `argmax_c Pbar == c*`."""
    return jnp.argmax(head_average(logits)) == target


def objective(model: RetrievalModel, batch: Batch, kind: str, weight_decay) -> Float[Array, ""]:
    """The loss both dynamics minimise: mean retrieval loss plus the weight-decay penalty."""
    logits = batch_logits(model, batch)
    data = jnp.mean(jax.vmap(retrieval_loss, in_axes=(0, 0, None))(logits, batch.target, kind))
    penalty = sum(jnp.sum(w**2) for w in model.decayed())
    total = data + 0.5 * weight_decay * penalty
    if model.phase_entropy:  # static: the canonical objective is untouched
        total = total - model.phase_entropy * phase_entropy(model)
    return total


def batch_correct(model: RetrievalModel, batch: Batch) -> Bool[Array, " B"]:
    """Per needle, whether the readout (offset-ensembled at inference when K > 1) is right."""
    return jax.vmap(correct)(inference_logits(model, batch), batch.target)

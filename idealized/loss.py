"""Readout, losses and accuracy of the retrieval model (THEORY.md section 3).

`mse` is `|Pbar - onehot(c*)|^2` (canonical); `ce` is `-log Pbar[c*]` (a control:
for one head it is convex in the pooling weights at d = infinity, so no
spontaneous specialisation). The training objective adds the weight-decay
penalty `weight_decay/2 * sum |w|^2` over `RetrievalModel.decayed()`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int

from .model import RetrievalModel
from .task import Batch
from .types import Logits


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
        return jax.nn.logsumexp(log_p) - jnp.log(logits.shape[0])
    raise ValueError(f"unknown loss {kind!r}")


def batch_logits(model: RetrievalModel, batch: Batch) -> Float[Array, "B H N"]:
    if batch.gram is not None:
        return jax.vmap(model.logits_from_gram)(batch.gram)
    return jax.vmap(model.logits_from_keys)(batch.keys, batch.query)


def correct(logits: Logits, target: Int[Array, ""]) -> Bool[Array, ""]:
    """Retrieval succeeds when `argmax_c Pbar == c*`."""
    return jnp.argmax(head_average(logits)) == target


def objective(model: RetrievalModel, batch: Batch, kind: str, weight_decay) -> Float[Array, ""]:
    """The loss both dynamics minimise: mean retrieval loss plus the weight-decay penalty."""
    logits = batch_logits(model, batch)
    data = jnp.mean(jax.vmap(retrieval_loss, in_axes=(0, 0, None))(logits, batch.target, kind))
    penalty = sum(jnp.sum(w**2) for w in model.decayed())
    return data + 0.5 * weight_decay * penalty


def batch_correct(model: RetrievalModel, batch: Batch) -> Bool[Array, " B"]:
    return jax.vmap(correct)(batch_logits(model, batch), batch.target)

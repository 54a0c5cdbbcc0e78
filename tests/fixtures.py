"""Setups only tests use, built on the experiments' measurements (`sims.experiments.measure`)."""

from __future__ import annotations

import numpy as np

from weakspots.idealized.precision import float64
from weakspots.sims.experiments.measure import flows_from_the_trainers_start, reduced_weights


@float64
def distance_to_reduced(dims, samples, seed=0, t_end=400.0, saves=41):
    """Max abs pooling-weight distance between the finite-d flow at each d and the reduced flow.

    Same start (the trainer's init at init_scale 0.3, seed `seed`); returns (dims, distances).
    """
    ts, finite, start = flows_from_the_trainers_start(dims, samples, seed, 0, t_end, saves)
    return np.asarray(dims), np.max(np.abs(finite - reduced_weights(start, ts)), axis=(1, 2, 3))


def assert_only_the_indexer_learns_from_its_kl(module, inputs, kl_of_stats) -> None:
    """In `module` (an nnx layer or decoder called on `inputs`): the gradient of the captured
    indexer KL (`kl_of_stats(stats)`) reaches every indexer parameter and nothing else, and
    the gradient of the output reaches no indexer parameter (the top-k passes none)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from weakspots.idealized.decoder.v4_attention import IndexerStat

    graph, state = nnx.split(module)

    def kl(state):
        _, stats = nnx.capture(lambda m, x: m(x), IndexerStat)(nnx.merge(graph, state), inputs)
        return kl_of_stats(stats)

    def output(state):
        return jnp.sum(nnx.merge(graph, state)(inputs) ** 2)

    for loss, inside in ((kl, True), (output, False)):
        grads = dict(nnx.to_flat_state(jax.jit(jax.grad(loss))(state)))
        for path, g in grads.items():
            norm = float(jnp.abs(g.get_value()).max())
            if ("indexer" in path) == inside:
                assert norm > 0, path
            else:
                assert norm == 0, path


def jaxpr_dot_flops(fn, *args) -> float:
    """2 x multiply-adds of every `dot_general` in `fn(*args)`'s jaxpr (nested jaxprs
    included): 2 x output size x contracted size, counted from the traced program."""
    import math

    import jax

    def walk(jaxpr) -> float:
        total = 0.0
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "dot_general":
                (contract, _), _ = eqn.params["dimension_numbers"]
                lhs = eqn.invars[0].aval.shape
                total += (
                    2.0 * math.prod(eqn.outvars[0].aval.shape) * math.prod(lhs[i] for i in contract)
                )
            for value in eqn.params.values():
                for sub in value if isinstance(value, tuple | list) else (value,):
                    inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr's Jaxpr, or a Jaxpr
                    if hasattr(inner, "eqns"):
                        total += walk(inner)
        return total

    return walk(jax.make_jaxpr(fn)(*args).jaxpr)

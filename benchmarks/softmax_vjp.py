"""The masked softmax's backward in V4's attention step: three forms, timed in one run.

`idealized.decoder.primitives.masked_softmax` carries a hand-written backward. This times the
training step of `benchmarks.v4_vs_hf` (one CSA and one HCA layer, forward, backward,
AdamW; same shapes and weights) with each form of the softmax's backward:

* `autodiff`: jax's autodiff of the forward (`e / sum(e)` with masks);
* `exact` (the project's): autodiff's operations in autodiff's order, keeping only `e` and
  the row sums from the forward (gradients equal to the bit, so trained decoders and their
  recordings are unchanged);
* `p_form`: `p (g - sum(g p))`, the textbook form: fewer divisions, other rounding.

It reports each form's step time against `autodiff`'s (median over interleaved rounds of the
ratio within a round) and the largest gradient difference from `autodiff`'s in both layers
(0 for `exact`). Needs torch and transformers (the `[hf]` extra), as `v4_vs_hf` does:

    python -m weakspots.benchmarks.softmax_vjp [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from weakspots.benchmarks import v4_vs_hf
from weakspots.idealized.decoder import primitives, v4_attention


def autodiff_masked_softmax(scores, mask):
    """`masked_softmax`'s forward, differentiated by jax."""
    return primitives._masked_softmax_forward(scores, mask)[0]


@jax.custom_vjp
def p_form_masked_softmax(scores, mask):
    """`masked_softmax` with the backward `p (g - sum(g p))`."""
    return autodiff_masked_softmax(scores, mask)


def _p_forward(scores, mask):
    p = autodiff_masked_softmax(scores, mask)
    return p, p


def _p_backward(p, g):
    return p * (g - jnp.sum(g * p, axis=-1, keepdims=True)), None


p_form_masked_softmax.defvjp(_p_forward, _p_backward)

FORMS = {
    "autodiff": autodiff_masked_softmax,
    "exact": primitives.masked_softmax,
    "p_form": p_form_masked_softmax,
}


def _using(form):
    """Builds the V4 layers' step with `form` as their softmax (swapped in while tracing)."""

    def trace(fn):
        def call(*args):
            kept = v4_attention.masked_softmax
            v4_attention.masked_softmax = FORMS[form]
            try:
                return fn(*args)
            finally:
                v4_attention.masked_softmax = kept

        return call

    return trace


def gradient_differences(data, form: str) -> list[float]:
    """Per layer, the largest |gradient of `form` - autodiff's| over every parameter."""
    from weakspots.interop.hf import layer_from_hf

    config = data.config.to_dict()
    x, target = jnp.asarray(data.x), jnp.asarray(data.target)
    out = []
    for index, state in enumerate(data.states):
        graph, params = nnx.split(layer_from_hf(config, state, index))

        def loss(params, graph=graph):
            return jnp.mean((nnx.merge(graph, params)(x) - target) ** 2)

        grads = {f: jax.jit(_using(f)(jax.grad(loss)))(params) for f in ("autodiff", form)}
        diffs = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), *grads.values())
        out.append(max(jax.tree.leaves(diffs)))
    return out


def run(settings: v4_vs_hf.V4BenchSettings = v4_vs_hf.FULL, rounds: int = 7) -> dict:
    """Step-time ratios against `autodiff` and gradient differences (module docstring)."""
    data = v4_vs_hf.problem(settings)
    steps = {}
    for form in FORMS:
        with_form = _using(form)
        step = with_form(v4_vs_hf.jax_trainer)(data, settings)
        with_form(step)()  # traces and compiles with this form
        steps[form] = step
    seconds = {form: [] for form in FORMS}
    for _ in range(rounds):
        for form, step in steps.items():
            start = time.perf_counter()
            for _ in range(settings.steps):
                out = step()
            jax.block_until_ready(out)
            seconds[form].append((time.perf_counter() - start) / settings.steps)
    base = np.asarray(seconds["autodiff"])
    return {
        "speedup_vs_autodiff": {
            f: float(np.median(base / np.asarray(s))) for f, s in seconds.items()
        },
        "median_step_seconds": {f: float(np.median(s)) for f, s in seconds.items()},
        "max_gradient_difference": {f: gradient_differences(data, f) for f in ("exact", "p_form")},
        "length": settings.length,
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="T=512, 3 rounds")
    args = parser.parse_args()
    reason = v4_vs_hf.available()
    if reason is not None:
        raise SystemExit(reason)
    settings = v4_vs_hf.QUICK if args.quick else v4_vs_hf.FULL
    print(json.dumps(run(settings, rounds=3 if args.quick else 7), indent=2))


if __name__ == "__main__":
    main()

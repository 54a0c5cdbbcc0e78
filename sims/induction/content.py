"""The gradient flow of the content-gated induction model (`idealized.induction_content`):
diffrax Tsit5 + PID on the exact population loss, float64, many (config, seed) runs of one
shape in one compiled, vmapped solve (the task's knobs, gamma, beta, N and rho travel as
arrays).

Saved along each flow: the gates averaged over windows, the paper's effective offsets
(static and per-window, exact over the law of the marks) and the loss; at t1 the exact
per-phase accuracy, the gates of a window marked at each position, and the rule each head
implements (`head_rule`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from weakspots.idealized import induction
from weakspots.idealized import induction_content as content
from weakspots.idealized.induction_content import ContentConfig
from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit
from weakspots.sims.induction.flow import save_times
from weakspots.sims.induction.summary import CONCENTRATED
from weakspots.sims.toy.flow import FlowFailed, first_failure, gradient_flow


def _scales(config: ContentConfig) -> induction.Scales:
    return induction.Scales(
        *(
            jnp.asarray(float(v), jnp.float64)
            for v in (config.vocab, config.gamma, config.beta, 0.0)
        )
    )


@functools.lru_cache(maxsize=16)
def _solver(shape: ContentConfig):
    def loss(g, a):
        sc, kn = a
        return content.population_loss(g, shape, sc, kn)

    def measures(g, sc, kn):
        return (
            content.mean_gates(g, shape, kn),
            content.gate_offsets(g, shape, kn),
            content.population_loss(g, shape, sc, kn),
        )

    def one(seed, rho, sc, kn, ts):
        y0 = content.init_gates(jax.random.key(seed), shape, rho)
        saveat = diffrax.SaveAt(
            subs=[
                diffrax.SubSaveAt(ts=ts, fn=lambda t, y, a: measures(y, *a)),
                diffrax.SubSaveAt(t1=True),
            ]
        )
        sol = gradient_flow(loss, y0, (sc, kn), ts, rtol=shape.rtol, atol=shape.atol,
                            max_steps=shape.max_steps, saveat=saveat, throw=False)  # fmt: skip
        (weights, offsets, losses), final = sol.ys
        last = jax.tree_util.tree_map(lambda x: x[0], final)
        accuracy = content.phase_accuracy(last, shape, sc, kn)
        return weights, offsets, losses, accuracy, last.mark_gates(), sol.result._value

    return jit(jax.vmap(one, in_axes=(0, 0, 0, 0, None)))


def head_rule(mark_gates) -> list[str]:
    """Per head, the rule its end state implements, from its gates in a window marked at m
    (M, H, 2, S), m = 0..S-2: `content` (key one-hot (>= 0.99) on the mark and value on the
    token after it, in every window), `static` (key one-hot on one non-final position r and
    value on r + 1, the same in every window) or `mixed`."""
    g = np.asarray(mark_gates)
    marks, heads, s = g.shape[0], g.shape[1], g.shape[-1]
    out = []
    for h in range(heads):
        key, value = g[:, h, 0], g[:, h, 1]
        pos = np.argmax(key, axis=-1)
        sharp = np.all(key.max(axis=-1) >= CONCENTRATED) and np.all(
            value[np.arange(marks), np.minimum(pos + 1, s - 1)] >= CONCENTRATED
        )
        if sharp and np.all(pos == np.arange(marks)):
            out.append("content")
        elif sharp and np.all(pos == pos[0]) and pos[0] <= s - 2:
            out.append("static")
        else:
            out.append("mixed")
    return out


@dataclass(frozen=True)
class ContentFlows:
    """Flows of several (config, seed) runs of one shape: times (T,); per run weights
    (R, T, H, 2, S) (gates averaged over windows), offsets (R, T, H, 2, 2) (static,
    per-window), loss (R, T), phase_accuracy (R, S-1) at t1, mark_gates (R, S-1, H, 2, S)
    at t1, rules (R, H)."""

    configs: tuple[ContentConfig, ...]
    times: np.ndarray
    weights: np.ndarray
    offsets: np.ndarray
    loss: np.ndarray
    phase_accuracy: np.ndarray
    mark_gates: np.ndarray
    rules: tuple[tuple[str, ...], ...]
    wall_seconds: float

    def regime(self, run: int) -> str:
        """`content` or `static` when every head of the run follows that rule, else `mixed`."""
        rules = set(self.rules[run])
        return rules.pop() if len(rules) == 1 else "mixed"


def solve_many(configs: Sequence[ContentConfig]) -> ContentFlows:
    """Integrate the flow of every config from its own seed's start, all of one shape
    (`ContentConfig.shape`) in one vmapped solve. Raises FlowFailed if any run fails."""
    configs = tuple(configs)
    shapes = {c.shape for c in configs}
    if len(shapes) != 1:
        raise ValueError(f"solve_many needs configs of one shape, got {len(shapes)}")
    shape = shapes.pop()
    started = time.perf_counter()
    ts = jnp.asarray(save_times(configs[0].t1, shape.saves))
    if any(c.t1 != configs[0].t1 for c in configs):
        raise ValueError("solve_many needs one t1 for every config")
    stack = lambda xs: jax.tree_util.tree_map(lambda *a: jnp.stack(a), *xs)  # noqa: E731
    sc = stack([_scales(c) for c in configs])
    kn = stack([content.knobs(c) for c in configs])
    seeds = jnp.asarray([c.seed for c in configs], jnp.uint32)
    rho = jnp.asarray([c.init_scale for c in configs], jnp.float64)
    weights, offsets, loss, accuracy, marks, result = _solver(shape)(seeds, rho, sc, kn, ts)
    bad = first_failure(result)
    if bad is not None:
        raise FlowFailed(
            f"content flow of {configs[bad]} failed (diffrax result code "
            f"{int(result[bad])}, e.g. max_steps reached): raise max_steps or lower t1"
        )
    loss = np.asarray(loss)
    if not np.all(np.isfinite(loss)):
        raise FlowFailed("content flow left a non-finite loss")
    marks = np.asarray(marks)
    return ContentFlows(
        configs,
        np.asarray(ts),
        np.asarray(weights),
        np.asarray(offsets),
        loss,
        np.asarray(accuracy),
        marks,
        tuple(tuple(head_rule(m)) for m in marks),
        time.perf_counter() - started,
    )


@functools.lru_cache(maxsize=16)
def _trainer(shape: ContentConfig, batch: int, steps: int):
    def one(seed, rho, sc, kn, lr):
        gates = content.init_gates(jax.random.key(seed), shape, rho)

        def step(g, key):
            queries, marks = content.sample_problems(key, shape, kn, batch)
            grad = jax.grad(content.batch_loss)(g, queries, marks, sc)
            return jax.tree_util.tree_map(lambda p, d: p - lr * d, g, grad), None

        keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), 1), steps)
        gates, _ = jax.lax.scan(step, gates, keys)
        return (
            content.gate_offsets(gates, shape, kn),
            content.phase_accuracy(gates, shape, sc, kn),
            gates.mark_gates(),
        )

    return jit(jax.vmap(one))


def train_many(configs: Sequence[ContentConfig], lr: float, batch: int, steps: int) -> dict:
    """SGD on problems drawn from each config's task (`content.sample_problems`), from the
    flow's start of its seed, all of one shape in one vmapped program: per run the end
    offsets (R, H, 2, 2), the exact per-phase accuracy (R, S-1) and the rules (R, H)."""
    configs = tuple(configs)
    shapes = {c.shape for c in configs}
    if len(shapes) != 1:
        raise ValueError(f"train_many needs configs of one shape, got {len(shapes)}")
    stack = lambda xs: jax.tree_util.tree_map(lambda *a: jnp.stack(a), *xs)  # noqa: E731
    offsets, accuracy, marks = _trainer(shapes.pop(), batch, steps)(
        jnp.asarray([c.seed for c in configs], jnp.uint32),
        jnp.asarray([c.init_scale for c in configs], jnp.float64),
        stack([_scales(c) for c in configs]),
        stack([content.knobs(c) for c in configs]),
        jnp.full(len(configs), float(lr)),
    )
    if not np.all(np.isfinite(np.asarray(offsets))):
        raise FlowFailed("content SGD left non-finite gates")
    return {
        "offsets": np.asarray(offsets),
        "phase_accuracy": np.asarray(accuracy),
        "rules": [head_rule(m) for m in np.asarray(marks)],
    }


def rule_gates(config: ContentConfig, rule: str, strength: float = 40.0) -> content.ContentGates:
    """Gates at the one-hot limit of a rule (every head alike): `static` (position logits
    +strength on the favourite key position and the value position after it) or `content`
    (content weights +strength on the key's `marked` and the value's `after` feature)."""
    h, s = config.heads, config.stride
    position = np.zeros((h, 2, s))
    weights = np.zeros((h, 2, s, content.FEATURES))
    if rule == "static":
        position[:, induction.KEY, config.favourite] = strength
        position[:, induction.VALUE, config.favourite + 1] = strength
    elif rule == "content":
        weights[:, induction.KEY, :, 0] = strength
        weights[:, induction.VALUE, :, 1] = strength
    else:
        raise ValueError(f"rule must be static or content, got {rule!r}")
    return content.ContentGates(jnp.asarray(position), jnp.asarray(weights))


@functools.lru_cache(maxsize=16)
def _loss_of(shape: ContentConfig):
    return jit(lambda g, sc, kn: content.population_loss(g, shape, sc, kn))


def rule_loss(config: ContentConfig, rule: str) -> float:
    """The exact population loss of `rule_gates(config, rule)`."""
    return float(
        _loss_of(config.shape)(rule_gates(config, rule), _scales(config), content.knobs(config))
    )


float64_module(__name__)

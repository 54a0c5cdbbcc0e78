"""Which support size the d = inf flow selects from near-uniform starts: the cut-local race.

Derivation (docs/theory.md §9.1; docs/theory_derivations.md §1; built on §5, §6.2, §6.4,
§6.5). One head, mse, fixed gain beta, c = N/(N-1), w(m) = 2 sigma_N (1 - sigma_N)^2.

1. Mean field. The flow of docs/theory.md §5 is
   da_j/dt = alpha_j (W(alpha_j) - sum_i alpha_i W(alpha_i))
   with W(alpha) = (c beta/s) w(beta alpha): every phase's logit obeys one 1-D equation
   driven by two common scalars (the normaliser and the mean fitness). Two phases never
   cross, so the phases keep the order of their starting logits, the end state covers the
   k largest, and phases with equal logits stay equal: grouping phases into blocks of equal
   logits is an invariant subspace, on which the flow is that of the block loss
   L = c sum_b (m_b/s) l(beta alpha_b) with alpha_b = e^{a_b} / sum_b' m_b' e^{a_b'}
   (m_b phases in block b; a phase's logit moves by 1/m_b of the block's gradient).
2. Linear stage. Uniform pooling is unstable with one rate lambda on every zero-sum mode
   (docs/theory.md §6.2), so the start's centred logits grow without turning: the nonlinear
   stage begins from the start's own direction, i.e. from its order statistics.
3. Cut-locality. Phases far above the cut pass beta alpha > log((N-1)/2) early, where their
   differences relax (docs/theory.md §6.4), and phases far below it shrink together: two
   small phases' logit gap moves at (alpha_i - alpha_j)(W(0) - W_bar), second order in their
   weights. So only the phases next to the cut race as individuals; the others act through
   their block's mean logit. The law integrates the block flow of step 1 (dimension
   2 + 2 halfwidth per cut, whatever the stride) from the start lumped accordingly: blocks
   above and below the cut take the mean of their members' starting logits, the
   2 halfwidth phases around the cut keep theirs. The typical cut is that of the start at
   the expected order statistics (Blom's approximation), integrated once.
4. End state. The race leaves a support of size k_race; a dropped phase re-enters iff the
   k-state's re-entry rate kappa(k) > 0 (theory.support.reentry_rate), at a time
   1/(kappa alpha_j) that can be far beyond the race. At t = inf the support grows one phase
   at a time while kappa(k) > 0 (the heaviest dropped phase first, the rest then falling
   back): the closure k_inf = min {k >= k_race : kappa(k) <= 0}.

Several heads (H = 2): the dominant linear mode splits the phases between the heads
(theory.thresholds), so the phases are ordered by a_1 - a_2: head 1's cut sits near the top,
head 2's near the bottom, and the blocks are taken around both cuts; k counts the phases
covered by some head, at a finite horizon (the heads trade phases by slow re-entries).

Where it holds: the reduction of step 3 is approximate; its error is measured against the
flow (tests/theory/test_theory_selection.py, docs/theory_derivations.md's table).
"""

from __future__ import annotations

import functools
import math

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from weakspots.idealized.precision import float64_module
from weakspots.idealized.xla import jit

from .gain import gain_race, support_ladder
from .reduced import centred_logits
from .support import reentry_rate
from .thresholds import growth_rate, specialization_time

RACE_SETTLE = 4000.0  # one head: default horizon past t* (the race is decided well before)
HEADS_SETTLE = 20000.0  # several heads: time past t* of the finite horizon (slow trading)
HALFWIDTH = 2  # individual phases on each side of a cut
RACE_COLLAPSE = 10.0  # learned gain: the collapse is integrated to t_race + this / lambda
COVERED = 0.5  # a phase is covered when its weight exceeds COVERED / s


def block_loss(logits, multiplicity, gain, chunks, stride, loss="mse"):
    """The reduced loss on blocks of equal phases (module docstring, step 1).

    logits (H, C) per head and block; multiplicity (C,) phases per block (summing to s);
    gain (H,); chunks N; stride s; loss "mse" | "ce". Equals theory.reduced_loss of the
    (H, s) state in which every phase of block b has logit logits[:, b]. Returns a scalar.
    """
    log_norm = jax.nn.logsumexp(logits, axis=-1, b=multiplicity[None, :], keepdims=True)
    weights = jnp.exp(logits - log_norm)
    needle = jnp.mean(jax.nn.sigmoid(gain[:, None] * weights - jnp.log(chunks - 1.0)), axis=0)
    if loss == "mse":
        per_phase = chunks / (chunks - 1.0) * (1.0 - needle) ** 2
    else:
        per_phase = -jnp.log(needle)
    return jnp.sum(multiplicity * per_phase) / stride


@functools.partial(jit, static_argnames=("stride", "loss", "gain_parametrisation"))
def _block_flow(
    logits, multiplicity, gain, chunks, t_end, learn, weight_decay, *, stride, loss,
    gain_parametrisation,
):  # fmt: skip
    # Padding blocks (multiplicity 0, block_flow's width) carry no weight, do not move, and
    # stay out of the error norm: the RMS over the real blocks' logits and the gains, which
    # is optx.rms_norm of the unpadded state.
    real = multiplicity > 0
    divisor = jnp.where(real, multiplicity, 1.0)
    size = jnp.sqrt((jnp.sum(real) + 1.0) * logits.shape[1])

    def norm(tree):
        return optx.two_norm(tree) / size

    def total(state):
        a, param = state
        beta = jnp.exp(param) if gain_parametrisation == "log" else param
        data = block_loss(a, multiplicity, beta, chunks, stride, loss)
        return data + 0.5 * weight_decay * jnp.sum(beta**2)

    def field(t, state, args):
        del t, args
        grad_a, grad_gain = jax.grad(total)(state)
        return -grad_a / divisor[None, :], -learn * grad_gain

    def one(a0):
        param = jnp.log(gain) if gain_parametrisation == "log" else gain
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            diffrax.Tsit5(),
            0.0,
            t_end,
            None,
            (a0, param),
            stepsize_controller=diffrax.PIDController(rtol=1e-7, atol=1e-9, norm=norm),
            max_steps=200_000,
            throw=False,
        )
        final, param = (x[-1] for x in solution.ys)
        log_norm = jax.nn.logsumexp(final, axis=-1, b=multiplicity[None, :], keepdims=True)
        beta = jnp.exp(param) if gain_parametrisation == "log" else param
        return jnp.exp(final - log_norm), beta

    return jax.vmap(one)(logits)


def block_flow(
    logits,
    multiplicity,
    gain,
    chunks,
    stride,
    t_end,
    loss="mse",
    learn_gain=False,
    weight_decay=0.0,
    gain_parametrisation="log",
    batch=None,
    width=None,
):
    """Integrate the block flow (module docstring, step 1) from `logits` to t_end.

    logits (B, H, C) starts; multiplicity (C,); gain scalar or (H,) (the start, when
    learned); chunks N; stride s; t_end; loss; learn_gain: the gain follows
    -dL/dbeta - weight_decay beta ("linear") or its log does beta times that ("log"), as in
    sims.toy.flow.solve_many. Tsit5 with a PID controller (rtol 1e-7), float64.
    batch, width: solve B' >= B starts of C' >= C blocks (the last start repeated, blocks of
    multiplicity 0 appended), so that calls of different shapes share one compiled
    program; each start's solution is the unpadded one. Returns (weights (B, H, C) of each
    phase of each block at t_end, gains (B, H)); nan where the solve failed.
    """
    logits = np.asarray(logits, float)
    rows, heads, blocks = logits.shape
    rows_padded = rows if batch is None else max(int(batch), rows)
    blocks_padded = blocks if width is None else max(int(width), blocks)
    padded = np.zeros((rows_padded, heads, blocks_padded))
    padded[:rows, :, :blocks] = logits
    padded[rows:, :, :blocks] = logits[-1]
    counts = np.zeros(blocks_padded)
    counts[:blocks] = multiplicity
    gains = jnp.broadcast_to(jnp.asarray(gain, jnp.float64), (heads,))
    weights, final_gains = _block_flow(
        jnp.asarray(padded, jnp.float64),
        jnp.asarray(counts, jnp.float64),
        gains,
        jnp.asarray(float(chunks)),
        jnp.asarray(float(t_end)),
        jnp.asarray(float(learn_gain)),
        jnp.asarray(float(weight_decay)),
        stride=int(stride),
        loss=loss,
        gain_parametrisation=gain_parametrisation,
    )
    return np.asarray(weights)[:rows, :, :blocks], np.asarray(final_gains)[:rows]


def expected_order_statistics(stride):
    """E of the order statistics of s standard normals, largest first (Blom's approximation).

    Phi^-1((i - 3/8) / (s + 1/4)) for i = 1..s. Returns (s,).
    """
    i = np.arange(1, stride + 1)
    return -np.asarray(jax.scipy.special.ndtri((i - 0.375) / (stride + 0.25)))


def phase_order(pooling_logits):
    """Phases ranked by the dominant linear mode, largest first (module docstring).

    pooling_logits (..., H, s), H in {1, 2}: by a (one head) or by a_1 - a_2 (two heads).
    Returns (..., s) phase indices.
    """
    a = np.asarray(pooling_logits, float)
    if a.shape[-2] == 1:
        key = a[..., 0, :]
    elif a.shape[-2] == 2:
        key = a[..., 0, :] - a[..., 1, :]
    else:
        raise ValueError("phase_order: the cut-local race is for one or two heads")
    return np.argsort(-key, axis=-1, kind="stable")


def typical_cuts(stride, chunks, gain, heads=1, loss="mse", t_end=None, batch=None):
    """Cuts of the start at the expected order statistics: ranks covered from the top and bottom.

    The start is 1e-4 times the centred, normalised expected order statistics (one head), or
    that split between two heads as (q, -q)/sqrt(2) (the differential mode); integrated by the
    block flow with every phase its own block to t_end (default specialization_time + the
    settle of support_size_law); batch: block_flow's (the start repeated, so that a later
    flow of that many starts reuses the compiled program). Returns a tuple of ints: (k,)
    for one head; (head 1's top count, s - head 2's bottom count) for two.
    """
    s = int(stride)
    q = expected_order_statistics(s)
    q = centred_logits(q)
    q = q / np.linalg.norm(q)
    start = 1e-4 * (q[None] if heads == 1 else np.stack([q, -q]) / math.sqrt(2.0))
    if t_end is None:
        t_end = _horizon(s, chunks, gain, heads, loss, 1e-4)
    weights = block_flow(start[None], np.ones(s), gain, chunks, s, t_end, loss, batch=batch)[0][0]
    covered = weights > COVERED / s
    if heads == 1:
        return (int(covered[0].sum()),)
    return int(covered[0].sum()), s - int(covered[1].sum())


def cut_blocks(stride, cuts, halfwidth=HALFWIDTH):
    """Blocks of ranks around the cuts: (start, stop) pairs covering 0..s-1 in order.

    A cut c (ranks 0..c-1 above it) keeps ranks c - halfwidth .. c + halfwidth - 1 as
    single-phase blocks; the runs of ranks between them form one block each.
    """
    single = {r for c in cuts for r in range(c - halfwidth, c + halfwidth) if 0 <= r < stride}
    blocks, r = [], 0
    while r < stride:
        stop = r + 1
        if r not in single:
            while stop < stride and stop not in single:
                stop += 1
        blocks.append((r, stop))
        r = stop
    return blocks


def _horizon(stride, chunks, gain, heads, loss, init_scale):
    settle = RACE_SETTLE if heads == 1 else HEADS_SETTLE
    t_star = specialization_time(stride, chunks, gain, init_scale, heads, loss)
    return float(t_star) + settle


def reentry_closure(stride, chunks, gain, support_size):
    """k_inf: the support at t = inf from a race's k (module docstring, step 4; one head, mse).

    Grows k by one while theory.support.reentry_rate(k) > 0. support_size: int or array.
    Returns the same shape.
    """
    sizes = np.atleast_1d(np.asarray(support_size, int)).copy()
    for i, k in enumerate(sizes):
        while k < stride and reentry_rate(stride, chunks, gain, k) > 0:
            k += 1
        sizes[i] = k
    return sizes.reshape(np.shape(support_size))


def support_size_law(
    stride,
    chunks,
    gain,
    heads=1,
    loss="mse",
    init_scale=0.01,
    samples=512,
    seed=0,
    t_end=None,
    halfwidth=HALFWIDTH,
):
    """P(k): the support size the d = inf flow selects from starts init_scale * N(0, 1) (module docstring).

    stride s, chunks N, gain beta, heads H (1 or 2), loss "mse" | "ce"; init_scale of the
    i.i.d. Gaussian pooling logits (H, s); samples: starts drawn from seed (their order
    statistics feed the race); t_end: None for the end state (one head: the race to
    specialization_time + RACE_SETTLE, then the re-entry closure; two heads: the finite
    horizon specialization_time + HEADS_SETTLE), or a horizon for the race itself;
    halfwidth: individual phases on each side of a cut.
    k is the support size (one head) or the number of phases some head covers (two).
    Returns a dict: law {k: P}, cuts (typical_cuts), blocks (cut_blocks), t_end (the race's
    horizon), closure (bool: the t = inf closure was applied). Where uniform pooling is
    stable, law is {s: 1}.
    """

    s, h = int(stride), int(heads)
    if not float(growth_rate(s, chunks, gain, h, loss)) > 0.0:
        return {"law": {s: 1.0}, "cuts": (), "blocks": [], "t_end": t_end, "closure": False}
    closure = t_end is not None and math.isinf(t_end)
    if closure and (h != 1 or loss != "mse"):
        raise ValueError("support_size_law: the t = inf closure is for one head and mse")
    finite = t_end is not None and not closure
    horizon = float(t_end) if finite else _horizon(s, chunks, gain, h, loss, init_scale)
    # one compiled flow for both: the typical start repeated to `samples` rows, the drawn
    # starts' blocks padded to s (block_flow's batch and width)
    cuts = typical_cuts(s, chunks, gain, h, loss, horizon, batch=samples)
    blocks = cut_blocks(s, cuts, halfwidth)
    rng = np.random.default_rng(seed)
    starts = init_scale * rng.standard_normal((samples, h, s))
    order = phase_order(starts)
    ranked = np.take_along_axis(starts, order[:, None, :], axis=-1)
    lumped = np.stack([ranked[..., a:b].mean(axis=-1) for a, b in blocks], axis=-1)
    multiplicity = np.array([b - a for a, b in blocks], float)
    weights, _ = block_flow(lumped, multiplicity, gain, chunks, s, horizon, loss, width=s)
    covered = (weights > COVERED / s).any(axis=1)
    k = (covered * multiplicity).sum(axis=-1).astype(int)
    if closure:
        k = reentry_closure(s, chunks, gain, k)
    sizes, counts = np.unique(k, return_counts=True)
    law = {int(a): float(n / samples) for a, n in zip(sizes, counts, strict=True)}
    return {"law": law, "cuts": cuts, "blocks": blocks, "t_end": horizon, "closure": closure}


def learned_gain_law(
    stride,
    chunks,
    init_gain,
    weight_decay,
    init_scale,
    t_end,
    gain_parametrisation="log",
    samples=256,
    seed=0,
    halfwidth=1,
):
    """P(k) and the gain of the learned-gain flow's end state at t_end (docs/theory.md §9.1, §6.6).

    One head, mse, gain learned from init_gain under the penalty weight_decay/2 beta^2,
    parametrised as in sims.toy.flow ("log" | "linear"); starts init_scale * N(0, 1) from seed.
    Where the gain wins the race (theory.gain.gain_race) pooling stays uniform: {s: 1}.
    Otherwise the collapse is the cut-local race (module docstring) with the gain a state
    variable of the block flow (block_flow(learn_gain=True)), integrated to
    t_race + RACE_COLLAPSE / lambda(beta_race), lumped around the cut that the start at the
    expected order statistics reaches; from each support size it leaves (at the median gain
    of its starts) the re-entry ladder (theory.gain.support_ladder) runs to t_end.
    Returns a dict: law {k: P}, gain {k: final gain}, collapse {k: P} (the race's sizes),
    cut, blocks.
    """

    s = int(stride)
    t_race, beta = gain_race(
        s, chunks, init_gain, weight_decay, init_scale, t_end, gain_parametrisation
    )
    if math.isinf(t_race):
        return {"law": {s: 1.0}, "gain": {s: beta}, "collapse": {}, "cut": None, "blocks": []}
    t_collapse = t_race + RACE_COLLAPSE / float(growth_rate(s, chunks, beta))
    flow = functools.partial(
        block_flow,
        gain=init_gain,
        chunks=chunks,
        stride=s,
        t_end=min(t_collapse, t_end),
        learn_gain=True,
        weight_decay=weight_decay,
        gain_parametrisation=gain_parametrisation,
    )
    q = expected_order_statistics(s)
    q = centred_logits(q)
    q = 1e-4 * q / np.linalg.norm(q)
    typical, _ = flow(q[None, None], np.ones(s), batch=samples)  # one compiled flow for both
    cut = int((typical[0, 0] > COVERED / s).sum())
    blocks = cut_blocks(s, (cut,), halfwidth)
    rng = np.random.default_rng(seed)
    starts = init_scale * rng.standard_normal((samples, 1, s))
    ranked = np.take_along_axis(starts, phase_order(starts)[:, None, :], axis=-1)
    lumped = np.stack([ranked[..., a:b].mean(axis=-1) for a, b in blocks], axis=-1)
    multiplicity = np.array([b - a for a, b in blocks], float)
    weights, gains = flow(lumped, multiplicity, width=s)
    k = ((weights[:, 0] > COVERED / s) * multiplicity).sum(axis=-1).astype(int)
    sizes, counts = np.unique(k, return_counts=True)
    law, final_gain = {}, {}
    for size, count in zip(sizes, counts, strict=True):
        start_gain = float(np.median(gains[k == size, 0]))
        end = (size, start_gain)
        if size < s and t_collapse < t_end:
            end = support_ladder(
                s, chunks, start_gain, int(size), weight_decay, t_collapse, t_end,
                gain_parametrisation,
            )[:2]  # fmt: skip
        law[int(end[0])] = law.get(int(end[0]), 0.0) + float(count / samples)
        final_gain[int(end[0])] = float(end[1])
    return {
        "law": law,
        "gain": final_gain,
        "collapse": {int(a): float(n / samples) for a, n in zip(sizes, counts, strict=True)},
        "cut": cut,
        "blocks": blocks,
    }


float64_module(__name__)  # 64-bit types inside these functions only

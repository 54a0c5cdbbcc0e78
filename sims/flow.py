"""Gradient flows integrated with diffrax: the reduced (d = infinity) flow of THEORY 5.

The vector field is generic, `-grad(loss_fn)(y, args)` for any loss function of the
state pytree, so a finite-d flow can reuse `gradient_flow` with its own loss.
The reduced flow's state is `FlowState(pooling_logits (H, s), gain_param (H,))`;
`gain_param` is log(gain) under the default "log" parametrisation (gain stays
positive; d log beta/dt = -beta dL/dbeta) and the gain itself under "linear"
(dbeta/dt = -dL/dbeta, the SGD-on-beta convention). A fixed gain is the same flow
with the gain's gradient stopped, so fixed and learned gains share one compilation.
"""

import functools

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float

from theory.reduced import reduced_loss, specialization_order


class FlowState(eqx.Module):
    """The reduced flow's state: pooling logits (H, s) and gain parameters (H,)."""

    pooling_logits: Float[Array, "heads stride"]
    gain_param: Float[Array, " heads"]


class FlowArgs(eqx.Module):
    """Hyperparameters that travel as arrays (one compilation serves a sweep)."""

    chunks: Float[Array, ""]
    learn_gain: Float[Array, ""]
    weight_decay: Float[Array, ""]
    entropy_weight: Float[Array, ""]
    phase_scale: Float[Array, " stride"]


class FlowHistory(eqx.Module):
    """A flow's trajectory; batched runs carry a leading batch axis on every field.

    times (T,); pooling_weights (T, H, s) = softmax of the logits; gain (T, H);
    loss (T,) the flow's objective (data loss + penalties) at the saved times;
    specialization_time () the first time specialization_order reaches the event
    level (inf if never before t_end), as defined in theory.specialization_time.
    """

    times: Float[Array, " T"]
    pooling_weights: Float[Array, "T heads stride"]
    gain: Float[Array, "T heads"]
    loss: Float[Array, " T"]
    specialization_time: Float[Array, ""]


def gain_from_param(gain_param, gain_parametrisation):
    """Gain beta from the flow's gain parameter: exp under "log", identity under "linear"."""
    if gain_parametrisation == "log":
        return jnp.exp(gain_param)
    if gain_parametrisation == "linear":
        return gain_param
    raise ValueError(f"unknown gain_parametrisation {gain_parametrisation!r}")


def gain_to_param(gain, gain_parametrisation):
    """Inverse of gain_from_param."""
    return jnp.log(gain) if gain_parametrisation == "log" else jnp.asarray(gain)


def reduced_objective(state: FlowState, args: FlowArgs, loss="mse", gain_parametrisation="log"):
    """The reduced flow's loss: theory.reduced_loss of the state, gain frozen unless learned.

    state: FlowState; args: FlowArgs; loss "mse" | "ce". Returns a scalar.
    """
    frozen = jax.lax.stop_gradient(state.gain_param)
    gain_param = args.learn_gain * state.gain_param + (1.0 - args.learn_gain) * frozen
    gain = gain_from_param(gain_param, gain_parametrisation)
    return reduced_loss(
        state.pooling_logits,
        gain,
        args.chunks,
        loss,
        args.weight_decay,
        args.phase_scale,
        args.entropy_weight,
    )


def gradient_flow_term(loss_fn):
    """diffrax term of dy/dt = -grad(loss_fn)(y, args), for any scalar loss_fn(y, args)."""

    def vector_field(t, y, args):
        del t
        return jax.tree_util.tree_map(jnp.negative, jax.grad(loss_fn)(y, args))

    return diffrax.ODETerm(vector_field)


def gradient_flow(
    loss_fn,
    y0,
    args,
    ts,
    *,
    rtol=1e-8,
    atol=1e-10,
    max_steps=200_000,
    event=None,
    saveat=None,
    throw=True,
):
    """Integrate dy/dt = -grad(loss_fn)(y, args) with Tsit5 + PID, float64, saving at ts.

    loss_fn(y, args) -> scalar; y0 any pytree; ts (T,) increasing, ts[0] the start.
    event: optional diffrax.Event (the solve then stops at the event); saveat
    overrides SaveAt(ts=ts); throw as in diffrax. Returns the diffrax Solution.
    """
    return diffrax.diffeqsolve(
        gradient_flow_term(loss_fn),
        diffrax.Tsit5(),
        t0=ts[0],
        t1=ts[-1],
        dt0=None,
        y0=y0,
        args=args,
        saveat=diffrax.SaveAt(ts=ts) if saveat is None else saveat,
        stepsize_controller=diffrax.PIDController(rtol=rtol, atol=atol),
        max_steps=max_steps,
        event=event,
        throw=throw,
    )


def specialization_event():
    """diffrax.Event at specialization_order(pooling_logits) = level, root-found.

    Reads (enabled, level) from args[1:], so one compiled solve serves runs with the
    event off (the saved trajectory) and on (the event time).
    """

    def cond_fn(t, y, args, **kwargs):
        del t, kwargs
        _, enabled, level = args
        return jnp.where(enabled, specialization_order(y.pooling_logits) - level, -1.0)

    return diffrax.Event(cond_fn, root_finder=optx.Newton(rtol=1e-10, atol=1e-10))


def initial_pooling_logits(key, heads, stride, init_scale):
    """Initial pooling logits init_scale * N(0, 1), shape (H, s)."""
    return init_scale * jax.random.normal(key, (heads, stride), dtype=jnp.float64)


@functools.partial(
    jax.jit,
    static_argnames=("loss", "gain_parametrisation", "max_steps"),
)
def _solve_batch(y0, args, ts, event_level, rtol, atol, loss, gain_parametrisation, max_steps):
    loss_fn = functools.partial(
        reduced_objective, loss=loss, gain_parametrisation=gain_parametrisation
    )

    def flagged_loss(y, flagged_args):
        return loss_fn(y, flagged_args[0])

    def solve(y0, args, enabled, event_level):
        return gradient_flow(
            flagged_loss,
            y0,
            (args, enabled, event_level),
            ts,
            rtol=rtol,
            atol=atol,
            max_steps=max_steps,
            event=specialization_event(),
            saveat=diffrax.SaveAt(ts=ts, t1=True),
            throw=False,  # checked below: an event is not a failure
        )

    def one(y0, args, event_level):
        # One solve, vmapped over (event off: the trajectory; event on: the event time).
        sols = jax.vmap(solve, in_axes=(None, None, 0, None))(
            y0, args, jnp.array([False, True]), event_level
        )
        failed = sols.result._value[0] != diffrax.RESULTS.successful._value
        ys = jax.tree_util.tree_map(lambda x: jnp.where(failed, jnp.nan, x[0, :-1]), sols.ys)
        losses = jax.vmap(loss_fn, in_axes=(0, None))(ys, args)
        started = specialization_order(y0.pooling_logits) >= event_level
        hit = jnp.asarray(sols.event_mask)[1]
        # An event stops the save grid early; its time is the last finite saved time.
        t_event = jnp.max(jnp.where(jnp.isfinite(sols.ts[1]), sols.ts[1], -jnp.inf))
        t_star = jnp.where(started, ts[0], jnp.where(hit, t_event, jnp.inf))
        return FlowHistory(
            times=ts,
            pooling_weights=jax.nn.softmax(ys.pooling_logits, axis=-1),
            gain=gain_from_param(ys.gain_param, gain_parametrisation),
            loss=losses,
            specialization_time=t_star,
        )

    return jax.vmap(one)(y0, args, event_level)


def reduced_flow(
    key=None,
    *,
    stride,
    chunks,
    heads=1,
    gain=16.0,
    init_scale=1e-3,
    weight_decay=0.0,
    learn_gain=False,
    loss="mse",
    t_end=1000.0,
    ts=None,
    n_save=101,
    rtol=1e-8,
    atol=1e-10,
    event_level=0.25,
    entropy_weight=0.0,
    phase_scale=None,
    gain_parametrisation="log",
    init_pooling_logits=None,
    max_steps=1_000_000,
):
    """Reduced gradient flow da/dt = -grad L_inf (THEORY 5), batched over starts and sweeps.

    key: a PRNG key or (B,) keys, one start per key (pooling logits
    init_scale * N(0, 1) of shape (H, s)); or init_pooling_logits (B, H, s) instead.
    gain, init_scale, weight_decay, chunks, learn_gain, entropy_weight, event_level:
    scalars or (B,) arrays (gain may be (B, H)); they travel as arrays, so one
    compilation serves every value (shapes are set by stride, heads, len(ts)).
    stride s, heads H; loss "mse" | "ce"; t_end or ts (T,) the save times;
    phase_scale: optional (s,) needle-logit factor (theory.rope); rtol/atol of the PID
    controller; event_level: the specialisation event (theory.specialization_time).
    Returns FlowHistory with a leading batch axis (B,) on every field; a run whose solve
    failed (e.g. max_steps reached) comes back as nan.
    """
    if init_pooling_logits is not None:
        logits0 = jnp.asarray(init_pooling_logits, dtype=jnp.float64)
        batch = logits0.shape[0]
    else:
        keys = jnp.asarray(key)
        if keys.ndim == 1 and not jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
            keys = keys[None]
        batch = keys.shape[0]
        scales = jnp.broadcast_to(jnp.asarray(init_scale, dtype=jnp.float64), (batch,))
        logits0 = jax.vmap(initial_pooling_logits, in_axes=(0, None, None, 0))(
            keys, heads, stride, scales
        )
    heads, stride = logits0.shape[1], logits0.shape[2]

    def per_run(x):
        # numpy first: a strongly typed array, so python floats and arrays share a trace.
        return jnp.asarray(np.broadcast_to(np.asarray(x, dtype=np.float64), (batch,)))

    gain = np.asarray(gain, dtype=np.float64)
    gains = jnp.asarray(
        np.broadcast_to(gain.reshape(-1, 1) if gain.ndim == 1 else gain, (batch, heads))
    )
    if phase_scale is None:
        phase_scale = np.ones((stride,))
    y0 = FlowState(logits0, gain_to_param(gains, gain_parametrisation))
    args = FlowArgs(
        chunks=per_run(chunks),
        learn_gain=per_run(float(learn_gain) if isinstance(learn_gain, bool) else learn_gain),
        weight_decay=per_run(weight_decay),
        entropy_weight=per_run(entropy_weight),
        phase_scale=jnp.asarray(
            np.broadcast_to(np.asarray(phase_scale, dtype=np.float64), (batch, stride))
        ),
    )
    if ts is None:
        ts = jnp.linspace(0.0, t_end, n_save)
    ts = jnp.asarray(np.asarray(ts, dtype=np.float64))
    return _solve_batch(
        y0,
        args,
        ts,
        per_run(event_level),
        rtol,
        atol,
        loss,
        gain_parametrisation,
        max_steps,
    )

"""Gradient flows integrated with diffrax: the reduced (d = infinity) flow of THEORY 5.

`reduced_flow(..., dim=d)` integrates the finite-d corrected loss instead
(theory.finite_d_loss, the expected mse loss at dimension d; one head, mse).

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

from weakspots.idealized.xla import jit
from weakspots.theory.finite_d import finite_d_loss
from weakspots.theory.reduced import reduced_loss, specialization_order


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
    dim: Float[Array, ""] | None = None
    """None: the d = inf loss L_inf; else the key dimension d of the corrected loss L_d."""


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

    state: FlowState; args: FlowArgs; loss "mse" | "ce". With args.dim set, the finite-d
    loss theory.finite_d_loss at that d instead (one head, mse). Returns a scalar.
    """
    frozen = jax.lax.stop_gradient(state.gain_param)
    gain_param = args.learn_gain * state.gain_param + (1.0 - args.learn_gain) * frozen
    gain = gain_from_param(gain_param, gain_parametrisation)
    if args.dim is not None:
        return finite_d_loss(
            state.pooling_logits,
            gain,
            args.chunks,
            args.dim,
            args.weight_decay,
            args.phase_scale,
            args.entropy_weight,
        )
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
    jit,
    static_argnames=("loss", "gain_parametrisation", "max_steps", "with_event"),
)
def _solve_batch(
    y0, args, ts, event_level, rtol, atol, loss, gain_parametrisation, max_steps, with_event
):
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
        # One solve, vmapped over (event off: the trajectory; event on: the event time);
        # without the event only the first (vmapped solves step together: half the work).
        flags = jnp.array([False, True]) if with_event else jnp.array([False])
        sols = jax.vmap(solve, in_axes=(None, None, 0, None))(y0, args, flags, event_level)
        failed = sols.result._value[0] != diffrax.RESULTS.successful._value
        ys = jax.tree_util.tree_map(lambda x: jnp.where(failed, jnp.nan, x[0, :-1]), sols.ys)
        losses = jax.vmap(loss_fn, in_axes=(0, None))(ys, args)
        t_star = jnp.nan
        if with_event:
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
    dim=None,
):
    """Reduced gradient flow da/dt = -grad L_inf (THEORY 5), batched over starts and sweeps.

    key: a PRNG key or (B,) keys, one start per key (pooling logits
    init_scale * N(0, 1) of shape (H, s)); or init_pooling_logits (B, H, s) instead.
    gain, init_scale, weight_decay, chunks, learn_gain, entropy_weight, event_level:
    scalars or (B,) arrays (gain may be (B, H)); they travel as arrays, so one
    compilation serves every value (shapes are set by stride, heads, len(ts)).
    stride s, heads H; loss "mse" | "ce"; t_end or ts (T,) the save times;
    phase_scale: optional (s,) needle-logit factor (theory.rope); rtol/atol of the PID
    controller; event_level: the specialisation event (theory.specialization_time), or
    None to skip it (specialization_time nan; the event's solve is half the cost).
    dim: None for L_inf; else d, a scalar or (B,) (one compilation serves every d), and
    the flow follows the finite-d expected loss L_d (theory.finite_d_loss; heads=1, mse).
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
    if dim is not None and (heads != 1 or loss != "mse"):
        raise ValueError("reduced_flow: the finite-d loss (dim=...) is for one head and mse")
    y0 = FlowState(logits0, gain_to_param(gains, gain_parametrisation))
    args = FlowArgs(
        chunks=per_run(chunks),
        learn_gain=per_run(float(learn_gain) if isinstance(learn_gain, bool) else learn_gain),
        weight_decay=per_run(weight_decay),
        entropy_weight=per_run(entropy_weight),
        phase_scale=jnp.asarray(
            np.broadcast_to(np.asarray(phase_scale, dtype=np.float64), (batch, stride))
        ),
        dim=None if dim is None else per_run(dim),
    )
    if ts is None:
        ts = jnp.linspace(0.0, t_end, n_save)
    ts = jnp.asarray(np.asarray(ts, dtype=np.float64))
    return _solve_batch(
        y0,
        args,
        ts,
        per_run(0.0 if event_level is None else event_level),
        rtol,
        atol,
        loss,
        gain_parametrisation,
        max_steps,
        event_level is not None,
    )


# ----------------------------------------------------------------------------- (b) finite-d flow


def finite_d_sample(config, samples, seed=0, dtype=jnp.float64):
    """A fixed sample of `samples` needles for `config.model`, stratified over phases.

    `samples // s` needles at each phase (exact balance: no phase is favoured by the draw),
    inner products only (`sample_batch(..., keys=False)`, exact in distribution). Returns a Batch.
    """
    from weakspots.idealized.task import sample_batch

    model_config = config.model
    per_phase = samples // model_config.stride
    key = jax.random.key(seed)
    parts = [
        sample_batch(
            jax.random.fold_in(key, phase),
            model_config,
            per_phase,
            keys=False,
            phase=phase,
            dtype=dtype,
        )
        for phase in range(model_config.stride)
    ]
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *parts)


def _trainer_times(config):
    steps = np.minimum(np.arange(config.eval_times + 1) * config.eval_every, config.steps)
    return steps


@functools.partial(jit, static_argnames=("config", "rtol", "atol", "max_steps", "batch_per_run"))
def _finite_solve(
    params0, weight_decay, batch, ts, *, config, rtol, atol, max_steps, batch_per_run
):
    from weakspots.idealized.loss import objective
    from weakspots.sims.train import DTYPE, Hyper, init

    hyper = jax.tree_util.tree_map(lambda x: x[0], Hyper.stack([config]))
    static = eqx.partition(init(config, hyper).model, eqx.is_inexact_array)[1]

    def loss_fn(params, args):
        data, wd = args
        return objective(eqx.combine(params, static), data, config.loss, wd)

    def one(params, wd, batch):
        sol = gradient_flow(
            loss_fn,
            params,
            (batch, wd),
            ts,
            rtol=rtol,
            atol=atol,
            max_steps=max_steps,
            throw=False,
        )
        failed = sol.result._value != diffrax.RESULTS.successful._value
        ys = jax.tree_util.tree_map(lambda x: jnp.where(failed, jnp.nan, x), sol.ys)
        models = eqx.combine(ys, static)
        losses = jax.vmap(loss_fn, in_axes=(0, None))(ys, (batch, wd))
        weights = jax.vmap(lambda m: m.pooling_weights())(models)
        gains = jax.vmap(lambda m: m.gain)(models)
        as_trainer = jax.tree_util.tree_map(
            lambda x: x.astype(DTYPE) if eqx.is_inexact_array(x) else x, models
        )
        return weights, gains, losses, as_trainer

    return jax.vmap(one, in_axes=(0, 0, 0 if batch_per_run else None))(params0, weight_decay, batch)


def finite_flow(
    configs,
    *,
    ts=None,
    samples=32768,
    sample_seed=0,
    rtol=1e-6,
    atol=1e-8,
    max_steps=100_000,
    accuracy=True,
):
    """Gradient flow of the full finite-d model on a fixed sample (issue 3 (b)), vmapped over runs.

    configs: one TrainConfig or a list sharing `config.static` up to `dim` (seeds, gains,
    init scales, weight decays and, on the inner-product path, d vary: one compilation;
    each d gets its own sample). The flow is d params/dt = -grad objective
    (idealized.loss.objective, the trainer's loss, float64) on a fixed phase-stratified
    sample of `samples` needles drawn from `sample_seed` (finite_d_sample), from the
    trainer's own initial model for each config's seed (sims.train.init), so with
    t = lr * steps small-learning-rate SGD and this flow start at the same point and
    follow the same expected loss (up to the sample). ts: save times (T,); default the
    trainer's evaluation times lr * (0, eval_every, ..., steps) of the first config.
    Returns sims.train.History (leading run axis for a list): times, steps (round(t/lr)),
    pooling_weights (T, H, s), gain (T, H), loss (T,) the objective on the flow's own
    sample, phase_accuracy (T, s) on the trainer's held-out set (nan when accuracy=False).
    A failed solve (e.g. max_steps reached) comes back as nan.
    """
    from weakspots.idealized.config import TrainConfig
    from weakspots.sims.train import History, Hyper, evaluate, held_out_gram, init

    single = not isinstance(configs, list | tuple)
    configs = [configs] if single else list(configs)
    static = configs[0].static
    if any(c.static.replace(dim=static.dim) != static for c in configs):
        raise ValueError("finite_flow: configs must share TrainConfig.static up to dim")
    dims = sorted({c.dim for c in configs})
    if len(dims) > 1 and not static.model.uses_gram:
        raise ValueError("finite_flow: several dims in one call need the inner-product path")
    # On the inner-product path the model does not depend on d, only the sample does.
    solve_config = static.replace(dim=TrainConfig().dim) if static.model.uses_gram else static
    if ts is None:
        ts = configs[0].lr * _trainer_times(configs[0]).astype(np.float64)
    ts = jnp.asarray(np.asarray(ts, dtype=np.float64))
    hyper = Hyper.stack(configs)
    models0 = jax.vmap(functools.partial(init, static))(hyper).model
    params0 = jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float64), eqx.filter(models0, eqx.is_inexact_array)
    )
    by_dim = {d: finite_d_sample(static.replace(dim=d), samples, sample_seed) for d in dims}
    batch_per_run = len(dims) > 1
    if batch_per_run:
        batch = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *(by_dim[c.dim] for c in configs))
    else:
        batch = by_dim[dims[0]]
    weight_decay = jnp.asarray([c.weight_decay for c in configs], jnp.float64)
    weights, gains, losses, models = _finite_solve(
        params0,
        weight_decay,
        batch,
        ts,
        config=solve_config,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        batch_per_run=batch_per_run,
    )
    runs, saves = losses.shape
    acc = np.full((runs, saves, static.stride), np.nan)
    for dim in dims if accuracy and static.model.uses_gram else ():
        members = [i for i, c in enumerate(configs) if c.dim == dim]
        held_config = static.replace(dim=dim)
        held_out = held_out_gram(held_config)
        flat = jax.tree_util.tree_map(
            lambda x: (
                x[np.asarray(members)].reshape((-1, *x.shape[2:]))  # noqa: B023
                if eqx.is_array(x)
                else x
            ),
            models,
        )
        measured = jax.lax.map(lambda m: evaluate(held_config, m, held_out)[0], flat)  # noqa: B023
        acc[members] = np.asarray(measured, np.float64).reshape(len(members), saves, -1)
    lrs = np.asarray([c.lr for c in configs])[:, None]
    times = np.broadcast_to(np.asarray(ts), (runs, saves))
    history = History(
        times=times,
        steps=np.round(times / lrs).astype(np.int64),
        pooling_weights=np.asarray(weights, np.float64),
        gain=np.asarray(gains, np.float64),
        loss=np.asarray(losses, np.float64),
        phase_accuracy=acc,
    )
    return jax.tree_util.tree_map(lambda x: x[0], history) if single else history

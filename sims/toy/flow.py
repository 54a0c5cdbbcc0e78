"""Gradient flows integrated with diffrax (Tsit5 + PID controller, float64).

* The reduced flow of docs/theory.md §5, `da/dt = -grad L(a, beta)` on the pooling logits `a`
  `(H, s)` (and the gain `beta` with `learn_gain`): `solve_many(configs)` and `solve(config)`,
  configured by `idealized.toy.config.FlowConfig`, returning `FlowResult`s, as
  `sims.toy.train.train_many` and `train` do for SGD. `L` is `theory.reduced_loss` (d = infinity)
  or, with `dim` set, the finite-d expected loss `theory.finite_d_loss`.
* The finite-d flow of the trainer's own objective on a fixed sample: `finite_flow`.
* Both integrate the generic `gradient_flow(loss_fn, y0, args, ts)`.

The reduced flow's state is `FlowState(pooling_logits (H, s), gain_param (H,))`;
`gain_param` is log(gain) under the "log" parametrisation (gain stays positive;
d log beta/dt = -beta dL/dbeta) and the gain itself under "linear" (dbeta/dt = -dL/dbeta,
the SGD-on-beta convention). A fixed gain is the same flow with the gain's gradient
stopped, so fixed and learned gains share one compilation.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float

from weakspots.idealized import footprint
from weakspots.idealized.mechanisms import model_module as _kind_module
from weakspots.idealized.metrics import support_size
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import FlowConfig, TrainConfig
from weakspots.idealized.toy.loss import objective
from weakspots.idealized.toy.model import initial_pooling_logits
from weakspots.idealized.toy.task import sample_batch
from weakspots.idealized.xla import jit
from weakspots.sims.toy.train import (
    DTYPE,
    History,
    Hyper,
    _to_host,
    evaluate,
    held_out_gram,
    init,
    replicate,
    shard_runs,
)
from weakspots.theory.finite_d import finite_d_loss
from weakspots.theory.footprint import footprint_loss
from weakspots.theory.reduced import reduced_loss, specialization_order
from weakspots.theory.topk_selection import reduced_selection_loss

__all__ = [
    "FlowArgs",
    "FlowFailed",
    "first_failure",
    "FlowHistory",
    "FlowResult",
    "FlowState",
    "finite_flow",
    "gradient_flow",
    "reduced_objective",
    "solve",
    "solve_many",
    "stack",
]


class FlowFailed(RuntimeError):
    """A flow's solve failed (e.g. `max_steps` reached) or left a non-finite value.

    The message names the run (its index in the call and its config) and the reason.
    """


class FlowState(eqx.Module):
    """The reduced flow's state: pooling logits (H, s) and gain parameters (H,)."""

    pooling_logits: Float[Array, "heads stride"]
    gain_param: Float[Array, " heads"]


class FlowArgs(eqx.Module):
    """A flow's hyperparameters, as arrays (one compilation serves every value)."""

    chunks: Float[Array, ""]
    learn_gain: Float[Array, ""]
    weight_decay: Float[Array, ""]
    phase_entropy: Float[Array, ""]
    phase_scale: Float[Array, " stride"]
    dim: Float[Array, ""] | None = None
    """None: the d = inf loss L_inf; else the key dimension d of the finite-d loss L_d."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FlowHistory:
    """A flow's trajectory (a leading run axis on every field when stacked).

    times (T,); pooling_weights (T, H, s) = softmax of the logits; gain (T, H);
    loss (T,) the flow's objective (data loss + penalties) at the saved times;
    specialization_time () the first time `theory.specialization_order` reaches the
    config's `event_level` (inf if not before t1), as in `theory.specialization_time`.
    """

    times: Float[Array, " T"]
    pooling_weights: Float[Array, "T heads stride"]
    gain: Float[Array, "T heads"]
    loss: Float[Array, " T"]
    specialization_time: Float[Array, ""]


@dataclasses.dataclass(frozen=True)
class FlowResult:
    """One solved flow: its config, its history (numpy), and seconds of solving per run.

    `failure` is None, or (with `solve_many(..., throw=False)`) why the solve failed; the
    history of a failed run is then all nan.
    """

    config: FlowConfig
    history: FlowHistory
    wall_seconds: float
    failure: str | None = None

    def summary(self) -> dict:
        """The flow as plain Python values (the `--json` keys of `weakspots flow`).

        times (T,), pooling_weights (T, H, s), gain (T, H), loss (T,), support_size (H,)
        at t1, specialization_time (None if not reached by t1).
        """
        hist = self.history
        weights = np.asarray(hist.pooling_weights, float)
        t_star = float(hist.specialization_time)
        return {
            "times": np.asarray(hist.times, float).tolist(),
            "pooling_weights": weights.tolist(),
            "gain": np.asarray(hist.gain, float).tolist(),
            "loss": np.asarray(hist.loss, float).tolist(),
            "support_size": support_size(weights[-1]).tolist(),
            "specialization_time": t_star if math.isfinite(t_star) else None,
        }


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
            args.phase_entropy,
        )
    return reduced_loss(
        state.pooling_logits,
        gain,
        args.chunks,
        loss,
        args.weight_decay,
        args.phase_scale,
        args.phase_entropy,
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


# ----------------------------------------------------------------------------- (a) reduced flow

# Failure codes of the batched solve: diffrax's RESULTS values, and one of ours.
_SUCCESS = int(diffrax.RESULTS.successful._value)


def first_failure(codes) -> int | None:
    """The index of the first run whose diffrax result code (`sol.result._value`, one per
    run) is not success, or None when every run succeeded."""
    bad = np.flatnonzero(np.asarray(codes) != _SUCCESS)
    return int(bad[0]) if bad.size else None


_EVENT = int(diffrax.RESULTS.event_occurred._value)
_MAX_STEPS = int(diffrax.RESULTS.max_steps_reached._value)
_NON_FINITE = -1


def _crossing_event():
    """diffrax.Event at specialization_order(pooling_logits) rising through level, when enabled.

    Reads (level, enabled) from args[1:3] (`_solve_batch`'s passes).
    """

    def cond_fn(t, y, args, **kwargs):
        del t, kwargs
        _, level, enabled = args
        return jnp.where(enabled, specialization_order(y.pooling_logits) - level, -1.0)

    return diffrax.Event(cond_fn, root_finder=optx.Newton(rtol=1e-10, atol=1e-10), direction=True)


def _mechanism_objective(mechanism):
    """The d = inf objective of a model kind's flow config, gain fixed: theory.footprint_loss
    (flat carry; docs/theory.md §9.4) or theory.topk_reduced_loss (rows main and indexer; §9.5.1)."""
    s = mechanism.stride

    def objective(state: FlowState, args: FlowArgs):
        logits = state.pooling_logits
        gain = jax.lax.stop_gradient(
            gain_from_param(state.gain_param, mechanism.gain_parametrisation)
        )
        if footprint.is_footprint(mechanism):
            carry, g, g_d = np.ones(mechanism.window), mechanism.carry_gain, mechanism.decoy_gain
            return footprint_loss(logits[0], s, args.chunks, carry, g * s, g_d * s)
        return reduced_selection_loss(logits[0], logits[1], gain[0], args.chunks, mechanism.topk)

    return objective


@functools.partial(jit, static_argnames=("loss", "gain_parametrisation", "max_steps", "mechanism"))
def _solve_batch(
    y0, args, ts, event_level, rtol, atol, *, loss, gain_parametrisation, max_steps, mechanism=None
):
    """Reduced flows with a leading run axis on every input but ts: (T,) shared, or (B, T).

    Two passes of one compiled solve (`lax.scan`), both from y0 at ts[0]: the first saves
    the trajectory at ts (the event off); the second stops at the first time
    `specialization_order` rises through `event_level` (diffrax's event, its time found by
    the root-finder on the dense output), so a crossing is found wherever it falls between
    saves. A run already at the level at ts[0] has specialisation time ts[0]; one that does
    not reach it by ts[-1], inf. Returns (FlowHistory with a leading run axis, failure
    codes (B,): `_SUCCESS`, a diffrax RESULTS value of either pass, or `_NON_FINITE`).
    """
    loss_fn = functools.partial(
        reduced_objective, loss=loss, gain_parametrisation=gain_parametrisation
    )
    if mechanism is not None:  # a model kind's flow (idealized.footprint): its own loss
        loss_fn = _mechanism_objective(mechanism)

    def pass_loss(y, pass_args):
        return loss_fn(y, pass_args[0])

    def one(y0, args, ts, level, rtol, atol):
        def solve_pass(carry, enabled):
            sol = gradient_flow(
                pass_loss,
                y0,
                (args, level, enabled),
                ts,
                rtol=rtol,
                atol=atol,
                max_steps=max_steps,
                event=_crossing_event(),
                saveat=diffrax.SaveAt(ts=ts, t1=True),
                throw=False,
            )
            ys = jax.tree_util.tree_map(lambda x: x[:-1], sol.ys)
            # The solve's last time (the event's, or ts[-1]) is its last finite saved time:
            # an event ends the saves early, the rest are inf.
            end = jnp.max(jnp.where(jnp.isfinite(sol.ts), sol.ts, -jnp.inf))
            return carry, (ys, sol.result._value, jnp.asarray(sol.event_mask), end)

        started = specialization_order(y0.pooling_logits) >= level
        passes = jnp.stack([jnp.zeros((), bool), ~started])
        _, (ys, codes, hits, ends) = jax.lax.scan(solve_pass, None, passes)
        ys = jax.tree_util.tree_map(lambda x: x[0], ys)
        losses = jax.vmap(loss_fn, in_axes=(0, None))(ys, args)
        t_star = jnp.where(started, ts[0], jnp.where(hits[1], ends[1], jnp.inf))
        finite = (
            jnp.all(jnp.isfinite(ys.pooling_logits))
            & jnp.all(jnp.isfinite(ys.gain_param))
            & jnp.all(jnp.isfinite(losses))
        )
        event_failed = (codes[1] != _SUCCESS) & (codes[1] != _EVENT)
        code = jnp.where(
            codes[0] != _SUCCESS,
            codes[0],
            jnp.where(event_failed, codes[1], jnp.where(finite, _SUCCESS, _NON_FINITE)),
        )
        history = FlowHistory(
            times=ts,
            pooling_weights=jax.nn.softmax(ys.pooling_logits, axis=-1),
            gain=gain_from_param(ys.gain_param, gain_parametrisation),
            loss=losses,
            specialization_time=t_star,
        )
        return history, code

    ts_axis = 0 if ts.ndim == 2 else None  # shared save times keep the solve's loop unbatched
    return jax.vmap(one, in_axes=(0, 0, ts_axis, 0, 0, 0))(y0, args, ts, event_level, rtol, atol)


@functools.partial(jit, static_argnames=("heads", "stride"))
def _seed_starts(seeds, init_scales, *, heads, stride):
    """The trainer's initial pooling logits for each seed, `(B, H, s)` in float64."""
    draw = jax.vmap(lambda seed, scale: initial_pooling_logits(seed, heads, stride, scale))
    return draw(seeds, init_scales).astype(jnp.float64)


def _padded_size(count: int, batch_size: int | None) -> int:
    """Runs per compiled solve: `batch_size`, or the next power of two (so calls share programs)."""
    if batch_size is not None:
        if batch_size < count:
            raise ValueError(f"batch_size {batch_size} is smaller than the group ({count} runs)")
        return batch_size
    return 1 << (count - 1).bit_length()


def _pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    """Repeat the last row up to `rows` (padding runs are real runs, then discarded)."""
    return np.concatenate([x, np.repeat(x[-1:], rows - x.shape[0], axis=0)]) if rows > len(x) else x


def _each_run(value, runs: int, name: str) -> list[np.ndarray] | None:
    """`value` as one float64 array per run: shared (its elements are numbers) or per run."""
    if value is None:
        return None
    if np.ndim(value) >= 1 and len(value) and np.ndim(value[0]) == 0:
        return [np.asarray(value, np.float64)] * runs
    rows = [np.asarray(v, np.float64) for v in value]
    if len(rows) != runs:
        raise ValueError(f"{name}: expected one entry per config ({runs}), got {len(rows)}")
    return rows


def _save_times(configs: Sequence[FlowConfig], times) -> list[np.ndarray]:
    """Each run's save times: `linspace(0, t1, saves)`, or the given ones (checked)."""
    if times is None:
        grids = {(c.t1, c.saves): np.linspace(0.0, c.t1, c.saves) for c in configs}
        return [grids[c.t1, c.saves] for c in configs]
    for i, (c, ts) in enumerate(zip(configs, times, strict=True)):
        if ts.ndim != 1 or not (np.all(np.isfinite(ts)) and np.all(np.diff(ts) > 0)):
            raise ValueError(f"times of run {i}: must be finite and strictly increasing (T,)")
        if len(ts) != c.saves or ts[-1] != c.t1:
            raise ValueError(
                f"times of run {i}: must end at its t1 ({c.t1:g}) and number its saves "
                f"({c.saves}); got {len(ts)} times ending at {ts[-1]:g}"
            )
    return list(times)


def _describe(index: int, config: FlowConfig) -> str:
    """`run i (field=value ...)`: the fields that differ from the defaults."""
    changed = [
        f"{f.name}={_shown(getattr(config, f.name))}"
        for f in dataclasses.fields(FlowConfig)
        if getattr(config, f.name) != f.default
    ]
    return f"run {index} ({' '.join(changed) or 'the default config'})"


def _shown(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _failure_reason(code: int, config: FlowConfig) -> str:
    if code == _MAX_STEPS:
        return (
            f"the solver reached --max-steps {config.max_steps} before t1 = {config.t1:g} "
            "(raise --max-steps or lower --t1)"
        )
    if code == _NON_FINITE:
        return "the solution became non-finite (lower --gain or --t1)"
    return f"the solver failed (diffrax result code {code})"


def _group_inputs(configs: Sequence[FlowConfig], starts, times, phase_scale):
    """The batched solve's per-run inputs for configs sharing `FlowConfig.static`."""
    c0 = configs[0]
    heads, stride = c0.heads, c0.stride

    def per_run(name):
        return np.asarray([float(getattr(c, name)) for c in configs], np.float64)

    if starts is None:
        seeds = np.asarray([c.seed for c in configs], np.uint32)
        logits0 = np.asarray(
            _seed_starts(
                seeds, per_run("init_scale").astype(np.float32), heads=heads, stride=stride
            )
        )
    else:
        logits0 = np.stack(starts)
        if logits0.shape != (len(configs), heads, stride):
            raise ValueError(f"starts: each must be (heads, stride) = {(heads, stride)}")
    gains = np.broadcast_to(per_run("gain")[:, None], (len(configs), heads))
    y0 = FlowState(logits0, np.asarray(gain_to_param(gains, c0.gain_parametrisation)))
    scale = np.ones((len(configs), stride)) if phase_scale is None else np.stack(phase_scale)
    if scale.shape != (len(configs), stride):
        raise ValueError(f"phase_scale: each must be (stride,) = ({stride},)")
    args = FlowArgs(
        chunks=per_run("chunks"),
        learn_gain=per_run("learn_gain"),
        weight_decay=per_run("weight_decay"),
        phase_entropy=per_run("phase_entropy"),
        phase_scale=scale,
        dim=None if c0.dim is None else per_run("dim"),
    )
    grids, picks = _save_grids(_save_times(configs, times))
    ts = grids[0] if all(np.array_equal(g, grids[0]) for g in grids) else np.stack(grids)
    return (y0, args, ts, per_run("event_level"), per_run("rtol"), per_run("atol")), picks


def _save_grids(saves: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each run's save times padded to one count, a power of two (so calls share programs).

    Padding halves the widest gaps: the extra saves are read off the solver's dense output
    at no cost to its steps (repeating the last time instead slows the solve). Returns the
    padded grids and, per run, the indices of its own times in its grid.
    """
    width = 1 << (max(len(ts) for ts in saves) - 1).bit_length()
    padded: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    grids, picks = [], []
    for ts in saves:
        if ts.tobytes() not in padded:
            grid = ts
            while len(grid) < width:
                i = int(np.argmax(np.diff(grid)))
                grid = np.insert(grid, i + 1, 0.5 * (grid[i] + grid[i + 1]))
            padded[ts.tobytes()] = grid, np.searchsorted(grid, ts)
        grids.append(padded[ts.tobytes()][0])
        picks.append(padded[ts.tobytes()][1])
    return grids, picks


def _solve_group(configs: Sequence[FlowConfig], per_run, mesh, rows: int):
    """One compiled solve of configs sharing `FlowConfig.static`, padded to `rows` runs.

    per_run: (starts, times, phase_scale), each None or one array per config. Returns the
    numpy history `(runs, T, ...)` (T the padded save count), failure codes `(runs,)`, and
    per run the indices of its own save times among the T.
    """

    static = configs[0].static
    (y0, args, ts, *rest), picks = _group_inputs(configs, *per_run)
    runs = (y0, args, *rest)
    runs = jax.tree_util.tree_map(lambda x: _pad_rows(np.asarray(x), rows), runs)
    ts = _pad_rows(ts, rows) if ts.ndim == 2 else ts
    if mesh is not None:
        runs = shard_runs(runs, mesh)
        ts = shard_runs(ts, mesh) if ts.ndim == 2 else replicate(ts, mesh)
    y0, args, *rest = runs
    history, codes = _solve_batch(
        y0,
        args,
        ts,
        *rest,
        loss=static.loss,
        gain_parametrisation=static.gain_parametrisation,
        max_steps=static.max_steps,
        mechanism=None if _kind_module(static) is None else static,
    )
    count = len(configs)
    history = jax.tree_util.tree_map(lambda x: _to_host(x)[:count], history)
    return history, _to_host(codes)[:count], picks


def solve_many(
    configs: Sequence[FlowConfig],
    *,
    starts=None,
    times=None,
    phase_scale=None,
    throw: bool = True,
    mesh: jax.sharding.Mesh | None = None,
    batch_size: int | None = None,
) -> list[FlowResult]:
    """Solve every config's reduced flow; one compiled program per distinct `config.static`.

    Configs sharing `FlowConfig.static` are solved together, vmapped, in one call padded to
    `batch_size` runs (default: the next power of two, so later calls reuse the program);
    a run's numbers do not depend on the runs solved with it (up to float rounding).

    Arguments:
        configs: the flows.
        starts: optional initial pooling logits, one `(H, s)` per config (an array
            `(runs, H, s)` or a list), in place of the trainer's draw from each config's
            `seed` and `init_scale`.
        times: optional save times, strictly increasing: `(T,)` for every run, or one `(T,)`
            per config; in place of `linspace(0, t1, saves)`. The flow starts at the first;
            each run's last time must be its `t1` and its count its `saves`.
        phase_scale: optional needle-logit factor per phase, `(s,)` for every run or one per
            config (RoPE anchoring, `theory.rope`); default ones.
        throw: raise `FlowFailed` if any run's solve failed (max_steps reached, non-finite
            values); with False, such a run comes back with `failure` set and nan history.
        mesh: optional 1-D device mesh; the run axis is split over it (`sims.toy.train.shard_runs`).
        batch_size: runs per compiled solve (at least the largest group).

    Returns one `FlowResult` per config, in order.
    """
    configs = list(configs)
    if not all(isinstance(c, FlowConfig) for c in configs):
        raise TypeError("solve_many: configs must be FlowConfigs")
    per_run = [
        None if starts is None else [np.asarray(x, np.float64) for x in starts],
        _each_run(times, len(configs), "times"),
        _each_run(phase_scale, len(configs), "phase_scale"),
    ]
    if per_run[0] is not None and len(per_run[0]) != len(configs):
        raise ValueError(f"starts: expected one per config ({len(configs)}), got {len(per_run[0])}")
    groups: dict[FlowConfig, list[int]] = {}
    for i, config in enumerate(configs):
        groups.setdefault(config.static, []).append(i)
    results: list[FlowResult | None] = [None] * len(configs)
    for members in groups.values():
        start = time.perf_counter()
        group = [configs[i] for i in members]
        history, codes, picks = _solve_group(
            group,
            [None if x is None else [x[i] for i in members] for x in per_run],
            mesh,
            _padded_size(len(members), batch_size),
        )
        wall = (time.perf_counter() - start) / len(members)
        for r, i in enumerate(members):
            own = picks[r]
            one = FlowHistory(
                times=history.times[r, own],
                pooling_weights=history.pooling_weights[r, own],
                gain=history.gain[r, own],
                loss=history.loss[r, own],
                specialization_time=history.specialization_time[r],
            )
            failure = None
            if int(codes[r]) != _SUCCESS:
                failure = _failure_reason(int(codes[r]), configs[i])
                one = jax.tree_util.tree_map(lambda x: np.full_like(x, np.nan), one)
            results[i] = FlowResult(configs[i], one, wall, failure)
    failed = [(i, r) for i, r in enumerate(results) if r.failure is not None]
    if throw and failed:
        i, result = failed[0]
        more = f" ({len(failed) - 1} more runs failed)" if len(failed) > 1 else ""
        raise FlowFailed(f"flow failed: {_describe(i, result.config)}: {result.failure}{more}")
    return results


def solve(config: FlowConfig, **kwargs) -> FlowResult:
    """Solve one flow: `solve_many([config], ...)`, with `starts` one `(H, s)` array."""
    if kwargs.get("starts") is not None:
        kwargs["starts"] = [kwargs["starts"]]
    return solve_many([config], **kwargs)[0]


def stack(results: Sequence[FlowResult]) -> FlowHistory:
    """The histories of `results` stacked on a leading run axis (they must share `saves`)."""
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *(r.history for r in results))


# ----------------------------------------------------------------------------- (b) finite-d flow


def finite_d_sample(config, samples, seed=0, dtype=jnp.float64):
    """A fixed sample of `samples` needles for `config.model`, stratified over phases.

    `samples // s` needles at each phase (exact balance: no phase is favoured by the draw),
    inner products only (`sample_batch(..., keys=False)`, exact in distribution). Returns a Batch.
    """

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
    """Gradient flow of the full finite-d model on a fixed sample, vmapped over runs.

    configs: one TrainConfig or a list sharing `config.static` up to `dim` (seeds, gains,
    init scales, weight decays and, on the inner-product path, d vary: one compilation;
    each d gets its own sample). The flow is d params/dt = -grad objective
    (idealized.toy.loss.objective, the trainer's loss, float64) on a fixed phase-stratified
    sample of `samples` needles drawn from `sample_seed` (finite_d_sample), from the
    trainer's own initial model for each config's seed (sims.toy.train.init), so with
    t = lr * steps small-learning-rate SGD and this flow start at the same point and
    follow the same expected loss (up to the sample). ts: save times (T,); default the
    trainer's evaluation times lr * (0, eval_every, ..., steps) of the first config.
    Returns sims.toy.train.History (leading run axis for a list): times, steps (round(t/lr)),
    pooling_weights (T, H, s), gain (T, H), loss (T,) the objective on the flow's own
    sample, phase_accuracy (T, s) on the trainer's held-out set (nan when accuracy=False).
    A failed solve (e.g. max_steps reached) comes back as nan.
    """

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


float64_module(__name__)  # 64-bit types inside these functions only

"""Performance, as ratios measured in one run: the project against a naive baseline and the machine.

Five comparisons, each timed with its baseline in the same process, repeats interleaved
(one of each per round, so that load from other jobs falls on both); a ratio is the
median over rounds of the ratio within a round (`paired_ratio`):

* `speedup_vs_naive_loop`: model-steps per second of `sims.toy.train.run_batch` on a batch of
  canonical runs (`s=8, N=64, d=64, H=1`, batch 256, evaluation included) over the naive
  trainer a user writes first (`benchmarks/naive_trainer.py`: one model, a jitted step
  called from a Python loop, real keys drawn every step).
* `fraction_of_rng_limit`: the trainer's model-steps per second over the rate at which the
  same generator, for the same batch of runs, only draws the random numbers one exact step
  needs (`benchmarks/rng_limit.py`): the share of the machine's limit that is reached.
  Beside it, `details.fraction_of_rng_limit_evaluating_at_ends`: the same runs evaluated only
  at their start and end (the held-out evaluations every `eval_every` steps are work the
  limit does not do).
* `flow_speedup_vs_scipy`: reduced-flow trajectories (docs/theory.md §5) for a batch of starts and
  gains, `sims.toy.flow.gradient_flow` on `sims.toy.flow.reduced_objective` vmapped and compiled,
  over `scipy.integrate.solve_ivp` (LSODA, `benchmarks/scipy_flow.py`) one problem at a time,
  at the same tolerances and save times, checked to agree.
* `reduced_flow_api_speedup_vs_scipy`: the same flows through the public API,
  `sims.toy.flow.solve_many` (`FlowConfig`s in, results with the specialisation time out),
  over the same LSODA baseline; its trajectories are checked against the raw solve's.
* `sharding_speedup`: the same training batch split over 2 forced host devices against 1
  (a subprocess: the device count is fixed when jax starts).
* `operator_step_speedup` (full run only): per real-key operator (`max_pool`, `low_rank`,
  `deepseek_v4`), the canonical training step with the plain sampler and operator forms
  over the current ones, which give the same numbers (`benchmarks/operator_step.py`).

Absolute rates are reported only off the CPU (`absolute`): on a shared CPU they say more
about the neighbours than about the code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.benchmarks import naive_trainer, operator_step, rng_limit, scipy_flow
from weakspots.benchmarks.timing import (  # re-exported: the benchmarks' one timing
    Timing as Timing,
)
from weakspots.benchmarks.timing import (
    interleaved as interleaved,
)
from weakspots.benchmarks.timing import (
    median_rate as median_rate,
)
from weakspots.benchmarks.timing import (
    paired_ratio as paired_ratio,
)
from weakspots.benchmarks.timing import (
    ratios as ratios,
)
from weakspots.benchmarks.timing import (
    timed as timed,
)
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import FlowConfig, TrainConfig
from weakspots.idealized.xla import jit
from weakspots.sims.toy import flow
from weakspots.sims.toy import train as trainer

CANONICAL = TrainConfig()  # s=8, N=64, d=64, H=1, batch 256, softmax_pool, mse, SGD
TARGETS = {
    "speedup_vs_naive_loop": 100.0,
    "fraction_of_rng_limit": 0.8,
    "flow_speedup_vs_scipy": 50.0,
    "reduced_flow_api_speedup_vs_scipy": 50.0,
}
FLOW_AGREEMENT = 1e-5  # max |pooling weight| difference between diffrax and LSODA at rtol 1e-8
FLOW_T_END, FLOW_SAVES = 1000.0, 101
FLOW_RTOL, FLOW_ATOL = 1e-8, 1e-10


@dataclasses.dataclass(frozen=True)
class BenchSettings:
    """How much work each comparison times: `QUICK` a short pass, `FULL` the measurement."""

    runs: int = 16  # canonical runs trained at once
    steps: int = 600  # training steps per run per timed repeat
    repeats: int = 5  # interleaved rounds
    naive_steps: int = 3  # naive-loop steps per round (each runs uncompiled, so few)
    flow_problems: int = 256  # reduced flows solved in one diffrax batch
    scipy_problems: int = 256  # of those, solved one by one with LSODA
    flow_api: bool = True  # also time the public API, sims.toy.flow.solve_many (with the event)
    sharding: bool = True
    shard_steps: int = 200
    shard_repeats: int = 3
    operator_steps: int = 4  # real-key training steps per timed block (0: skip the comparison)
    operator_repeats: int = 3


FULL = BenchSettings()
QUICK = BenchSettings(
    steps=50,  # one evaluation block: the fixed cost of a batch (its first evaluation) weighs more
    repeats=4,
    naive_steps=1,
    scipy_problems=16,
    shard_steps=50,
    shard_repeats=2,
    operator_steps=0,  # six compilations of the real-key step: left to the full pass
)


def bench_training(settings: BenchSettings, log: Callable[[str], None]) -> dict:
    """The trainer against the naive loop and the RNG limit; compile time and memory."""
    config = CANONICAL.replace(steps=settings.steps)
    hyper = trainer.Hyper.stack([config.replace(seed=seed) for seed in range(settings.runs)])
    train_batch = partial(trainer.run_batch, config, hyper)

    log("trainer: compiling")
    first = timed(train_batch)
    keys = rng_limit.trainer_keys(config, hyper)
    draw = partial(rng_limit.draw_many, config.static, keys, settings.steps)
    log("rng limit: compiling")
    rng_compile = timed(draw)
    step = naive_trainer.make_step()
    # An accelerator runs a naive step in about a millisecond: time enough of them.
    naive_steps = settings.naive_steps * (1 if jax.default_backend() == "cpu" else 100)
    naive = partial(naive_trainer.train, steps=naive_steps, step=step)
    log("naive loop: compiling")
    naive_compile = timed(partial(naive_trainer.train, steps=1, step=step))

    # The same runs evaluated only at their start and end: what the held-out evaluations in
    # between (every `eval_every` steps, which the RNG limit does not do) cost.
    at_ends = partial(trainer.run_batch, config.replace(eval_every=settings.steps), hyper)
    log("trainer, evaluating at the ends only: compiling")
    timed(at_ends)

    log(f"timing: {settings.repeats} interleaved rounds")
    times = interleaved(
        {"trainer": train_batch, "rng_limit": draw, "naive_loop": naive, "at_ends": at_ends},
        settings.repeats,
    )
    work = {
        "trainer": settings.runs * settings.steps,
        "rng_limit": settings.runs * settings.steps,
        "naive_loop": naive_steps,
        "at_ends": settings.runs * settings.steps,
    }
    rates = {
        name: {clock: median_rate(work[name], times[name], clock) for clock in ("wall", "cpu")}
        for name in times
    }
    steady = float(np.median([t.wall for t in times["trainer"]]))
    return {
        "rates": rates,  # model-steps per second; absolute values only mean much off the CPU
        "speedup_vs_naive_loop": ratios(times, work, "trainer", "naive_loop"),
        "fraction_of_rng_limit": ratios(times, work, "trainer", "rng_limit"),
        "fraction_of_rng_limit_evaluating_at_ends": ratios(times, work, "at_ends", "rng_limit"),
        "evaluations": {"trainer": settings.steps // config.eval_every + 1, "at_ends": 2},
        "compile_seconds": max(first.wall - steady, 0.0),
        "rng_limit_compile_seconds": rng_compile.wall,
        "naive_compile_seconds": naive_compile.wall,
        "peak_memory_mb": _program_memory_mb(config, hyper),
    }


def _program_memory_mb(config: TrainConfig, hyper: trainer.Hyper) -> float:
    """XLA's peak for one `eval_every`-step block of the batch: arguments + outputs + temporaries.

    The arguments include the held-out set shared by every run (`held_out_gram`). The
    executable is the one `run_batch` compiled (jax caches it), so this compiles nothing.
    """
    config = config.static
    held_out = trainer.held_out_gram(config) if config.model.uses_gram else None
    states = jax.eval_shape(lambda h: jax.vmap(partial(trainer.init, config))(h), hyper)
    go = jax.numpy.asarray(True)
    stats = trainer._advance_many.lower(config, states, hyper, held_out, go).compile()
    stats = stats.memory_analysis()
    if stats is None:
        return float("nan")
    total = (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        + stats.temp_size_in_bytes
        - stats.alias_size_in_bytes
    )
    return total / 2**20


@partial(jit, static_argnames=("stride",))
def diffrax_trajectories(pooling_logits0, gains, chunks, ts, *, stride):
    """Reduced-flow trajectories, vmapped: pooling weights `(P, T, H, s)` at `ts`.

    The flow `sims.toy.flow.solve_many` integrates (`gradient_flow` on `reduced_objective`,
    fixed gain, log parametrisation), without its second, event-located solve: the same
    work as the LSODA baseline.
    """
    del stride  # the shape carries it; named so the cache key says what was compiled

    def one(logits0, gain):
        state = flow.FlowState(logits0, jnp.log(jnp.broadcast_to(gain, logits0.shape[:1])))
        args = flow.FlowArgs(
            chunks=jnp.asarray(chunks, jnp.float64),
            learn_gain=jnp.zeros((), jnp.float64),
            weight_decay=jnp.zeros((), jnp.float64),
            phase_entropy=jnp.zeros((), jnp.float64),
            phase_scale=jnp.ones(logits0.shape[-1:], jnp.float64),
        )
        sol = flow.gradient_flow(
            flow.reduced_objective, state, args, ts, rtol=FLOW_RTOL, atol=FLOW_ATOL
        )
        return jax.nn.softmax(sol.ys.pooling_logits, axis=-1)

    return jax.vmap(one)(pooling_logits0, gains)


def bench_flow(settings: BenchSettings, log: Callable[[str], None]) -> dict:
    """Batched diffrax reduced flows against LSODA one by one, on the same problems.

    The raw batched solve (`diffrax_trajectories`) and, with `settings.flow_api`, the public
    API (`sims.toy.flow.solve_many`: configs in, results with the specialisation time out) are
    timed between the LSODA slices, so all three see the same load.
    """
    chunks = float(CANONICAL.chunks)
    logits0, gains = scipy_flow.problems(settings.flow_problems, stride=CANONICAL.stride)
    ts = np.linspace(0.0, FLOW_T_END, FLOW_SAVES)
    batch = partial(
        diffrax_trajectories,
        jnp.asarray(logits0),
        jnp.asarray(gains),
        chunks,
        jnp.asarray(ts),
        stride=CANONICAL.stride,
    )
    log("flow: compiling")
    first = timed(batch)
    weights = np.asarray(batch())
    calls = {"diffrax": batch}
    if settings.flow_api:
        api = partial(_solve_with_api, logits0, gains)
        log("flow: compiling sims.toy.flow.solve_many")
        api_first = timed(api)
        api_weights = flow.stack(api()).pooling_weights
        calls["api"] = api

    # LSODA in `repeats` slices, a diffrax batch between slices: both see the same load.
    count = min(settings.scipy_problems, settings.flow_problems)
    slices = np.array_split(np.arange(count), max(1, min(settings.repeats, count)))
    times = {name: [] for name in calls}
    scipy_times, scipy_weights = [], []
    log(f"flow: {count} LSODA solves against diffrax batches of {settings.flow_problems}")
    for part in slices:
        for name, call in calls.items():
            times[name].append(timed(call))
        holder = {}

        def lsoda(part=part, holder=holder):
            tol = {"rtol": FLOW_RTOL, "atol": FLOW_ATOL}
            holder["w"] = scipy_flow.solve_all(logits0[part], gains[part], chunks, ts, **tol)

        scipy_times.append(timed(lsoda))
        scipy_weights.append(holder["w"])
    for name, call in calls.items():
        times[name].append(timed(call))
    scipy_weights = np.concatenate(scipy_weights)
    disagreement = float(np.max(np.abs(scipy_weights - weights[:count])))
    rates = {
        clock: {
            **{name: median_rate(settings.flow_problems, t, clock) for name, t in times.items()},
            "scipy": count / sum(getattr(t, clock) for t in scipy_times),
        }
        for clock in ("wall", "cpu")
    }
    out = {
        "rates": rates,  # solves per second
        "flow_speedup_vs_scipy": {c: rates[c]["diffrax"] / rates[c]["scipy"] for c in rates},
        "flow_compile_seconds": max(
            first.wall - float(np.median([t.wall for t in times["diffrax"]])), 0.0
        ),
        "flow_max_disagreement": disagreement,
        "flow_agree": bool(disagreement <= FLOW_AGREEMENT),
        "flow_problems": settings.flow_problems,
        "scipy_problems": count,
        "reduced_flow_api_speedup_vs_scipy": {c: None for c in rates},
    }
    if settings.flow_api:
        out.update(
            {
                "reduced_flow_api_speedup_vs_scipy": {
                    c: rates[c]["api"] / rates[c]["scipy"] for c in rates
                },
                "reduced_flow_api_vs_raw": {
                    c: rates[c]["api"] / rates[c]["diffrax"] for c in rates
                },
                "reduced_flow_api_compile_seconds": max(
                    api_first.wall - float(np.median([t.wall for t in times["api"]])), 0.0
                ),
                # the same solve: the API's trajectory is the raw batch's
                "reduced_flow_api_max_disagreement": float(np.max(np.abs(api_weights - weights))),
            }
        )
    return out


def _solve_with_api(logits0: np.ndarray, gains: np.ndarray) -> list:
    """`sims.toy.flow.solve_many` on the bench's problems: one FlowConfig per (start, gain)."""
    configs = [
        FlowConfig(
            stride=CANONICAL.stride,
            chunks=CANONICAL.chunks,
            gain=float(gain),
            t1=FLOW_T_END,
            saves=FLOW_SAVES,
            rtol=FLOW_RTOL,
            atol=FLOW_ATOL,
        )
        for gain in gains
    ]
    return flow.solve_many(configs, starts=logits0)


def bench_sharding(settings: BenchSettings, log: Callable[[str], None]) -> dict:
    """The training batch over 2 forced host devices against 1, in a fresh process."""
    flags = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    env = {**os.environ, "XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu"}
    request = {
        "runs": settings.runs,
        "steps": settings.shard_steps,
        "repeats": settings.shard_repeats,
    }
    log("sharding: 1 vs 2 host devices in a subprocess")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "weakspots.benchmarks.bench",
            "--sharding-worker",
            json.dumps(request),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
        return {"sharding_speedup": None, "sharding_error": tail[0]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def sharding_worker(runs: int, steps: int, repeats: int) -> dict:
    """Run in a process started with 2 host devices: `run_batch` on a 1-D mesh of 2 vs 1 device."""
    devices = jax.devices()
    if len(devices) < 2:
        raise RuntimeError(f"need 2 devices, have {len(devices)}")
    mesh = jax.sharding.Mesh(np.array(devices[:2]), ("runs",))
    config = CANONICAL.replace(steps=steps)
    hyper = trainer.Hyper.stack([config.replace(seed=seed) for seed in range(runs)])
    calls = {
        "one_device": partial(trainer.run_batch, config, hyper),
        "two_devices": partial(trainer.run_batch, config, hyper, mesh=mesh),
    }
    for fn in calls.values():
        fn()  # compile
    times = interleaved(calls, repeats)
    work = {name: runs * steps for name in calls}
    rates = {
        clock: {name: median_rate(runs * steps, t, clock) for name, t in times.items()}
        for clock in ("wall", "cpu")
    }
    return {
        "sharding_speedup": paired_ratio(times, work, "two_devices", "one_device", "wall"),
        # 1 when both do the same CPU work; then the wall speedup is the cores gained.
        "sharding_cpu_ratio": paired_ratio(times, work, "two_devices", "one_device", "cpu"),
        "sharding_cores_used": {
            name: float(np.median([t.cpu / t.wall for t in ts])) for name, ts in times.items()
        },
        "sharding_rates": rates,
    }


def run(settings: BenchSettings, log: Callable[[str], None] = lambda _: None) -> dict:
    """Every comparison, in one process; a JSON-ready dict (see the module docstring)."""
    platform = jax.default_backend()
    start, load_at_start = time.perf_counter(), os.getloadavg()
    training = bench_training(settings, log)
    flows = bench_flow(settings, log)
    sharding = bench_sharding(settings, log) if settings.sharding else {"sharding_speedup": None}
    operators = {}
    if settings.operator_steps:
        operators = operator_step.compare(
            steps=settings.operator_steps, repeats=settings.operator_repeats, log=log
        )
    result = {
        "speedup_vs_naive_loop": training["speedup_vs_naive_loop"]["wall"],
        "fraction_of_rng_limit": training["fraction_of_rng_limit"]["wall"],
        "flow_speedup_vs_scipy": flows["flow_speedup_vs_scipy"]["wall"],
        "reduced_flow_api_speedup_vs_scipy": flows["reduced_flow_api_speedup_vs_scipy"]["wall"],
        "flow_compile_seconds": flows["flow_compile_seconds"],
        "sharding_speedup": sharding["sharding_speedup"],
        "operator_step_speedup": {op: r["speedup"]["wall"] for op, r in operators.items()} or None,
        "peak_memory_mb": training["peak_memory_mb"],
        "compile_seconds": training["compile_seconds"],
        "cpu_time_ratios": {
            "speedup_vs_naive_loop": training["speedup_vs_naive_loop"]["cpu"],
            "fraction_of_rng_limit": training["fraction_of_rng_limit"]["cpu"],
            "flow_speedup_vs_scipy": flows["flow_speedup_vs_scipy"]["cpu"],
            "reduced_flow_api_speedup_vs_scipy": flows["reduced_flow_api_speedup_vs_scipy"]["cpu"],
        },
        "flow_agree": flows["flow_agree"],
        "flow_max_disagreement": flows["flow_max_disagreement"],
        "details": {
            # the trainer's runs evaluated only at start and end: the step's own share of
            # the limit, the evaluations every `eval_every` steps left out
            "fraction_of_rng_limit_evaluating_at_ends": training[
                "fraction_of_rng_limit_evaluating_at_ends"
            ]["wall"],
            "evaluations_per_run": training["evaluations"],
            "rng_limit_compile_seconds": training["rng_limit_compile_seconds"],
            "naive_compile_seconds": training["naive_compile_seconds"],
            "flow_problems": flows["flow_problems"],
            "scipy_problems": flows["scipy_problems"],
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            **{
                k: v["wall"] if isinstance(v, dict) else v
                for k, v in flows.items()
                if k.startswith("reduced_flow_api") and k != "reduced_flow_api_speedup_vs_scipy"
            },
            **{k: v for k, v in sharding.items() if k != "sharding_speedup"},
            "operator_steps": operators,
        },
        "absolute": None,
        "platform": platform,
        "devices": [str(d) for d in jax.devices()],
        "settings": dataclasses.asdict(settings),
        "config": {"stride": 8, "chunks": 64, "dim": 64, "heads": 1, "batch": CANONICAL.batch},
        "bench_seconds": 0.0,
        # 1-minute load at the start and the end: other jobs' claim on the same cores
        "load_average": [load_at_start[0], os.getloadavg()[0]],
    }
    if platform != "cpu":
        result["absolute"] = {
            "trainer_model_steps_per_second": training["rates"]["trainer"]["wall"],
            "rng_limit_model_steps_per_second": training["rates"]["rng_limit"]["wall"],
            "naive_model_steps_per_second": training["rates"]["naive_loop"]["wall"],
            "diffrax_solves_per_second": flows["rates"]["wall"]["diffrax"],
            "device_peak_memory_mb": _device_peak_mb(),
        }
    result["targets"] = {
        name: {
            "value": result[name],
            "target": target,
            "met": result[name] is not None and bool(result[name] >= target),
        }
        for name, target in TARGETS.items()
    }
    result["targets"]["flow_speedup_vs_scipy"]["met"] &= result["flow_agree"]
    api_agree = result["details"].get("reduced_flow_api_max_disagreement", 0.0) <= FLOW_AGREEMENT
    result["targets"]["reduced_flow_api_speedup_vs_scipy"]["met"] &= api_agree
    decoders = _bench_decoders(settings, log)
    result["targets"].update(decoders.pop("targets"))
    result.update(decoders)
    result["bench_seconds"] = time.perf_counter() - start
    return result


def _bench_decoders(settings: BenchSettings, log: Callable[[str], None]) -> dict:
    """The decoder trainer's ratios (`benchmarks/lm_throughput.py`) and one V4 attention
    layer's training step against transformers' (`benchmarks/v4_vs_hf.py`), with targets."""
    from weakspots.benchmarks import lm_throughput

    lm = lm_throughput.run(lm_throughput.QUICK if settings == QUICK else lm_throughput.FULL, log)
    peer = bench_v4_vs_hf(settings, log)
    pretraining = bench_pretrain_step(settings, log)
    return {
        "lm_speedup_vs_loop": lm["lm_speedup_vs_loop"],  # measured, no target
        "lm_flop_utilisation": lm["lm_flop_utilisation"],
        "lm_vs_hf_step_speedup": peer["lm_vs_hf_step_speedup"],
        "pretrain_vs_hf_step_speedup": pretraining["pretrain_vs_hf_step_speedup"],
        "pretrain_flop_utilisation": pretraining["pretrain_flop_utilisation"],
        "lm_details": {k: v for k, v in lm.items() if k != "targets"},
        "lm_vs_hf_details": {k: v for k, v in peer.items() if k != "targets"},
        "pretrain_details": {k: v for k, v in pretraining.items() if k != "targets"},
        "targets": {**lm["targets"], **peer["targets"], **pretraining["targets"]},
    }


def bench_pretrain_step(settings: BenchSettings, log: Callable[[str], None]) -> dict:
    """`benchmarks/pretrain_step.run` (the pretraining backbone's step against HF's Qwen3);
    without torch both ratios are None and `pretrain_vs_hf_skipped` says why."""
    from weakspots.benchmarks import pretrain_step

    reason = pretrain_step.available()
    if reason is not None:
        log(f"pretrain vs hf: skipped ({reason})")
        target = {"value": None, "met": False, "skipped": reason}
        return {
            "pretrain_vs_hf_step_speedup": None,
            "pretrain_flop_utilisation": None,
            "pretrain_vs_hf_skipped": reason,
            "targets": {name: {**target, "target": t} for name, t in pretrain_step.TARGETS.items()},
        }
    return pretrain_step.run(pretrain_step.QUICK if settings == QUICK else pretrain_step.FULL, log)


def bench_v4_vs_hf(settings: BenchSettings, log: Callable[[str], None]) -> dict:
    """`benchmarks/v4_vs_hf.run` at the bench's size; without torch, `lm_vs_hf_step_speedup`
    is None and `lm_vs_hf_skipped` says why (one line)."""
    from weakspots.benchmarks import v4_vs_hf

    reason = v4_vs_hf.available()
    if reason is not None:
        log(f"v4 vs hf: skipped ({reason})")
        target = {"value": None, "met": False, "skipped": reason}
        return {
            "lm_vs_hf_step_speedup": None,
            "lm_vs_hf_skipped": reason,
            "targets": {name: {**target, "target": t} for name, t in v4_vs_hf.TARGETS.items()},
        }
    return v4_vs_hf.run(v4_vs_hf.QUICK if settings == QUICK else v4_vs_hf.FULL, log)


def _device_peak_mb() -> float | None:
    stats = jax.local_devices()[0].memory_stats()
    if not stats or "peak_bytes_in_use" not in stats:
        return None
    return stats["peak_bytes_in_use"] / 2**20


float64_module(__name__)  # 64-bit types inside these functions, as the trainer draws


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--sharding-worker":
        print(json.dumps(sharding_worker(**json.loads(sys.argv[2]))))
    else:
        sys.exit("usage: weakspots bench [--json] [--quick]")

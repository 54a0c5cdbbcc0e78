"""Sweeps: a declared grid of runs, executed in compiled buckets over a device mesh, into a store.

A sweep spec (TOML) names `kind = "train" | "flow" | "lm"` (`lm`: the decoders of
`sims.decoder`, trained on the default device; `induction_train`, `induction_flow`: the
paper's idealised model, `sims.induction`, one run at a time), a `[fixed]` table and a `[grid]` table of
lists whose cartesian product are the runs; keys are the config field names (the
command-line flag names, `-` or `_`). Runs are grouped into buckets that share one
compiled program (`TrainConfig.static` or `FlowConfig.static`), each bucket runs in
equal, memory-sized batches whose run axis is split over a 1-D device mesh
(`sims.toy.train.run_batch(mesh=...)`, `sims.toy.flow.solve_many(mesh=...)`), and
every finished run is written to a `sims.store` at once, so a killed sweep resumes where
it stopped. `--slice i/n` keeps every n-th run (from the i-th, 0-based) for batch
schedulers (`slurm_array_slice` reads it from a Slurm job array); under `jax.distributed`
(`start_distributed`) the mesh spans every process's devices, process 0 writes, and every
wait on another process is bounded (`DistributedError`).

Every run draws its randomness from its own seed, so its numbers do not depend on the
batch it ran in, the slice, or the device count (up to float32 rounding: XLA:CPU may
round a partitioned program differently in the last bit, which chaotic runs amplify).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import math
import os
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from weakspots.errors import ConfigError
from weakspots.idealized import induction
from weakspots.idealized.decoder.config import DESIGNS, LMConfig, with_design
from weakspots.idealized.metrics import phase_report, specialization_index, support_size
from weakspots.idealized.precision import float64_module
from weakspots.idealized.toy.config import FlowConfig, TrainConfig
from weakspots.sims import store
from weakspots.sims.decoder import sweep as lm_sweep
from weakspots.sims.induction import sweep as induction_sweep
from weakspots.sims.progress import Progress
from weakspots.sims.toy import flow as flow_lib
from weakspots.sims.toy.train import Hyper, check_memory, failure, run_batch
from weakspots.theory.reduced import mean_needle_probability

__all__ = [
    "DistributedError",
    "Run",
    "SpecError",
    "SweepSpec",
    "load_spec",
    "parse_spec",
    "run_mesh",
    "run_sweep",
    "select_slice",
    "slurm_array_slice",
    "start_distributed",
]

KINDS = ("train", "flow", "lm", "induction_train", "induction_flow")
MESH_AXIS = "runs"
MEMORY_FRACTION = 0.5  # of a device's free memory one batch may take (`device_memory_bytes`)
MAX_RUNS_PER_DEVICE = 1024
# A CPU device's vector units are full long before this; smaller batches commit runs sooner.
CPU_MAX_RUNS_PER_DEVICE = 64


class SpecError(ValueError):
    """A malformed sweep spec; the message names the offending key."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


CONFIGS: dict[str, type] = {
    "train": TrainConfig,
    "flow": FlowConfig,
    "lm": LMConfig,
    "induction_train": induction.InductionTrainConfig,  # the paper's idealised model
    "induction_flow": induction.InductionFlowConfig,
}


@dataclass(frozen=True)
class Run:
    """One run of a sweep: its kind and config; `row` is what the store keys it by."""

    kind: str
    config: TrainConfig | FlowConfig | LMConfig

    @property
    def row(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self.config), "kind": self.kind}

    @property
    def hash(self) -> str:
        return store.config_hash(self.row)

    @property
    def bucket(self) -> Any:
        return self.config.static


# ----------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class SweepSpec:
    """A declared sweep: `kind`, fixed values, and lists whose cartesian product are the runs."""

    kind: str = "train"
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    grid: Mapping[str, Sequence[Any]] = dataclasses.field(default_factory=dict)
    source: str = dataclasses.field(default="spec", compare=False)
    design: str = ""

    def runs(self) -> list[Run]:
        """Every run, in grid order (the last grid key varies fastest), duplicates dropped.

        Each run's config is validated as the command line's flags are (`TrainConfig`), and
        canonical (`16` for a float field is `16.0`), so one logical run has one hash; an
        invalid one raises SpecError naming the spec, the key and the value. With a
        `design` (`kind = "lm"`), its choices fill every field neither table gives
        (`idealized.decoder.config.with_design`, as `weakspots lm train --design`).
        """
        cls = CONFIGS[self.kind]
        names = list(self.grid)
        runs, seen = [], set()
        for values in itertools.product(*(self.grid[n] for n in names)):
            point = dict(zip(names, values, strict=True))
            given = {**self.fixed, **point}
            try:
                config = cls(**with_design(self.design, given, given))
            except ConfigError as err:
                where = (
                    "[grid]" if err.field in point
                    else "[fixed]" if err.field in self.fixed
                    else f"design {self.design!r}"
                )  # fmt: skip
                raise SpecError(
                    f"{self.source}: {err.field} ({where}): {err.message}"
                    + (f" (at grid point {point})" if point else "")
                ) from None
            run = Run(self.kind, config)
            if run.hash not in seen:
                seen.add(run.hash)
                runs.append(run)
        return runs


def valid_keys(kind: str) -> list[str]:
    return [f.name for f in dataclasses.fields(CONFIGS[kind])]


def _coerce(cls: type, key: str, value: Any, where: str) -> Any:
    """TOML `16` for a float field becomes `16.0`, so the config (and its hash) is typed."""
    field_type = {f.name: f.type for f in dataclasses.fields(cls)}[key]
    if field_type in ("float", float) and _is_int(value):
        return float(value)
    if isinstance(value, list | dict):
        raise SpecError(f"{where}: {key} must be a single value, got {value!r}")
    return value


def parse_spec(data: Mapping[str, Any], source: str = "spec") -> SweepSpec:
    """A SweepSpec from the parsed TOML; SpecError names any unknown or malformed key."""
    extra = sorted(set(data) - {"kind", "design", "fixed", "grid"})
    if extra:
        raise SpecError(
            f"{source}: unknown top-level key {extra[0]!r}; valid: kind, design, fixed, grid "
            "(run settings go in [fixed])"
        )
    kind = data.get("kind", "train")
    if kind not in KINDS:
        raise SpecError(f"{source}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    design = data.get("design", "")
    if "design" in data and kind != "lm":
        raise SpecError(f"{source}: design is a key of kind = \"lm\" specs, not kind = {kind!r}")
    if "design" in data and not (isinstance(design, str) and design in DESIGNS):
        raise SpecError(f"{source}: design must be one of {', '.join(DESIGNS)}, got {design!r}")
    cls, valid = CONFIGS[kind], valid_keys(kind)
    tables = {}
    for table in ("fixed", "grid"):
        raw = data.get(table, {})
        if not isinstance(raw, dict):
            raise SpecError(f"{source}: [{table}] must be a table")
        out = {}
        for key, value in raw.items():
            name = key.replace("-", "_")
            if name not in valid:
                raise SpecError(
                    f"{source}: unknown key {key!r} in [{table}]; valid keys for "
                    f"kind = {kind!r}: {', '.join(valid)}"
                )
            if table == "grid":
                if not isinstance(value, list) or not value:
                    raise SpecError(f"{source}: [grid] {key} must be a non-empty list")
                out[name] = [_coerce(cls, name, v, f"{source} [grid]") for v in value]
            else:
                out[name] = _coerce(cls, name, value, f"{source} [fixed]")
        tables[table] = out
    both = sorted(set(tables["fixed"]) & set(tables["grid"]))
    if both:
        raise SpecError(f"{source}: key {both[0]!r} is in both [fixed] and [grid]")
    return SweepSpec(kind, tables["fixed"], tables["grid"], source, design)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a TOML sweep spec (SpecError for bad TOML or keys)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise SpecError(f"{path}: not valid TOML ({err})") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not valid TOML (not UTF-8 text)") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read ({err.strerror})") from None
    return parse_spec(data, str(path))


def select_slice(runs: Sequence[Run], index: int, count: int) -> list[Run]:
    """The `index`-th of `count` disjoint shares (every `count`-th run from `index`).

    The shares cover the sweep and depend only on the spec, so independent processes
    (Slurm array tasks, Ray tasks, hosts) can split one sweep into one store.
    """
    if not (count >= 1 and 0 <= index < count):
        raise SpecError(f"--slice: need 0 <= i < n, got {index}/{count}")
    return list(runs[index::count])


def slurm_array_slice(environ: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """`(index, count)` of this task in a Slurm job array, or None outside one.

    Reads `SLURM_ARRAY_TASK_ID`, `SLURM_ARRAY_TASK_MIN` (default 0), `SLURM_ARRAY_TASK_STEP`
    (default 1) and `SLURM_ARRAY_TASK_COUNT` (else `(MAX - MIN) / STEP + 1`): the array
    `--array=M-K[:S]` gives task `M + i S` the share `i` of `(K - M) / S + 1`. An array
    of listed ids (`--array=1,5,9`) has no such order: SpecError, pass `--slice`.
    """
    task = environ.get("SLURM_ARRAY_TASK_ID")
    if task is None:
        return None
    try:
        task, low = int(task), int(environ.get("SLURM_ARRAY_TASK_MIN", 0))
        step = max(int(environ.get("SLURM_ARRAY_TASK_STEP", 1)), 1)
        high = int(environ.get("SLURM_ARRAY_TASK_MAX", task))
        count = int(environ.get("SLURM_ARRAY_TASK_COUNT", (high - low) // step + 1))
    except ValueError:
        raise SpecError("--slice: SLURM_ARRAY_TASK_* are not integers; pass --slice i/n") from None
    index, off_grid = divmod(task - low, step)
    regular = "SLURM_ARRAY_TASK_MAX" not in environ or (high - low) == (count - 1) * step
    if off_grid or not regular or not 0 <= index < count:
        raise SpecError(
            f"--slice: Slurm array task {task} (min {low}, step {step}, count {count}) is not "
            "task min + i * step of a regular array (--array=0-N[:S]); pass --slice i/n"
        )
    return index, count


# ----------------------------------------------------------------------------- devices


def run_mesh(devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    """A 1-D mesh (axis `runs`, Auto) over `devices` (default: every device, all processes)."""
    devices = list(jax.devices() if devices is None else devices)
    return jax.make_mesh(
        (len(devices),), (MESH_AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices
    )


def device_memory_bytes(devices: Sequence[jax.Device] | None = None) -> int:
    """Memory one batch may take per device: `MEMORY_FRACTION` of what is free.

    Only this process's devices among `devices` (default: all of this process's) are
    asked: under several processes a mesh's other devices belong to other hosts, which
    alone can report them. An accelerator reports its memory (`Device.memory_stats()`:
    `bytes_limit - bytes_in_use`); a CPU device reports none, so its share is the host's
    available memory (`MemAvailable`, else physical memory) over this process's devices.
    """
    here = jax.process_index()
    local = [d for d in (jax.local_devices() if devices is None else devices)
             if d.process_index == here] or jax.local_devices()  # fmt: skip
    stats = local[0].memory_stats()
    if stats and "bytes_limit" in stats:
        free = stats["bytes_limit"] - stats.get("bytes_in_use", 0)
    else:
        free = _host_available_bytes() // len(local)
    return max(1, int(MEMORY_FRACTION * free))


def _host_available_bytes() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def runs_that_fit(run: Run, memory_bytes: int, platform: str = "cpu") -> int:
    """Runs of `run`'s bucket that fit one device's `memory_bytes` (capped; on CPU lower)."""
    most = CPU_MAX_RUNS_PER_DEVICE if platform == "cpu" else MAX_RUNS_PER_DEVICE
    return min(most, max(1, memory_bytes // _bytes_per_run(run)))


def _bytes_per_run(run: Run) -> int:
    config = run.config
    if run.kind == "flow":
        return 64 * config.saves * config.heads * config.stride * 8 + 2**16
    if run.kind == "lm":
        return lm_sweep.bytes_per_run(config)
    if run.kind.startswith("induction"):
        return induction_sweep.BYTES_PER_RUN
    width = 1 if config.model.uses_gram else config.dim
    per_needle = config.chunks * config.stride * width * config.heads
    eval_needles = config.eval_samples if config.model.uses_gram else 256
    return 4 * 8 * per_needle * (config.batch + eval_needles)


def batch_sizes(count: int, per_device: int, devices: int) -> list[int]:
    """Split `count` runs into equal batches of at most `per_device * devices` runs.

    Every batch is padded to the same multiple of `devices`, so a bucket compiles once.
    Returns the number of real runs in each batch.
    """
    most = max(1, per_device) * devices
    batches = -(-count // most)
    size = -(-count // batches)
    return [min(size, count - i * size) for i in range(batches)]


# ----------------------------------------------------------------------------- processes

DISTRIBUTED_TIMEOUT = 120.0  # seconds any process waits for the others (connect, barriers)
TIMEOUT_ENV = "WEAKSPOTS_DISTRIBUTED_TIMEOUT"


class DistributedError(RuntimeError):
    """A process of a multi-process sweep did not arrive in time, or planned other runs."""


def distributed_timeout(seconds: float | None = None) -> float:
    """`seconds`, else `$WEAKSPOTS_DISTRIBUTED_TIMEOUT`, else `DISTRIBUTED_TIMEOUT`."""
    if seconds is None:
        seconds = float(os.environ.get(TIMEOUT_ENV, DISTRIBUTED_TIMEOUT))
    if not (math.isfinite(seconds) and seconds > 0):
        raise SpecError(f"--distributed-timeout: must be a number of seconds > 0, got {seconds}")
    return seconds


def start_distributed(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    timeout: float = DISTRIBUTED_TIMEOUT,
) -> None:
    """Join a multi-process jax runtime (`jax.distributed.initialize`), waiting at most `timeout`.

    Arguments left `None` are detected from the environment as jax does: Slurm
    (`SLURM_JOB_ID`, `SLURM_STEP_NODELIST`, `SLURM_NTASKS`, `SLURM_PROCID`,
    `SLURM_LOCALID`), Cloud TPU pods, Open MPI, Kubernetes; or `JAX_COORDINATOR_ADDRESS`.
    The coordination service declares a process dead after `timeout` seconds without a
    heartbeat, and waits as long at shutdown. jax aborts a process whose peers never
    connect, so if the connection is not made within `timeout` this prints one line to
    stderr and ends the process with status 1 (a watchdog thread). SpecError when the
    coordinator cannot be determined.
    """

    def give_up() -> None:
        who = "" if process_id is None else f" (process {process_id} of {num_processes})"
        print(
            f"weakspots sweep: error: --distributed: not every process connected to the "
            f"coordinator {coordinator or '(auto-detected)'} within {timeout:g}s{who}; start "
            f"all of them with the same --coordinator and --num-processes "
            f"(wait longer: --distributed-timeout or ${TIMEOUT_ENV})",
            file=sys.stderr,
            flush=True,
        )
        os._exit(1)

    watchdog = threading.Timer(timeout, give_up)
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=num_processes,
            process_id=process_id,
            # jax's own deadline aborts the process: let the watchdog speak first.
            initialization_timeout=int(timeout) + 60,
            heartbeat_timeout_seconds=max(int(timeout), 10),
            shutdown_timeout_seconds=max(int(timeout), 10),
        )
    except ValueError as err:  # no coordinator given and no cluster detected
        raise SpecError(
            f"--distributed: {err} No cluster was detected (Slurm, TPU pod, Open MPI, "
            "Kubernetes): pass --coordinator HOST:PORT --num-processes N --process-id I"
        ) from None
    finally:
        watchdog.cancel()


_barriers = itertools.count()


def _coordination_client():
    # jax's own multi-host checkpointing waits on this client (jax.experimental.array_
    # serialization); jax.experimental.multihost_utils.sync_global_devices cannot time out.
    from jax._src import distributed

    return distributed.global_state.client


def barrier(name: str, timeout: float = DISTRIBUTED_TIMEOUT) -> None:
    """Wait until every process reaches the barrier `name`; DistributedError after `timeout`."""
    if jax.process_count() == 1:
        return
    try:
        _coordination_client().wait_at_barrier(
            f"weakspots/{name}/{next(_barriers)}", int(timeout * 1000)
        )
    except jax.errors.JaxRuntimeError:
        raise DistributedError(
            f"process {jax.process_index()} of {jax.process_count()}: not every process "
            f"reached '{name}' within {timeout:g}s (a process failed or is far behind; "
            f"wait longer: --distributed-timeout or ${TIMEOUT_ENV})"
        ) from None


def agree_on_plan(runs: Sequence[Run], timeout: float = DISTRIBUTED_TIMEOUT) -> None:
    """DistributedError unless every process is about to run the same runs, in order.

    Processes that read different stores (no shared filesystem) or specs would otherwise
    enter mismatched collectives and wait forever.
    """
    if jax.process_count() == 1:
        return
    digest = hashlib.sha256("\n".join(r.hash for r in runs).encode()).hexdigest()[:16]
    client, me = _coordination_client(), jax.process_index()
    key = f"weakspots/plan/{next(_barriers)}"
    client.key_value_set(f"{key}/{me}", digest)
    for other in range(jax.process_count()):
        try:
            theirs = client.blocking_key_value_get(f"{key}/{other}", int(timeout * 1000))
        except jax.errors.JaxRuntimeError:
            raise DistributedError(
                f"process {me}: process {other} did not plan its runs within {timeout:g}s"
            ) from None
        if theirs != digest:
            raise DistributedError(
                f"process {me} and process {other} plan different runs: give every process "
                "the same spec, --slice and --resume, and a --store on a filesystem they share"
            )


# ----------------------------------------------------------------------------- executing


def _train_batch(runs: Sequence[Run], mesh, padded: int) -> list[tuple[dict, dict]]:
    configs = [r.config for r in runs]
    # Repeat the last run up to the bucket's batch size: one compiled shape per bucket.
    hyper = Hyper.stack(configs + [configs[-1]] * (padded - len(configs)))
    history, models, step_loss = run_batch(
        configs[0].static, hyper, mesh=mesh, stop_on_divergence=False
    )
    weights = history.pooling_weights
    out = []
    for r, config in enumerate(configs):
        trajectory = {
            name: getattr(history, name)[r]
            for name in ("times", "steps", "pooling_weights", "gain", "loss", "phase_accuracy")
            if getattr(history, name) is not None
        }
        trajectory["step_loss"] = step_loss[r]
        reason = failure(step_loss[r], history.gain[r], history.steps[r])
        if reason is not None:  # no metric: a failed run's numbers are not results
            out.append(({"diverged": True, "failure": f"training diverged: {reason}"}, trajectory))
            continue
        report = phase_report(history.phase_accuracy[r, -1], config.eval_samples)
        w = None if weights is None else weights[r, -1]
        metrics = {
            "mean_accuracy": report["mean_accuracy"],
            "delta_max": report["delta_max"],
            "psc": report["psc"],
            "psc_std": report["psc_std"],
            "final_loss": float(history.loss[r, -1]),
            "diverged": False,
            "phase_accuracy": report["phase_accuracy"],
            "final_gain": history.gain[r, -1].tolist(),
            "support_size": None if w is None else support_size(w).tolist(),
            "specialization_index": None if w is None else specialization_index(w).tolist(),
        }
        out.append((metrics, trajectory))
    return out


def _flow_batch(runs: Sequence[Run], mesh, padded: int) -> list[tuple[dict, dict | None]]:
    configs = [r.config for r in runs]
    results = flow_lib.solve_many(configs, mesh=mesh, batch_size=padded, throw=False)
    out = []
    for config, result in zip(configs, results, strict=True):
        if result.failure is not None:
            out.append(({"failure": result.failure}, None))  # no metrics: they would be nan
            continue
        history = result.history
        w, gain = history.pooling_weights[-1], history.gain[-1]
        # At d = infinity the argmax always finds the needle; the phase's expected
        # retrieval probability Pbar[phi] (docs/theory.md §5) is the flow's "accuracy".
        prob = np.asarray(mean_needle_probability(jnp.log(w), gain, float(config.chunks)))
        report = phase_report(prob, 1)
        metrics = {
            "mean_accuracy": report["mean_accuracy"],
            "delta_max": report["delta_max"],
            "psc": report["psc"],
            "psc_std": report["psc_std"],
            "final_loss": float(history.loss[-1]),
            "specialization_time": float(history.specialization_time),
            "phase_accuracy": report["phase_accuracy"],
            "final_gain": gain.tolist(),
            "support_size": support_size(w).tolist(),
            "specialization_index": specialization_index(w).tolist(),
        }
        trajectory = {
            name: np.asarray(getattr(history, name))
            for name in ("times", "pooling_weights", "gain", "loss")
        }
        out.append((metrics, trajectory))
    return out


def _lm_batch(runs: Sequence[Run], mesh, padded: int) -> list[tuple[dict, dict]]:
    del mesh  # decoders train on the default device (sims.decoder.train has no mesh yet)
    return lm_sweep.execute([r.config for r in runs], padded)


def _induction_batch(runs: Sequence[Run], mesh, padded: int) -> list[tuple[dict, dict]]:
    del mesh, padded  # one run at a time on the default device, one compile per bucket
    execute = {"induction_train": induction_sweep.execute_train, "induction_flow": induction_sweep.execute_flow}
    return execute[runs[0].kind]([r.config for r in runs])


EXECUTE: dict[str, Callable] = {
    "train": _train_batch,
    "flow": _flow_batch,
    "lm": _lm_batch,
    "induction_train": _induction_batch,
    "induction_flow": _induction_batch,
}


@dataclass
class SweepReport:
    """What a sweep did: runs in its share, skipped (already stored), run now, seconds."""

    total: int
    skipped: int
    ran: int
    seconds: float
    buckets: int
    devices: int
    written: int = 0  # runs this process wrote (process 0 writes for all)

    @property
    def runs_per_second(self) -> float:
        return self.ran / self.seconds if self.seconds > 0 else math.inf


def run_sweep(
    runs: Sequence[Run],
    store_dir: str | Path,
    *,
    resume: bool = False,
    mesh: jax.sharding.Mesh | None = None,
    runs_per_device: int | None = None,
    memory_bytes: int | None = None,
    progress: Progress | None = None,
    timeout: float = DISTRIBUTED_TIMEOUT,
) -> SweepReport:
    """Execute `runs` into the store at `store_dir`, one bucket (compiled program) at a time.

    Arguments:
        runs: the sweep's runs (`SweepSpec.runs()`, perhaps `select_slice`d).
        store_dir: a `sims.store` directory; each run is written as soon as its batch ends.
        resume: skip runs already in the store (without it they are run and replaced).
        mesh: a 1-D device mesh (`run_mesh()`); `None` runs on the default device.
        runs_per_device: batch size per device; default: as many as fit `memory_bytes`.
        memory_bytes: memory per device for one batch; default `device_memory_bytes()`.
        progress: a `sims.progress.Progress` in runs: planned here (runs already stored
            count as done), updated as each batch finishes.
        timeout: seconds a process waits for the others at a barrier (several processes).
    Before any run starts, the store is checked to be writable (`store.prepare`) and one
    run of every training structure to fit in a device's memory (`train.check_memory`).
    A training run that diverges is stored with no metrics, `diverged = True` and its
    reason in `failure`, rather than stopping the sweep.
    Under several processes (`jax.distributed`) every process runs the same batches
    and process 0 writes; all check that they planned the same runs before starting and
    leave together once the store is written (`DistributedError` if one does not arrive).
    """
    start = time.perf_counter()
    if jax.process_index() == 0:
        store.prepare(store_dir)  # a store that cannot be written fails now, not after training
    devices = 1 if mesh is None else mesh.size
    for run in {r.bucket: r for r in runs if r.kind == "train"}.values():
        check_memory(run.config, 1)  # one run of every structure must fit, before any trains
    done = store.completed_hashes(store_dir) if resume else set()
    todo = [r for r in runs if r.hash not in done]
    # Every process must have planned (read the store) before process 0 writes: each
    # waits for every other's plan.
    agree_on_plan(todo, timeout)
    buckets: dict[Any, list[Run]] = {}
    for run in todo:
        buckets.setdefault(run.bucket, []).append(run)
    if memory_bytes is None and runs_per_device is None:
        memory_bytes = device_memory_bytes(None if mesh is None else mesh.devices.flat)
    writer = jax.process_index() == 0
    if progress is not None:
        progress.plan(len(runs), done=len(runs) - len(todo), warmups=len(buckets))
    writers = f"weakspots-store-write-{next(_POOLS)}"  # names this pool's threads
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix=writers) as pool:
        writes: list[Future] = []
        try:
            _execute(buckets, store_dir, mesh, devices, runs_per_device, memory_bytes,
                     progress, writer, pool, writes)  # fmt: skip
        except BaseException:  # Ctrl-C included: what was submitted is stored before it spreads
            _finish_writes(pool, writers)
            raise
        for write in writes:
            write.result()  # re-raise a failed write
    barrier("written", timeout)
    return SweepReport(
        total=len(runs),
        skipped=len(runs) - len(todo),
        ran=len(todo),
        seconds=time.perf_counter() - start,
        buckets=len(buckets),
        devices=devices,
        written=len(todo) if writer else 0,
    )


_POOLS = itertools.count()


def _finish_writes(pool: ThreadPoolExecutor, writers: str) -> None:
    """Wait until every write submitted to `pool` is done.

    `pool.shutdown(wait=True)` is not enough after an interrupt: one that lands inside
    `submit` can leave a started writer thread unrecorded by the pool, so the writer
    threads are found by name (they exit once the queue is drained).
    """
    pool.shutdown(wait=False)
    for thread in threading.enumerate():
        if thread.name.startswith(writers + "_"):
            thread.join()


def _execute(
    buckets, store_dir, mesh, devices, runs_per_device, memory_bytes, progress, writer, pool, writes
) -> None:
    for members in buckets.values():
        kind = members[0].kind
        platform = jax.default_backend() if mesh is None else mesh.devices.flat[0].platform
        per_device = runs_per_device or runs_that_fit(members[0], memory_bytes, platform)
        sizes = batch_sizes(len(members), per_device, devices)
        padded = -(-max(sizes) // devices) * devices
        offset = 0
        for index, size in enumerate(sizes):
            batch = members[offset : offset + size]
            offset += size
            t0 = time.perf_counter()
            results = EXECUTE[kind](batch, mesh, padded)
            wall = (time.perf_counter() - t0) / size
            if writer:
                # fsync-bound writes overlap the next batch's compute; each stays atomic.
                writes += [
                    pool.submit(
                        store.write_run, store_dir, run.row, {**m, "wall_seconds": wall}, traj
                    )
                    for run, (m, traj) in zip(batch, results, strict=True)
                ]
            if progress is not None:  # a bucket's first batch compiles its program
                progress.update(size, warmup=index == 0)


float64_module(__name__)  # 64-bit types inside these functions only

"""Sweeps: a declared grid of runs, executed in compiled buckets over a device mesh, into a store.

A sweep spec (TOML) names `kind = "train" | "flow" | "lm"` (`lm`: the decoders of
`sims.lm`, trained on the default device), a `[fixed]` table and a `[grid]` table of
lists whose cartesian product are the runs; keys are the config field names (the
command-line flag names, `-` or `_`). Runs are grouped into buckets that share one
compiled program (`TrainConfig.static` or `FlowConfig.static`), each bucket runs in
equal, memory-sized batches whose run axis is split over a 1-D device mesh
(`sims.train.run_batch(mesh=...)`, `sims.flow.solve_many(mesh=...)`), and
every finished run is written to a `sims.store` at once, so a killed sweep resumes where
it stopped. `--slice i/n` keeps every n-th run (from the i-th, 0-based) for batch
schedulers; under `jax.distributed` the mesh spans every process's devices and process 0
writes.

Every run draws its randomness from its own seed, so its numbers do not depend on the
batch it ran in, the slice, or the device count (up to float32 rounding: XLA:CPU may
round a partitioned program differently in the last bit, which chaotic runs amplify).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
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

from weakspots.idealized.config import ConfigError, FlowConfig, TrainConfig
from weakspots.idealized.lm_config import LMConfig
from weakspots.idealized.metrics import phase_report, specialization_index, support_size
from weakspots.sims import flow as flow_lib
from weakspots.sims import store
from weakspots.sims.lm import sweep as lm_sweep
from weakspots.sims.progress import Progress
from weakspots.sims.train import Hyper, check_memory, failure, run_batch
from weakspots.theory.reduced import mean_needle_probability

__all__ = [
    "Run",
    "SpecError",
    "SweepSpec",
    "load_spec",
    "parse_spec",
    "run_mesh",
    "run_sweep",
    "select_slice",
]

KINDS = ("train", "flow", "lm")
MESH_AXIS = "runs"
DEFAULT_MEMORY_BYTES = 2**30  # per device, for sizing batches
MAX_RUNS_PER_DEVICE = 1024


class SpecError(ValueError):
    """A malformed sweep spec; the message names the offending key."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


CONFIGS: dict[str, type] = {"train": TrainConfig, "flow": FlowConfig, "lm": LMConfig}


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

    def runs(self) -> list[Run]:
        """Every run, in grid order (the last grid key varies fastest), duplicates dropped.

        Each run's config is validated as the command line's flags are (`TrainConfig`), and
        canonical (`16` for a float field is `16.0`), so one logical run has one hash; an
        invalid one raises SpecError naming the spec, the key and the value.
        """
        cls = CONFIGS[self.kind]
        names = list(self.grid)
        runs, seen = [], set()
        for values in itertools.product(*(self.grid[n] for n in names)):
            point = dict(zip(names, values, strict=True))
            try:
                config = cls(**{**self.fixed, **point})
            except ConfigError as err:
                where = "[grid]" if err.field in point else "[fixed]"
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
    extra = sorted(set(data) - {"kind", "fixed", "grid"})
    if extra:
        raise SpecError(
            f"{source}: unknown top-level key {extra[0]!r}; valid: kind, fixed, grid "
            "(run settings go in [fixed])"
        )
    kind = data.get("kind", "train")
    if kind not in KINDS:
        raise SpecError(f"{source}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
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
    return SweepSpec(kind, tables["fixed"], tables["grid"], source)


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


# ----------------------------------------------------------------------------- devices


def run_mesh(devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    """A 1-D mesh (axis `runs`, Auto) over `devices` (default: every device, all processes)."""
    devices = list(jax.devices() if devices is None else devices)
    return jax.make_mesh(
        (len(devices),), (MESH_AXIS,), axis_types=(jax.sharding.AxisType.Auto,), devices=devices
    )


def _bytes_per_run(run: Run) -> int:
    config = run.config
    if run.kind == "flow":
        return 64 * config.saves * config.heads * config.stride * 8 + 2**16
    if run.kind == "lm":
        return lm_sweep.bytes_per_run(config)
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
        # retrieval probability Pbar[phi] (THEORY 5) is the flow's "accuracy".
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
    del mesh  # decoders train on the default device (sims.lm.train has no mesh yet)
    return lm_sweep.execute([r.config for r in runs], padded)


EXECUTE: dict[str, Callable] = {"train": _train_batch, "flow": _flow_batch, "lm": _lm_batch}


@dataclass
class SweepReport:
    """What a sweep did: runs in its share, skipped (already stored), run now, seconds."""

    total: int
    skipped: int
    ran: int
    seconds: float
    buckets: int
    devices: int

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
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    progress: Progress | None = None,
) -> SweepReport:
    """Execute `runs` into the store at `store_dir`, one bucket (compiled program) at a time.

    Arguments:
        runs: the sweep's runs (`SweepSpec.runs()`, perhaps `select_slice`d).
        store_dir: a `sims.store` directory; each run is written as soon as its batch ends.
        resume: skip runs already in the store (without it they are run and replaced).
        mesh: a 1-D device mesh (`run_mesh()`); `None` runs on the default device.
        runs_per_device: batch size per device; default from `memory_bytes` per device.
        progress: a `sims.progress.Progress` in runs: planned here (runs already stored
            count as done), updated as each batch finishes.
    Before any run starts, the store is checked to be writable (`store.prepare`) and one
    run of every training structure to fit in a device's memory (`train.check_memory`).
    A training run that diverges is stored with no metrics, `diverged = True` and its
    reason in `failure`, rather than stopping the sweep.
    Under several processes (`jax.distributed`) every process runs the same batches
    and process 0 writes.
    """
    start = time.perf_counter()
    if jax.process_index() == 0:
        store.prepare(store_dir)  # a store that cannot be written fails now, not after training
    devices = 1 if mesh is None else mesh.size
    for run in {r.bucket: r for r in runs if r.kind == "train"}.values():
        check_memory(run.config, 1)  # one run of every structure must fit, before any trains
    done = store.completed_hashes(store_dir) if resume else set()
    todo = [r for r in runs if r.hash not in done]
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        # Every process must have planned (read the store) before process 0 writes.
        multihost_utils.sync_global_devices("weakspots sweep: planned")
    buckets: dict[Any, list[Run]] = {}
    for run in todo:
        buckets.setdefault(run.bucket, []).append(run)
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
    return SweepReport(
        total=len(runs),
        skipped=len(runs) - len(todo),
        ran=len(todo),
        seconds=time.perf_counter() - start,
        buckets=len(buckets),
        devices=devices,
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
        per_device = runs_per_device or min(
            MAX_RUNS_PER_DEVICE, max(1, memory_bytes // _bytes_per_run(members[0]))
        )
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

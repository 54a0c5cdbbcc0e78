"""Result store for sweeps: one row per run in a tidy table, trajectories keyed by config hash.

Layout of a store directory::

    runs/<hash>.json     one finished run: config, metrics, trajectory keys (the "row")
    traj/<hash>.npz      its trajectory arrays (only when the run saved one)
    table.parquet        rows consolidated by `compact` (optional)
    .lock                fcntl lock file serialising `compact`

Guarantees and how they are kept:

* A run is either fully in the store or absent, even if the writer is SIGKILLed at any
  moment: every file is written to a temporary name in its final directory, fsynced,
  and renamed over its final name with `os.replace` (atomic on POSIX). The trajectory is
  renamed into place BEFORE the row, so a present row implies a present trajectory;
  the row is the commit point. A kill leaves at most a stray `.*.tmp` file (ignored by
  readers; `compact` removes old ones) or an orphaned trajectory with no row (harmless:
  the run counts as absent and is rewritten on resume).
* Two processes may write one store concurrently: distinct runs never share a file,
  and two writers of the same config write the same hash, so the last rename wins and
  the table still holds that run once. Readers tolerate a concurrent `compact`, which
  moves loose rows into `table.parquet`: they read loose rows first and the table
  second, so a row deleted in between is found in the table written before it.
* A damaged file (truncated, garbage, or a row whose hash does not match its config)
  raises `StoreError("damaged result file <path>: ...")` by default;
  `load(..., on_damaged="warn")` warns (`DamagedResultWarning`) and `"skip"` silently
  drops it, so the rest of the store stays readable.

Config values are JSON scalars (str, int, float, bool, None). `1` and `1.0` are different
configs (canonical JSON keeps the type), so build configs from typed dataclasses.
"""

import fcntl
import hashlib
import json
import math
import os
import re
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

__all__ = [
    "DamagedResultWarning",
    "StoreError",
    "compact",
    "completed_hashes",
    "config_hash",
    "has_run",
    "load",
    "load_trajectory",
    "write_run",
]

FORMAT = 1
TABLE = "table.parquet"
PHASE_ACCURACY = "phase_accuracy"
_RESERVED = ("hash", "written_ns", "row_json")
_HASH = re.compile(r"[0-9a-f]{16}")
_STALE_TMP_S = 3600.0

OnDamaged = Literal["raise", "warn", "skip"]
Scalar = str | int | float | bool | None


class StoreError(Exception):
    """A result file in the store is damaged or inconsistent; the message names it."""


class DamagedResultWarning(UserWarning):
    """Emitted by `load(..., on_damaged="warn")` for each damaged file it leaves out."""


# ----------------------------------------------------------------------------- hashing


def _scalar(value: Any, where: str) -> Scalar:
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, str | bool | int | float):
        return value
    raise TypeError(f"{where} must be a str, int, float, bool or None, got {type(value)!r}")


def _canonical_config(config: Mapping[str, Any]) -> dict[str, Scalar]:
    out = {}
    for key, value in config.items():
        if not isinstance(key, str):
            raise TypeError(f"config keys must be str, got {key!r}")
        out[key] = _scalar(value, f"config[{key!r}]")
    return out


def config_hash(config: Mapping[str, Any]) -> str:
    """Stable content hash of a config of scalars.

    Returns the first 16 hex characters of the sha256 of the canonical JSON of `config`:
    keys sorted, no whitespace, floats in their shortest round-trip (`repr`) form. It
    does not depend on key order, process, or platform.
    """
    text = json.dumps(_canonical_config(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_hash(run_hash: str) -> str:
    if not isinstance(run_hash, str) or not _HASH.fullmatch(run_hash):
        raise ValueError(f"not a run hash (16 lowercase hex characters): {run_hash!r}")
    return run_hash


# ----------------------------------------------------------------------------- writing


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, write) -> None:
    """Write via `write(file)` to a temp file beside `path`, fsync, rename over `path`."""
    tmp = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"metric names must be str, got {key!r}")
        if isinstance(value, np.ndarray | list | tuple):
            array = np.asarray(value)
            if array.ndim != 1:
                raise TypeError(f"metrics[{key!r}] must be a scalar or a flat list")
            out[key] = [_scalar(v, f"metrics[{key!r}]") for v in array.tolist()]
        else:
            out[key] = _scalar(value, f"metrics[{key!r}]")
    return out


def write_run(
    store_dir: str | os.PathLike,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    trajectory: Mapping[str, np.ndarray] | None = None,
) -> str:
    """Store one finished run atomically and return its config hash.

    Arguments:
        store_dir: the store directory (created if missing).
        config: the run's config, `{name: scalar}`; every key becomes a column.
        metrics: `{name: scalar or flat list}`; a list named `phase_accuracy` also
            becomes columns `acc_0 .. acc_{s-1}` when loaded.
        trajectory: optional `{name: array}` saved to `traj/<hash>.npz`.

    Writing a config that is already stored replaces that run (same hash, one row).
    """
    row_config = _canonical_config(config)
    row_metrics = _metrics(metrics)
    clash = set(row_config) & set(row_metrics)
    reserved = {k for k in (*row_config, *row_metrics) if k in _RESERVED or _is_acc(k)}
    if clash or reserved:
        raise ValueError(
            f"config and metric names must be distinct and not reserved "
            f"({', '.join(_RESERVED)}, acc_<i>): {sorted(clash | reserved)}"
        )
    run_hash = config_hash(row_config)
    root = Path(store_dir)
    (root / "runs").mkdir(parents=True, exist_ok=True)
    (root / "traj").mkdir(exist_ok=True)

    keys: list[str] = []
    if trajectory is not None:
        arrays = {name: np.asarray(value) for name, value in trajectory.items()}
        for name, array in arrays.items():
            if array.dtype == object:
                raise TypeError(f"trajectory[{name!r}] is not a numeric array")
        keys = sorted(arrays)
        _atomic_write(root / "traj" / f"{run_hash}.npz", lambda f: np.savez(f, **arrays))

    row = {
        "format": FORMAT,
        "hash": run_hash,
        "written_ns": time.time_ns(),
        "config": row_config,
        "metrics": row_metrics,
        "trajectory": keys,
    }
    text = json.dumps(row, sort_keys=True).encode()
    _atomic_write(root / "runs" / f"{run_hash}.json", lambda f: f.write(text))
    return run_hash


def _is_acc(name: str) -> bool:
    return re.fullmatch(r"acc_\d+", name) is not None


# ----------------------------------------------------------------------------- reading


def _parse_row(text: str | bytes, source: str) -> dict[str, Any]:
    """Decode and check one row; raise StoreError naming `source` if it is damaged."""
    try:
        row = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StoreError(f"damaged result file {source}: not valid JSON ({err})") from None
    if not isinstance(row, dict) or row.get("format") != FORMAT:
        raise StoreError(f"damaged result file {source}: not a format-{FORMAT} run row")
    try:
        config, metrics, keys = row["config"], row["metrics"], row["trajectory"]
        if not (isinstance(config, dict) and isinstance(metrics, dict)):
            raise TypeError("config and metrics must be objects")
        if not isinstance(keys, list) or not isinstance(row["written_ns"], int):
            raise TypeError("bad trajectory keys or timestamp")
        expected = config_hash(config)
    except (KeyError, TypeError) as err:
        raise StoreError(f"damaged result file {source}: {err}") from None
    if row["hash"] != expected:
        raise StoreError(
            f"damaged result file {source}: stored hash {row['hash']!r} does not match its "
            f"config (hash {expected!r})"
        )
    return row


def _damaged(err: StoreError, on_damaged: OnDamaged) -> None:
    if on_damaged == "raise":
        raise err
    if on_damaged == "warn":
        warnings.warn(str(err), DamagedResultWarning, stacklevel=3)


def _loose_rows(root: Path, on_damaged: OnDamaged) -> Iterator[tuple[Path, os.stat_result, dict]]:
    runs = root / "runs"
    if not runs.is_dir():
        return
    for path in sorted(runs.glob("*.json")):
        if path.name.startswith("."):
            continue
        try:
            with open(path, "rb") as f:
                stat = os.fstat(f.fileno())
                text = f.read()
        except FileNotFoundError:
            continue  # moved into table.parquet by a concurrent compact; read below
        try:
            row = _parse_row(text, str(path))
            if path.stem != row["hash"]:
                raise StoreError(
                    f"damaged result file {path}: holds run {row['hash']}, not {path.stem}"
                )
        except StoreError as err:
            _damaged(err, on_damaged)
            continue
        yield path, stat, row


def _table_rows(root: Path, on_damaged: OnDamaged) -> list[dict]:
    path = root / TABLE
    try:
        texts = pd.read_parquet(path, columns=["row_json"])["row_json"].tolist()
    except FileNotFoundError:
        return []
    except Exception as err:  # pyarrow raises several types for a corrupt file
        _damaged(StoreError(f"damaged result file {path}: {err}"), on_damaged)
        return []
    rows = []
    for i, text in enumerate(texts):
        try:
            rows.append(_parse_row(text, f"{path} (row {i})"))
        except StoreError as err:
            _damaged(err, on_damaged)
    return rows


def _all_rows(root: Path, on_damaged: OnDamaged) -> list[dict]:
    """Every stored run once (newest write of a hash wins), sorted by hash."""
    # Loose rows first, then the table: see the module docstring on concurrent compact.
    loose = [row for _, _, row in _loose_rows(root, on_damaged)]
    newest: dict[str, dict] = {}
    for row in _table_rows(root, on_damaged) + loose:
        old = newest.get(row["hash"])
        if old is None or row["written_ns"] >= old["written_ns"]:
            newest[row["hash"]] = row
    return [newest[h] for h in sorted(newest)]


def _flat(row: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {"hash": row["hash"], **row["config"], **row["metrics"]}
    phases = row["metrics"].get(PHASE_ACCURACY)
    if isinstance(phases, list):
        flat.update({f"acc_{j}": value for j, value in enumerate(phases)})
    flat["written_ns"] = row["written_ns"]
    return flat


def load(store_dir: str | os.PathLike, *, on_damaged: OnDamaged = "raise") -> pd.DataFrame:
    """Read a store back as a tidy table, one row per run, sorted by hash.

    Columns: `hash`, every config key, every metric (a `phase_accuracy` list is kept and
    also spread into `acc_0 .. acc_{s-1}`), and `written_ns` (write time, ns since the
    epoch; sort by it for insertion order). Runs lacking a key hold NaN/None there.

    Arguments:
        store_dir: the store directory; FileNotFoundError if it does not exist.
        on_damaged: what a damaged file does: `"raise"` a StoreError naming it (default),
            `"warn"` with a DamagedResultWarning and leave it out, or `"skip"` silently.
    """
    root = Path(store_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no result store at {root}")
    if on_damaged not in ("raise", "warn", "skip"):
        raise ValueError(f"on_damaged must be 'raise', 'warn' or 'skip', got {on_damaged!r}")
    rows = [_flat(row) for row in _all_rows(root, on_damaged)]
    if not rows:
        return pd.DataFrame({"hash": pd.Series([], dtype=object)})
    return pd.DataFrame.from_records(rows)


def completed_hashes(store_dir: str | os.PathLike) -> set[str]:
    """Hashes of every readable run in the store (empty if the store does not exist yet).

    Damaged rows are left out, so `--resume` reruns them.
    """
    root = Path(store_dir)
    if not root.is_dir():
        return set()
    return {row["hash"] for row in _all_rows(root, "skip")}


def has_run(store_dir: str | os.PathLike, run_hash: str) -> bool:
    """Whether the store holds a readable run with this hash."""
    _check_hash(run_hash)
    root = Path(store_dir)
    path = root / "runs" / f"{run_hash}.json"
    try:
        _parse_row(path.read_bytes(), str(path))
        return True
    except (FileNotFoundError, StoreError):
        pass
    return any(row["hash"] == run_hash for row in _table_rows(root, "skip"))


def load_trajectory(store_dir: str | os.PathLike, run_hash: str) -> dict[str, np.ndarray]:
    """The trajectory arrays saved with run `run_hash`, as `{name: array}`.

    Raises KeyError if the run is not stored or saved no trajectory, and StoreError
    naming the file if the trajectory file is damaged.
    """
    _check_hash(run_hash)
    path = Path(store_dir) / "traj" / f"{run_hash}.npz"
    try:
        # Own the file handle: np.load leaks it when the zip directory is damaged.
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise KeyError(f"no trajectory for run {run_hash} in {store_dir}") from None
    except Exception as err:  # zipfile/numpy raise several types for a corrupt file
        raise StoreError(f"damaged result file {path}: {err}") from None


# ----------------------------------------------------------------------------- compacting


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def compact(store_dir: str | os.PathLike, *, on_damaged: OnDamaged = "raise") -> int:
    """Consolidate loose rows into `table.parquet`; return the number of runs in it.

    The table holds the tidy columns (as `load` returns them, for direct use with
    `pandas.read_parquet`) plus `row_json`, the exact stored row, which is what `load`
    reads. Runs under an exclusive fcntl lock, so concurrent compactions serialise;
    concurrent writers and readers need no lock. A loose row is deleted only after the
    new table is in place, and only if it was not rewritten meanwhile. Damaged loose rows
    are handled per `on_damaged` and never deleted. Stray temp files older than an hour
    (left by killed writers) are removed.
    """
    root = Path(store_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no result store at {root}")
    with _locked(root):
        loose = list(_loose_rows(root, on_damaged))
        newest: dict[str, dict] = {}
        for row in _table_rows(root, "raise") + [row for _, _, row in loose]:
            old = newest.get(row["hash"])
            if old is None or row["written_ns"] >= old["written_ns"]:
                newest[row["hash"]] = row
        rows = [newest[h] for h in sorted(newest)]
        table = pd.DataFrame.from_records([_flat(row) for row in rows])
        table["row_json"] = [json.dumps(row, sort_keys=True) for row in rows]
        for column in table.columns:
            if table[column].dtype == object and _mixed(table[column]):
                # Parquet needs one type per column; the exact values live in row_json.
                table[column] = table[column].map(_json_or_none)
        _atomic_write(root / TABLE, lambda f: table.to_parquet(f, index=False))

        for path, stat, _ in loose:
            try:
                now = path.stat()
            except FileNotFoundError:
                continue
            if (now.st_ino, now.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns):
                path.unlink(missing_ok=True)
        cutoff = time.time() - _STALE_TMP_S
        for directory in (root, root / "runs", root / "traj"):
            for tmp in directory.glob(".*.tmp"):
                try:
                    if tmp.stat().st_mtime < cutoff:
                        tmp.unlink()
                except FileNotFoundError:
                    pass
        return len(rows)


def _mixed(column: pd.Series) -> bool:
    return len({type(v) for v in column if not _missing(v)}) > 1


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _json_or_none(value: Any) -> str | None:
    return None if _missing(value) else json.dumps(value)

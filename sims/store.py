"""Result store for sweeps: one row per run in a tidy table, trajectories keyed by config hash.

Layout of a store directory::

    runs/<hash>.json     one finished run: config, metrics, trajectory keys (the "row")
    traj/<hash>.npz      its trajectory arrays (only when the run saved one)
    table.parquet        the rows consolidated by `compact` (optional: a cache)
    table.parquet.sha256 its checksum (`sha256sum -c table.parquet.sha256` checks it)
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
  the table still holds that run once. `compact` never deletes a row, so readers need
  no lock either.
* Damage to any one file loses no run and is never read as a result: every row carries
  a sha256 checksum of its content and of its trajectory file, and the compacted table's
  sha256 is kept beside it. A damaged row is named and
  replaced by its copy in the table when there is one; a damaged table is named and
  bypassed (the rows it was built from are all still there), and `compact` rebuilds it;
  a run whose trajectory is damaged is left out of `completed_hashes`, so `--resume`
  runs it again. Where no good copy remains, a damaged file raises
  `StoreError("damaged result file <path>: ...")` by default;
  `load(..., on_damaged="warn")` warns (`DamagedResultWarning`) and `"skip"` silently
  drops it, so the rest of the store stays readable.

Config values are JSON scalars (str, int, float, bool, None). `1` and `1.0` are different
configs (canonical JSON keeps the type), so build configs from typed dataclasses
(`idealized.toy.config.TrainConfig` gives float fields float values).
"""

import contextlib
import fcntl
import hashlib
import io
import json
import math
import os
import re
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "DamagedResultWarning",
    "StoreError",
    "compact",
    "completed_hashes",
    "config_hash",
    "has_run",
    "load",
    "load_trajectory",
    "prepare",
    "write_run",
]

FORMAT = 2  # rows of format 1 (no checksums) are still read
TABLE = "table.parquet"
TABLE_SHA256 = "table.parquet.sha256"  # the table's sha256, as `sha256sum` writes it
TABLE_ROW_FILES = b"weakspots.row_files"  # {hash: [inode, mtime, ctime, size]} of its rows
PHASE_ACCURACY = "phase_accuracy"
_RESERVED = ("hash", "written_ns", "row_json")
_HASH = re.compile(r"[0-9a-f]{16}")
_STALE_TMP_S = 3600.0

OnDamaged = Literal["raise", "warn", "skip"]
Scalar = str | int | float | bool | None


class StoreError(RuntimeError):
    """A result file in the store is damaged or inconsistent, or the store cannot be
    written; the message names the file."""


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


def prepare(store_dir: str | os.PathLike) -> Path:
    """Make sure runs can be written at `store_dir` before any work starts; return its path.

    Creates the directory (and `runs/`, `traj/`) if missing and writes and removes a
    probe file in each. Raises StoreError saying what is wrong: a path that is a file, a
    parent that is not a directory, or a directory that cannot be written.
    """
    root = Path(store_dir)
    for directory in (root, root / "runs", root / "traj"):
        if directory.exists() and not directory.is_dir():
            raise StoreError(f"cannot write the store at {root}: {directory} is not a directory")
        try:
            directory.mkdir(parents=True, exist_ok=True)
            probe = directory / f".probe.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
            with open(probe, "wb") as f:
                f.write(b"probe")
            probe.unlink()
        except OSError as err:
            reason = err.strerror or str(err)
            raise StoreError(f"cannot write the store at {root}: {reason} ({directory})") from None
    return root


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _row_checksum(row: Mapping[str, Any]) -> str:
    body = {k: v for k, v in row.items() if k != "checksum"}
    return _sha256(json.dumps(body, sort_keys=True).encode())


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
    trajectory_sha256 = None
    if trajectory is not None:
        arrays = {name: np.asarray(value) for name, value in trajectory.items()}
        for name, array in arrays.items():
            if array.dtype == object:
                raise TypeError(f"trajectory[{name!r}] is not a numeric array")
        keys = sorted(arrays)
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        data = buffer.getvalue()
        trajectory_sha256 = _sha256(data)
        _atomic_write(root / "traj" / f"{run_hash}.npz", lambda f: f.write(data))

    row = {
        "format": FORMAT,
        "hash": run_hash,
        "written_ns": time.time_ns(),
        "config": row_config,
        "metrics": row_metrics,
        "trajectory": keys,
        "trajectory_sha256": trajectory_sha256,
    }
    row["checksum"] = _row_checksum(row)
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
    if not isinstance(row, dict) or row.get("format") not in (1, FORMAT):
        raise StoreError(f"damaged result file {source}: not a format-{FORMAT} run row")
    try:
        config, metrics, keys = row["config"], row["metrics"], row["trajectory"]
        if not (isinstance(config, dict) and isinstance(metrics, dict)):
            raise TypeError("config and metrics must be objects")
        if not isinstance(keys, list) or not isinstance(row["written_ns"], int):
            raise TypeError("bad trajectory keys or timestamp")
        expected = config_hash(config)
        checksum = row["checksum"] if row["format"] >= 2 else None
    except (KeyError, TypeError) as err:
        raise StoreError(f"damaged result file {source}: {err}") from None
    if row["hash"] != expected:
        raise StoreError(
            f"damaged result file {source}: stored hash {row['hash']!r} does not match its "
            f"config (hash {expected!r})"
        )
    if checksum is not None and checksum != _row_checksum(row):
        raise StoreError(f"damaged result file {source}: its content does not match its checksum")
    return row


def _damaged(err: StoreError, on_damaged: OnDamaged) -> None:
    if on_damaged == "raise":
        raise err
    if on_damaged == "warn":
        warnings.warn(str(err), DamagedResultWarning, stacklevel=3)


def _bypassed(err: StoreError, on_damaged: OnDamaged, what: str) -> None:
    """A damaged file that a good copy replaces: named in a warning, never raised."""
    if on_damaged != "skip":
        warnings.warn(f"{err}; {what}", DamagedResultWarning, stacklevel=3)


def _file_id(stat: os.stat_result) -> list[int]:
    return [stat.st_ino, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_size]


class _Table:
    """The compacted table's rows `{hash: row}` and the row files it was built from."""

    def __init__(self, rows: dict[str, dict], row_files: dict[str, list[int]]):
        self.rows, self.row_files = rows, row_files


def _read_table(root: Path, on_damaged: OnDamaged, *, holding_lock: bool = False) -> _Table:
    """The compacted table, or an empty one (with a warning naming it) if it is damaged.

    The table is read only if its bytes match `table.parquet.sha256`. The rows it was built
    from are never deleted, so bypassing a damaged table loses nothing. A table written
    before rows were kept (no checksum, no `row_files`) is the only copy of its rows: it
    is read unverified, and a damaged one is reported per `on_damaged`.
    """
    path = root / TABLE
    try:
        # compact replaces the table and its checksum together, under the exclusive lock
        with contextlib.nullcontext() if holding_lock else _shared_lock(root):
            data = path.read_bytes()
            try:
                recorded = (root / TABLE_SHA256).read_text().split()[0]
            except (FileNotFoundError, IndexError, UnicodeDecodeError):
                recorded = None
    except FileNotFoundError:
        return _Table({}, {})
    try:
        table = pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
        metadata = table.schema.metadata or {}
        files = json.loads(metadata[TABLE_ROW_FILES]) if TABLE_ROW_FILES in metadata else None
        if recorded is None and files is not None:
            raise ValueError(f"its checksum file {TABLE_SHA256} is missing or empty")
        if recorded is not None and recorded != _sha256(data):
            raise ValueError(f"its content does not match its checksum ({TABLE_SHA256})")
        texts = table.column("row_json").to_pylist()
    except Exception as err:  # pyarrow raises several types for a damaged file
        error = StoreError(f"damaged result file {path}: {err}")
        if _has_rows(root):
            _bypassed(error, on_damaged, "bypassed: reading the rows it was built from")
        else:
            _damaged(error, on_damaged)
        return _Table({}, {})
    rows = {}
    for i, text in enumerate(texts):
        try:
            row = _parse_row(text, f"{path} (row {i})")
        except StoreError as err:
            _damaged(err, on_damaged)
            continue
        rows[row["hash"]] = row
    return _Table(rows, files or {})


def _has_rows(root: Path) -> bool:
    runs = root / "runs"
    return runs.is_dir() and any(not p.name.startswith(".") for p in runs.glob("*.json"))


def _read_row(path: Path, on_damaged: OnDamaged, copy: dict | None) -> dict | None:
    """One row file, checked; its table `copy` stands in if it is damaged."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return copy
    try:
        row = _parse_row(text, str(path))
        if path.stem != row["hash"]:
            raise StoreError(
                f"damaged result file {path}: holds run {row['hash']}, not {path.stem}"
            )
    except StoreError as err:
        if copy is not None:
            _bypassed(err, on_damaged, "using its copy in the compacted table")
            return copy
        _damaged(err, on_damaged)
        return None
    return row


def _row_paths(root: Path) -> Iterator[Path]:
    runs = root / "runs"
    if runs.is_dir():
        yield from (p for p in sorted(runs.glob("*.json")) if not p.name.startswith("."))


def _all_rows(root: Path, on_damaged: OnDamaged, *, table: bool = True) -> list[dict]:
    """Every stored run once (newest write of a hash wins), sorted by hash.

    A row file the table was built from, unchanged since (same inode, mtime, ctime and size), is
    taken from the table without reading it (a rewritten row is a new file); any other row file is read and checked.
    """
    compacted = _read_table(root, on_damaged) if table else _Table({}, {})
    newest = dict(compacted.rows)
    for path in _row_paths(root):
        run_hash = path.stem
        try:
            unchanged = compacted.row_files.get(run_hash) == _file_id(path.stat())
        except FileNotFoundError:
            continue
        if unchanged and run_hash in compacted.rows:
            continue
        row = _read_row(path, on_damaged, compacted.rows.get(run_hash))
        if row is None:
            continue
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
    epoch; sort by it for insertion order). Runs lacking a key hold NaN/None there (a
    sweep's failed run has no accuracy metrics and says why in `failure`).

    Arguments:
        store_dir: the store directory; FileNotFoundError if it does not exist.
        on_damaged: what a damaged file with no good copy does: `"raise"` a StoreError
            naming it (default), `"warn"` with a DamagedResultWarning and leave it out, or
            `"skip"` silently. A damaged file that a good copy replaces (a row compacted
            into the table, the table whose rows are all kept) is named in a warning.
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


def _trajectory_intact(root: Path, row: Mapping[str, Any]) -> bool:
    """Whether the run's trajectory (if it saved one) is present and undamaged."""
    if not row["trajectory"]:
        return True
    path = root / "traj" / f"{row['hash']}.npz"
    expected = row.get("trajectory_sha256")
    try:
        if expected is not None:
            return _sha256(path.read_bytes()) == expected
        _read_npz(path)  # a format-1 row has no checksum: read it whole (zip CRCs)
        return True
    except (OSError, StoreError):
        return False


def completed_hashes(store_dir: str | os.PathLike) -> set[str]:
    """Hashes of every complete run in the store (empty if the store does not exist yet).

    A run counts when its row is readable (from its file or the table) and its
    trajectory, if it saved one, matches the checksum in its row; so `--resume` reruns a
    run whose row or trajectory is damaged.
    """
    root = Path(store_dir)
    if not root.is_dir():
        return set()
    return {row["hash"] for row in _all_rows(root, "skip") if _trajectory_intact(root, row)}


def has_run(store_dir: str | os.PathLike, run_hash: str) -> bool:
    """Whether the store holds a complete run with this hash (as `completed_hashes`)."""
    _check_hash(run_hash)
    row = _find_row(Path(store_dir), run_hash)
    return row is not None and _trajectory_intact(Path(store_dir), row)


def _find_row(root: Path, run_hash: str) -> dict | None:
    path = root / "runs" / f"{run_hash}.json"
    try:
        row = _parse_row(path.read_bytes(), str(path))
        if row["hash"] == run_hash:
            return row
    except (FileNotFoundError, StoreError):
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedResultWarning)
        return _read_table(root, "skip").rows.get(run_hash)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        # Own the file handle: np.load leaks it when the zip directory is damaged.
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise
    except Exception as err:  # zipfile/numpy raise several types for a corrupt file
        raise StoreError(f"damaged result file {path}: {err}") from None


def load_trajectory(store_dir: str | os.PathLike, run_hash: str) -> dict[str, np.ndarray]:
    """The trajectory arrays saved with run `run_hash`, as `{name: array}`.

    Raises KeyError if the run is not stored or saved no trajectory, and StoreError
    naming the file if the trajectory file is damaged (unreadable, or not the file its
    row's checksum names).
    """
    _check_hash(run_hash)
    root = Path(store_dir)
    path = root / "traj" / f"{run_hash}.npz"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise KeyError(f"no trajectory for run {run_hash} in {store_dir}") from None
    row = _find_row(root, run_hash)
    expected = None if row is None else row.get("trajectory_sha256")
    if expected is not None and _sha256(data) != expected:
        raise StoreError(
            f"damaged result file {path}: its content does not match its run's checksum"
        )
    return _read_npz(path)


# ----------------------------------------------------------------------------- compacting


@contextlib.contextmanager
def _locked(root: Path, mode: int = fcntl.LOCK_EX) -> Iterator[None]:
    with open(root / ".lock", "a") as lock:
        fcntl.flock(lock, mode)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def _shared_lock(root: Path) -> Iterator[None]:
    """Shared with other readers, exclusive of `compact`; none in a store one cannot write."""
    try:
        context = _locked(root, fcntl.LOCK_SH)
        context.__enter__()
    except OSError:
        yield
        return
    try:
        yield
    finally:
        context.__exit__(None, None, None)


def compact(store_dir: str | os.PathLike, *, on_damaged: OnDamaged = "raise") -> int:
    """Consolidate the rows into `table.parquet`; return the number of runs in it.

    The table holds the tidy columns (as `load` returns them, for direct use with
    `pandas.read_parquet`) plus `row_json`, the exact stored row, which is what `load`
    reads; its schema metadata records which row files it was built from, so `load` reads
    only the rows written since, and its sha256 goes to `table.parquet.sha256`. Row files are kept (they stay
    the commit point): a damaged table is rebuilt from them, with a warning naming it.
    Damaged rows are handled per `on_damaged` (a compacted copy stands in, with a
    warning). Runs under an exclusive fcntl lock, so concurrent compactions serialise;
    concurrent writers and readers need no lock. Stray temp files older than an hour
    (left by killed writers) are removed.
    """
    root = Path(store_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"no result store at {root}")
    with _locked(root):
        old = _read_table(root, on_damaged, holding_lock=True)
        newest = dict(old.rows)
        files: dict[str, list[int]] = {}
        for path in _row_paths(root):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            row = _read_row(path, on_damaged, old.rows.get(path.stem))
            if row is None:
                continue
            if row is not old.rows.get(path.stem):
                files[row["hash"]] = _file_id(stat)
            current = newest.get(row["hash"])
            if current is None or row["written_ns"] >= current["written_ns"]:
                newest[row["hash"]] = row
        rows = [newest[h] for h in sorted(newest)]
        table = pd.DataFrame.from_records([_flat(row) for row in rows])
        texts = [json.dumps(row, sort_keys=True) for row in rows]
        table["row_json"] = texts
        for column in table.columns:
            if table[column].dtype == object and _mixed(table[column]):
                # Parquet needs one type per column; the exact values live in row_json.
                table[column] = table[column].map(_json_or_none)
        arrow = pa.Table.from_pandas(table, preserve_index=False)
        arrow = arrow.replace_schema_metadata(
            {**(arrow.schema.metadata or {}), TABLE_ROW_FILES: json.dumps(files).encode()}
        )
        buffer = io.BytesIO()
        pq.write_table(arrow, buffer, write_page_checksum=True)
        data = buffer.getvalue()
        checksum = f"{_sha256(data)}  {TABLE}\n".encode()
        # A crash between the two renames leaves a pair that does not match: the table is
        # then bypassed (its rows are all kept) until the next compact.
        _atomic_write(root / TABLE, lambda f: f.write(data))
        _atomic_write(root / TABLE_SHA256, lambda f: f.write(checksum))

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

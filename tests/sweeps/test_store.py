"""`sims.store`: round trip, hashing, atomicity under SIGKILL, concurrent writers, damage."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from weakspots.sims.store import (
    DamagedResultWarning,
    StoreError,
    compact,
    completed_hashes,
    config_hash,
    has_run,
    load,
    load_trajectory,
    write_run,
)

REPO = Path(__file__).resolve().parents[2]


def run_config(i: int) -> dict:
    return {"s": 4, "N": 16, "lr": 0.05, "seed": i, "operator": "softmax_pool"}


def run_metrics(i: int) -> dict:
    return {
        "mean_accuracy": i / 100,
        "final_loss": float(i),
        "phase_accuracy": [0.5, 0.25 + i / 1000, 1.0, 0.0],
    }


def run_trajectory(i: int) -> dict:
    return {"loss": np.linspace(1.0, 0.0, 7) * i, "alpha": np.full((7, 4), float(i))}


# ----------------------------------------------------------------------------- round trip


def test_round_trip(tmp_path):
    hashes = [write_run(tmp_path, run_config(i), run_metrics(i), run_trajectory(i)) for i in (3, 1)]
    odd = {**run_config(2), "gain": 2.0, "learn_gain": True, "note": None}
    extra = write_run(tmp_path, odd, {"final_loss": 0.5, "tag": 3})
    table = load(tmp_path)

    assert list(table["hash"]) == sorted([*hashes, extra])
    assert table["hash"].is_unique
    row = table.set_index("hash").loc[hashes[0]]
    assert row["seed"] == 3 and row["operator"] == "softmax_pool" and row["lr"] == 0.05
    assert row["mean_accuracy"] == 0.03 and row["final_loss"] == 3.0
    assert [row[f"acc_{j}"] for j in range(4)] == [0.5, 0.253, 1.0, 0.0]
    assert list(row["phase_accuracy"]) == [0.5, 0.253, 1.0, 0.0]
    assert np.isnan(row["gain"])
    assert table.set_index("hash").loc[extra, "gain"] == 2.0

    for i, h in zip((3, 1), hashes, strict=True):
        assert h == config_hash(run_config(i))
        assert has_run(tmp_path, h)
        traj = load_trajectory(tmp_path, h)
        assert traj.keys() == {"loss", "alpha"}
        for name, want in run_trajectory(i).items():
            np.testing.assert_array_equal(traj[name], want)
    assert completed_hashes(tmp_path) == {*hashes, extra}
    assert not has_run(tmp_path, config_hash(run_config(99)))
    with pytest.raises(KeyError):
        load_trajectory(tmp_path, extra)  # stored without a trajectory

    # Ragged keys and mixed-type columns survive compaction unchanged.
    compact(tmp_path)
    pd.testing.assert_frame_equal(load(tmp_path), table)


def test_compacted_and_loose_rows_merge_without_duplicates(tmp_path):
    for i in range(4):
        write_run(tmp_path, run_config(i), run_metrics(i), run_trajectory(i))
    before = load(tmp_path)
    assert compact(tmp_path) == 4
    assert len(list((tmp_path / "runs").glob("*.json"))) == 4  # rows stay the commit point
    pd.testing.assert_frame_equal(load(tmp_path), before)
    assert has_run(tmp_path, before["hash"][0])
    assert pd.read_parquet(tmp_path / "table.parquet")["seed"].tolist() == before["seed"].tolist()

    # A rerun of a compacted config (newer, loose) wins over the table; a new run adds a row.
    rerun = write_run(tmp_path, run_config(2), {**run_metrics(2), "final_loss": -1.0})
    write_run(tmp_path, run_config(7), run_metrics(7))
    table = load(tmp_path)
    assert len(table) == 5 and table["hash"].is_unique
    assert table.set_index("hash").loc[rerun, "final_loss"] == -1.0
    assert compact(tmp_path) == 5
    assert load(tmp_path).set_index("hash").loc[rerun, "final_loss"] == -1.0


def test_empty_and_missing_store(tmp_path):
    assert completed_hashes(tmp_path / "nowhere") == set()
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nowhere")
    assert load(tmp_path).empty


def test_bad_names_and_hashes_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="seed"):
        write_run(tmp_path, {"seed": 1}, {"seed": 2.0})
    with pytest.raises(ValueError, match="acc_0"):
        write_run(tmp_path, {"seed": 1}, {"acc_0": 2.0})
    with pytest.raises(TypeError, match="config"):
        write_run(tmp_path, {"seed": [1, 2]}, {})
    with pytest.raises(ValueError, match="hash"):
        load_trajectory(tmp_path, "../../etc/passwd")


# ----------------------------------------------------------------------------- hashing


def test_hash_is_stable_and_ignores_key_order():
    config = {"s": 4, "lr": 0.1, "operator": "mean_pool", "learn_gain": True, "note": None}
    # Pinned: a change here orphans every existing store (resume would rerun everything).
    assert config_hash(config) == "244190b300182cdf"
    assert config_hash(dict(reversed(list(config.items())))) == config_hash(config)
    assert config_hash({**config, "s": np.int64(4), "lr": np.float64(0.1)}) == config_hash(config)
    assert config_hash({**config, "lr": 0.1 + 1e-18}) == config_hash(config)  # same float
    assert config_hash({**config, "lr": 0.1000000000000001}) != config_hash(config)
    assert config_hash({**config, "s": 4.0}) != config_hash(config)  # types are kept
    assert len(config_hash(config)) == 16


# ----------------------------------------------------------------------------- processes

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import numpy as np
    from weakspots.sims.store import compact, write_run

    store, first, last, go, compact_at = sys.argv[1:]
    first, last, compact_at = int(first), int(last), int(compact_at)
    print("ready", flush=True)
    while go != "-" and not Path(go).exists():
        time.sleep(0.001)
    for i in range(first, last):
        config = {"seed": i, "lr": 0.1}
        trajectory = {"loss": np.full(20_000, float(i)), "step": np.arange(i, i + 5_000)}
        write_run(store, config, {"final_loss": float(i), "phase_accuracy": [i, -i]}, trajectory)
        if i == compact_at:
            compact(store)
    """
)


def start_writer(store, first, last, go="-", compact_at=-1):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-c", WRITER, str(store), str(first), str(last), go, str(compact_at)]
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def check_every_row_is_complete(store):
    table = load(store)  # raises if any row is damaged
    assert table["hash"].is_unique
    for h, seed, loss in zip(table["hash"], table["seed"], table["final_loss"], strict=True):
        assert loss == seed and h == config_hash({"seed": int(seed), "lr": 0.1})
        traj = load_trajectory(store, h)
        np.testing.assert_array_equal(traj["loss"], np.full(20_000, float(seed)))
        np.testing.assert_array_equal(traj["step"], np.arange(seed, seed + 5_000))
    return table


def test_sigkill_at_random_times_leaves_complete_runs_or_nothing(tmp_path):
    rng = random.Random(0)
    for k in range(2):
        proc = start_writer(tmp_path, first=k * 100_000, last=(k + 1) * 100_000)
        time.sleep(rng.uniform(0.1, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        assert proc.returncode == -signal.SIGKILL
        check_every_row_is_complete(tmp_path)
    assert len(completed_hashes(tmp_path)) > 0


# Run in the test (to count writes) and in each crashing child (sims.store's `open` swapped).
TORN_WRITES = textwrap.dedent(
    """
    import os, signal

    class TornWrites:
        # The `crash_at`-th write (counting all files) is cut in half, then the process
        # SIGKILLs itself, as if it died mid-write. `crash_at=0` only counts writes.
        calls = 0
        crash_at = 0

        def __init__(self, file):
            self._file = file

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._file.close()

        def __getattr__(self, name):
            return getattr(self._file, name)

        def write(self, data):
            TornWrites.calls += 1
            if TornWrites.calls == TornWrites.crash_at:
                view = memoryview(data).cast("B")
                self._file.write(view[: len(view) // 2])
                self._file.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return self._file.write(data)

    def torn_open(path, mode="r", *args, **kwargs):
        file = open(path, mode, *args, **kwargs)
        return TornWrites(file) if "w" in mode else file
    """
)

TORN_WRITER = TORN_WRITES + textwrap.dedent(
    """
    import sys
    import numpy as np
    import weakspots.sims.store as store_module

    TornWrites.crash_at = int(sys.argv[2])
    store_module.open = torn_open  # a module global shadows the builtin inside the store module
    store_module.write_run(sys.argv[1], {"seed": 1}, {"loss": 1.0}, {"x": np.arange(1000.0)})
    """
)


def test_sigkill_inside_any_write_leaves_the_run_complete_or_absent(tmp_path, monkeypatch):
    import weakspots.sims.store as store_module

    # Count the writes one run makes, then crash fresh processes inside several of them.
    torn: dict = {}
    exec(TORN_WRITES, torn)
    monkeypatch.setattr(store_module, "open", torn["torn_open"], raising=False)
    write_run(tmp_path / "count", {"seed": 1}, {"loss": 1.0}, {"x": np.arange(1000.0)})
    n_writes = torn["TornWrites"].calls
    assert n_writes >= 2
    monkeypatch.undo()

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = {}
    for k in sorted({1, n_writes // 2, n_writes}):
        store = tmp_path / f"crash{k}"
        write_run(store, {"seed": 0}, {"loss": 0.0}, {"x": np.arange(1000.0)})  # earlier run
        args = [sys.executable, "-c", TORN_WRITER, str(store), str(k)]
        procs[k] = subprocess.Popen(args, cwd=REPO, env=env)
    for k, proc in procs.items():
        assert proc.wait(timeout=60) == -signal.SIGKILL, f"no crash at write {k}"
        store = tmp_path / f"crash{k}"
        table = load(store)  # raises on a torn row
        assert 0 in set(table["seed"]) and set(table["seed"]) <= {0, 1}
        for seed, loss, h in zip(table["seed"], table["loss"], table["hash"], strict=True):
            assert loss == seed and h == config_hash({"seed": int(seed)})
            np.testing.assert_array_equal(load_trajectory(store, h)["x"], np.arange(1000.0))


def test_two_concurrent_writers_never_corrupt_the_store(tmp_path):
    go = tmp_path / "go"
    store = tmp_path / "store"
    writers = [
        start_writer(store, 0, 60, go=str(go), compact_at=40),
        start_writer(store, 30, 90, go=str(go), compact_at=70),
    ]
    go.touch()
    for proc in writers:
        assert proc.wait(timeout=60) == 0
        proc.stdout.close()
    table = check_every_row_is_complete(store)
    assert sorted(table["seed"]) == list(range(90))
    assert set(table["hash"]) == completed_hashes(store)
    assert list(table["acc_1"]) == [-s for s in table["seed"]]


# ----------------------------------------------------------------------------- damage


def test_damaged_row_names_the_file_and_the_rest_stays_readable(tmp_path):
    hashes = [
        write_run(tmp_path, run_config(i), run_metrics(i), run_trajectory(i)) for i in range(3)
    ]
    damaged = tmp_path / "runs" / f"{hashes[1]}.json"
    damaged.write_bytes(damaged.read_bytes()[:40])  # truncated

    with pytest.raises(StoreError, match=f"damaged result file {damaged}"):
        load(tmp_path)
    assert set(load(tmp_path, on_damaged="skip")["hash"]) == {hashes[0], hashes[2]}
    with pytest.warns(DamagedResultWarning, match=str(damaged)):
        assert len(load(tmp_path, on_damaged="warn")) == 2
    assert completed_hashes(tmp_path) == {hashes[0], hashes[2]}  # resume reruns it
    assert not has_run(tmp_path, hashes[1])
    with pytest.raises(StoreError, match=str(damaged)):
        compact(tmp_path)


def test_row_edited_to_disagree_with_its_hash_is_damaged(tmp_path):
    h = write_run(tmp_path, run_config(0), run_metrics(0))
    path = tmp_path / "runs" / f"{h}.json"
    path.write_text(path.read_text().replace('"seed": 0', '"seed": 5'))
    with pytest.raises(StoreError, match=f"damaged result file {path}.*does not match"):
        load(tmp_path)


def test_damaged_table_and_trajectory_name_their_files(tmp_path):
    h = write_run(tmp_path, run_config(0), run_metrics(0), run_trajectory(0))
    compact(tmp_path)
    loose = write_run(tmp_path, run_config(1), run_metrics(1))
    table = tmp_path / "table.parquet"
    table.write_bytes(b"garbage" * 10)
    with pytest.warns(DamagedResultWarning, match=f"damaged result file {table}.*bypassed"):
        assert set(load(tmp_path)["hash"]) == {h, loose}

    traj = tmp_path / "traj" / f"{h}.npz"
    traj.write_bytes(traj.read_bytes()[:100])
    with pytest.raises(StoreError, match=f"damaged result file {traj}"):
        load_trajectory(tmp_path, h)


def test_a_table_written_before_rows_were_kept_is_read_and_its_damage_raises(tmp_path):
    # A store compacted by the first format deleted its rows: the table is their only copy.
    hashes = {write_run(tmp_path, run_config(i), run_metrics(i)) for i in range(3)}
    compact(tmp_path)
    for path in (tmp_path / "runs").glob("*.json"):
        path.unlink()
    assert set(load(tmp_path)["hash"]) == hashes
    table = tmp_path / "table.parquet"
    table.write_bytes(table.read_bytes()[:200])
    with pytest.raises(StoreError, match=f"damaged result file {table}"):
        load(tmp_path)


# ----------------------------------------------------------------------------- damage, counted

RUNS = 16


def damage(path: Path, how: str) -> None:
    """Damage one file as a disk or a careless user would."""
    data = path.read_bytes()
    middle = len(data) // 2
    if how == "truncated":
        path.write_bytes(data[:middle])
    elif how == "overwritten":  # 21 bytes in the middle flipped, length and name unchanged
        flipped = bytes(b ^ 0x5A for b in data[middle : middle + 21])
        path.write_bytes(data[:middle] + flipped + data[middle + 21 :])
    elif how == "emptied":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes(random.Random(0).randrange(256) for _ in range(len(data))))
    else:
        raise AssertionError(how)


def write_runs(store: Path, trajectories: bool = True) -> set[str]:
    return {
        write_run(store, run_config(i), run_metrics(i), run_trajectory(i) if trajectories else None)
        for i in range(RUNS)
    }


def counted(expected: set[str], found: list[str]) -> dict:
    """Runs expected, found, duplicated and lost."""
    return {
        "expected": len(expected),
        "found": len(set(found) & expected),
        "duplicated": len(found) - len(set(found)),
        "lost": len(expected - set(found)),
    }


INTACT = {"expected": RUNS, "found": RUNS, "duplicated": 0, "lost": 0}
DAMAGE = ["truncated", "overwritten", "emptied", "garbage"]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_table_is_named_bypassed_and_rebuilt_with_nothing_lost(tmp_path, how):
    expected = write_runs(tmp_path)
    assert compact(tmp_path) == RUNS
    table = tmp_path / "table.parquet"
    damage(table, how)

    with pytest.warns(DamagedResultWarning, match=f"damaged result file {table}") as caught:
        found = list(load(tmp_path)["hash"])
        done = completed_hashes(tmp_path)
        assert compact(tmp_path) == RUNS  # recovers: rebuilt from the rows
    assert len(caught) == 2  # named by load and by compact (completed_hashes is silent)
    assert counted(expected, found) == INTACT
    assert done == expected  # --resume would rerun nothing
    assert counted(expected, list(load(tmp_path)["hash"])) == INTACT  # no warning now
    assert pd.read_parquet(table)["hash"].tolist() == sorted(expected)


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_row_is_replaced_by_its_compacted_copy(tmp_path, how):
    expected = write_runs(tmp_path)
    compact(tmp_path)
    row = tmp_path / "runs" / f"{sorted(expected)[5]}.json"
    damage(row, how)
    later = row.stat().st_mtime_ns + 10**9  # damaged a second after compaction, not in its tick
    os.utime(row, ns=(later, later))
    with pytest.warns(DamagedResultWarning, match=f"damaged result file {row}.*compacted"):
        table = load(tmp_path)
    assert counted(expected, list(table["hash"])) == INTACT
    i = next(i for i in range(RUNS) if config_hash(run_config(i)) == row.stem)
    assert table.set_index("hash").loc[row.stem, "final_loss"] == float(i)
    assert completed_hashes(tmp_path) == expected


@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_row_with_no_copy_counts_as_not_done(tmp_path, how):
    expected = write_runs(tmp_path)
    victim = sorted(expected)[7]
    damage(tmp_path / "runs" / f"{victim}.json", how)
    with pytest.raises(StoreError, match=victim):
        load(tmp_path)
    assert completed_hashes(tmp_path) == expected - {victim}  # --resume reruns it
    i = next(i for i in range(RUNS) if config_hash(run_config(i)) == victim)
    write_run(tmp_path, run_config(i), run_metrics(i), run_trajectory(i))  # the rerun
    assert counted(expected, list(load(tmp_path)["hash"])) == INTACT


@pytest.mark.parametrize("compacted", [False, True])
@pytest.mark.parametrize("how", DAMAGE)
def test_a_run_whose_trajectory_is_damaged_counts_as_not_done(tmp_path, how, compacted):
    expected = write_runs(tmp_path)
    if compacted:
        compact(tmp_path)
    victim = sorted(expected)[3]
    traj = tmp_path / "traj" / f"{victim}.npz"
    damage(traj, how)

    assert counted(expected, list(load(tmp_path)["hash"])) == INTACT  # its row is intact
    assert completed_hashes(tmp_path) == expected - {victim}  # but --resume reruns it
    assert not has_run(tmp_path, victim)
    with pytest.raises(StoreError, match=f"damaged result file {traj}"):
        load_trajectory(tmp_path, victim)
    i = next(i for i in range(RUNS) if config_hash(run_config(i)) == victim)
    write_run(tmp_path, run_config(i), run_metrics(i), run_trajectory(i))  # the rerun
    assert completed_hashes(tmp_path) == expected
    np.testing.assert_array_equal(load_trajectory(tmp_path, victim)["alpha"], np.full((7, 4), i))


def test_rows_unchanged_since_compaction_are_read_from_the_table(tmp_path, monkeypatch):
    import weakspots.sims.store as store_module

    expected = write_runs(tmp_path, trajectories=False)
    compact(tmp_path)
    read = []
    parse = store_module._parse_row
    monkeypatch.setattr(store_module, "_parse_row", lambda *a: read.append(a[1]) or parse(*a))
    assert counted(expected, list(load(tmp_path)["hash"])) == INTACT
    assert read == [f"{tmp_path / 'table.parquet'} (row {i})" for i in range(RUNS)]
    read.clear()
    new = write_run(tmp_path, run_config(99), run_metrics(99))  # written after compaction
    assert len(load(tmp_path)) == RUNS + 1
    assert read[RUNS:] == [str(tmp_path / "runs" / f"{new}.json")]


def test_prepare_refuses_a_store_it_cannot_write(tmp_path):
    from weakspots.sims.store import prepare

    a_file = tmp_path / "file"
    a_file.write_text("not a store")
    with pytest.raises(StoreError, match="is not a directory"):
        prepare(a_file)
    with pytest.raises(StoreError, match="cannot write the store"):
        prepare(a_file / "below")
    assert prepare(tmp_path / "new" / "store").is_dir()
    assert (tmp_path / "new" / "store" / "runs").is_dir()
    assert not list((tmp_path / "new" / "store").rglob(".*.tmp"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_prepare_refuses_a_read_only_store(tmp_path):
    from weakspots.sims.store import prepare

    (tmp_path / "runs").mkdir()
    (tmp_path / "runs").chmod(0o555)
    try:
        with pytest.raises(StoreError, match="cannot write the store"):
            prepare(tmp_path)
    finally:
        (tmp_path / "runs").chmod(0o755)

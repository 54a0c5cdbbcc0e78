"""`weakspots sweep` end to end, in subprocesses: kill and resume, 4 devices, two slices.

Each check compares two independently produced stores: a reference sweep run once,
uninterrupted, on one device, against a killed-then-resumed one, a 4-device one, and
two `--slice` processes writing one store at once. The subprocesses share a persistent
compilation cache so that only the first compiles.
"""

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest
from interruptible import interruptible

from weakspots.cli import main
from weakspots.sims import store
from weakspots.sims import sweep as sweep_lib
from weakspots.sims.progress import Progress

SPEC = """\
kind = "train"
[fixed]
stride = 4
chunks = 8
dim = 8
steps = 20
eval_every = 10
eval_samples = 64
batch = 32
lr = 0.5
[grid]
gain = [8, 16]
seed = [0, 1, 2, 3]
"""
RUNS = 8
TIMING = ["wall_seconds", "written_ns"]  # when and how fast, not what: left out of equality


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_sweep")
    spec = root / "spec.toml"
    spec.write_text(SPEC)
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "JAX_COMPILATION_CACHE_DIR": str(root / "jax_cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }
    env.pop("XLA_FLAGS", None)
    reference = root / "reference"
    done = sweep(spec, reference, env=env)
    assert done.returncode == 0, done.stderr
    return root, spec, env, _table(reference)


def _command(spec, store_dir, *extra):
    return [sys.executable, "-m", "weakspots", "sweep", str(spec), "--store", str(store_dir),
            "--runs-per-device", "1", *extra]  # fmt: skip


def sweep(spec, store_dir, *extra, env):
    return subprocess.run(
        _command(spec, store_dir, *extra), env=env, capture_output=True, text=True, timeout=300
    )


def _table(store_dir) -> pd.DataFrame:
    table = store.load(store_dir).drop(columns=TIMING).sort_values("hash")
    return table.reset_index(drop=True)


def test_unknown_key_exits_2_naming_it(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text("[grid]\nstrides = [4, 8]\n")
    done = subprocess.run(
        [sys.executable, "-m", "weakspots", "sweep", str(spec), "--store", str(tmp_path / "s")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "'strides'" in done.stderr and "stride, chunks, dim" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_reference_has_every_run_once(setup):
    _, _, _, reference = setup
    assert len(reference) == RUNS and reference["hash"].is_unique
    for column in ("mean_accuracy", "delta_max", "psc", "final_loss", "acc_3", "kind", "lr"):
        assert column in reference.columns
    assert np.isfinite(reference["final_loss"]).all()


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(setup, tmp_path):
    root, spec, env, reference = setup
    rng = np.random.default_rng(0)
    killed = tmp_path / "killed"
    for attempt in range(2):  # kill twice, at random moments after some rows exist
        process = subprocess.Popen(
            _command(spec, killed, "--resume", "--quiet"),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        runs = killed / "runs"
        while time.monotonic() < deadline and process.poll() is None:
            if runs.is_dir() and len(list(runs.glob("*.json"))) > attempt * 3:
                break
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.2))
        process.send_signal(signal.SIGKILL)
        process.wait()
    partial = len(store.completed_hashes(killed))
    done = sweep(spec, killed, "--resume", env=env)
    assert done.returncode == 0, done.stderr
    assert f"{partial} already stored" in done.stderr
    pd.testing.assert_frame_equal(_table(killed), reference)


@pytest.mark.slow
def test_four_devices_equal_one_and_hold_the_runs(setup, tmp_path):
    root, spec, env, reference = setup
    script = textwrap.dedent(
        f"""
        import json, jax, numpy as np
        from weakspots import idealized
        from weakspots.cli import main
        from weakspots.sims import sweep
        from weakspots.sims.toy.train import Hyper, run_batch
        assert main(["sweep", {str(spec)!r}, "--store", {str(tmp_path / "four")!r},
                     "--runs-per-device", "1", "--quiet"]) == 0
        runs = sweep.load_spec({str(spec)!r}).runs()[:4]
        mesh = sweep.run_mesh()
        _, models, _ = run_batch(runs[0].config.static, Hyper.stack([r.config for r in runs]),
                                 mesh=mesh)
        leaf = models.compressor.logits if hasattr(models.compressor, "logits") else \
            jax.tree.leaves(models)[0]
        shards = [(s.device.id, s.data.shape[0]) for s in leaf.addressable_shards]
        print(json.dumps({{"devices": len(jax.devices()), "mesh": mesh.size, "shards": shards}}))
        """
    )
    four_env = {**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=four_env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    placed = json.loads(done.stdout.strip().splitlines()[-1])
    assert placed["devices"] == placed["mesh"] == 4
    assert sorted(placed["shards"]) == [[0, 1], [1, 1], [2, 1], [3, 1]]  # one run per device
    four = _table(tmp_path / "four")
    assert list(four["hash"]) == list(reference["hash"])
    numbers = [c for c in reference.columns if reference[c].dtype.kind == "f"]
    assert "final_loss" in numbers and "acc_0" in numbers
    np.testing.assert_allclose(four[numbers], reference[numbers], rtol=0, atol=1e-5)


def test_two_slices_into_one_store_equal_one_process(setup, tmp_path):
    root, spec, env, reference = setup
    shared = tmp_path / "sliced"
    processes = [
        subprocess.Popen(
            _command(spec, shared, "--slice", f"{i}/2", "--quiet"),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    pd.testing.assert_frame_equal(_table(shared), reference)


def test_dry_run_prints_the_count_and_buckets(tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("gain = [8, 16]", 'operator = ["softmax_pool", "mean_pool"]'))
    assert main(["sweep", str(spec), "--store", str(tmp_path / "s"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "8 runs in 2 bucket(s) (one compiled program each)"
    assert lines[1].split() == ["bucket", "0:", "4", "runs", "operator=softmax_pool"]
    assert lines[2].split() == ["bucket", "1:", "4", "runs", "operator=mean_pool"]
    assert lines[4].split() == ["hash", "operator", "seed"]  # the keys that vary, no dicts
    assert len(lines) == 6 + RUNS
    assert not (tmp_path / "s").exists()


def test_ctrl_c_is_one_line_exit_130_and_counts_the_stored_runs(setup, tmp_path):
    """SIGINT mid-sweep: no traceback, exit 130, `stored N of M runs`, N as in the store."""
    root, _, env, _ = setup
    spec = tmp_path / "spec.toml"
    # 24 runs of the reference's program (seed is no part of it): compiled already, in the cache
    spec.write_text(SPEC.replace("seed = [0, 1, 2, 3]", f"seed = {list(range(12))}"))
    target = tmp_path / "store"
    process = subprocess.Popen(
        interruptible(_command(spec, target, "--quiet")), env=env, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if (target / "runs").is_dir() and any((target / "runs").glob("*.json")):
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    stored = len(store.completed_hashes(target))
    assert process.returncode == 130, err
    assert err == f"weakspots sweep: interrupted: stored {stored} of 24 runs; rerun with --resume\n"
    assert 1 <= stored < 24


def test_resume_progress_counts_stored_runs(tmp_path, monkeypatch):
    """The progress of a resumed sweep starts at the stored runs and ends at M/M."""
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("gain = [8, 16]", 'operator = ["softmax_pool", "mean_pool"]'))
    runs = sweep_lib.load_spec(spec).runs()
    trained = []

    def fake_batch(batch, mesh, padded):  # no training: the hooks are what is tested
        trained.extend(batch)
        return [({"mean_accuracy": 0.5}, {"loss": np.zeros(3)}) for _ in batch]

    monkeypatch.setitem(sweep_lib.EXECUTE, "train", fake_batch)
    target = tmp_path / "store"
    sweep_lib.run_sweep(runs[::2], target, runs_per_device=1)
    out = io.StringIO()
    progress = Progress("sweep", "runs", stream=out, every_seconds=0.0)
    with progress:
        report = sweep_lib.run_sweep(
            runs, target, resume=True, runs_per_device=1, progress=progress
        )
    lines = out.getvalue().splitlines()
    assert report.skipped == RUNS // 2 and len(trained) == RUNS
    assert lines[0].startswith(f"sweep: {RUNS // 2}/{RUNS} runs (50%)")
    assert lines[-1].startswith(f"sweep: {RUNS}/{RUNS} runs (100%)") and lines[-1].endswith("done")
    # two buckets (operators): each one's first batch is the compile, left out of the rate
    assert progress._warm_count == 2 and progress._clean_units == RUNS // 2 - 2


def test_a_damaged_table_and_trajectory_cost_one_rerun_and_lose_nothing(setup, tmp_path):
    # The reference store, compacted, then its table overwritten (21 bytes in the middle) and
    # one run's trajectory truncated: --resume reruns that run alone; nothing is lost.
    root, spec, env, reference = setup
    damaged = tmp_path / "damaged"
    shutil.copytree(root / "reference", damaged)
    store.compact(damaged)
    table = damaged / "table.parquet"
    data = table.read_bytes()
    middle = len(data) // 2
    table.write_bytes(data[:middle] + bytes(b ^ 0x5A for b in data[middle : middle + 21])
                      + data[middle + 21 :])  # fmt: skip
    victim = sorted(reference["hash"])[2]
    trajectory = damaged / "traj" / f"{victim}.npz"
    trajectory.write_bytes(trajectory.read_bytes()[:200])

    done = sweep(spec, damaged, "--resume", env=env)
    assert done.returncode == 0, done.stderr
    assert f"{RUNS - 1} already stored" in done.stderr  # only the damaged trajectory reran
    with pytest.warns(store.DamagedResultWarning, match="table.parquet.*bypassed"):
        found = list(store.load(damaged)["hash"])
    expected = set(reference["hash"])
    counts = {"expected": len(expected), "found": len(set(found) & expected),
              "duplicated": len(found) - len(set(found)), "lost": len(expected - set(found))}  # fmt: skip
    assert counts == {"expected": RUNS, "found": RUNS, "duplicated": 0, "lost": 0}
    assert store.completed_hashes(damaged) == expected
    assert store.load_trajectory(damaged, victim)["step_loss"].shape == (20,)
    with pytest.warns(store.DamagedResultWarning, match="table.parquet.*bypassed"):
        store.compact(damaged)  # rebuilt: read without a warning now
    pd.testing.assert_frame_equal(_table(damaged), reference)


@pytest.mark.parametrize(
    ("case", "flag"),
    [
        ("binary spec", "not valid TOML"),
        ("--memory-gb nan", "--memory-gb"),
        ("store is a file", "--store"),
        ("store below a file", "--store"),
        ("learn_gain = 1", "learn_gain"),
    ],
)
def test_bad_sweep_input_exits_2_with_one_line_before_any_run(case, flag, tmp_path, capsys):
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC)
    target = tmp_path / "store"
    extra = []
    if case == "binary spec":
        spec.write_bytes(bytes(range(256)) * 4)
    elif case == "--memory-gb nan":
        extra = ["--memory-gb", "nan"]
    elif case == "store is a file":
        target.write_text("a file")
    elif case == "store below a file":
        (tmp_path / "file").write_text("a file")
        target = tmp_path / "file" / "store"
    else:
        spec.write_text(SPEC.replace("[grid]", "learn_gain = 1\n[grid]"))
    code = main(["sweep", str(spec), "--store", str(target), "--quiet", *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and flag in err[0], err
    assert not (tmp_path / "store" / "runs").is_dir() or not list(
        (tmp_path / "store" / "runs").iterdir()
    )  # nothing trained


@pytest.mark.slow
def test_a_reader_that_stops_early_ends_the_verb_quietly(tmp_path):
    """`weakspots sweep --dry-run | head`: exit 141 (SIGPIPE's code), nothing on stderr."""
    spec = tmp_path / "spec.toml"
    # one line per run: several pipe buffers of output
    spec.write_text(SPEC.replace("seed = [0, 1, 2, 3]", f"seed = {list(range(4000))}"))
    command = [sys.executable, "-m", "weakspots", "sweep", str(spec), "--store"]
    with subprocess.Popen(
        [*command, str(tmp_path / "s"), "--dry-run"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as process:
        process.stdout.read(100)
        process.stdout.close()
        err = process.stderr.read().decode()
        assert process.wait(timeout=120) == 141, err
    assert err == ""

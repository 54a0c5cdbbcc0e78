"""`weakspots sweep` end to end, in subprocesses: kill and resume, 4 devices, two slices.

Each check compares two independently produced stores: a reference sweep run once,
uninterrupted, on one device, against a killed-then-resumed one, a 4-device one, and
two `--slice` processes writing one store at once. The subprocesses share a persistent
compilation cache so that only the first compiles.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

from weakspots.sims import store

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


def test_four_devices_equal_one_and_hold_the_runs(setup, tmp_path):
    root, spec, env, reference = setup
    script = textwrap.dedent(
        f"""
        import json, jax, numpy as np
        from weakspots import idealized
        from weakspots.sims.cli import main
        from weakspots.sims import sweep
        from weakspots.sims.train import Hyper, run_batch
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

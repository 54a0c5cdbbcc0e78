"""Sweeps over several processes: jax.distributed on localhost, Slurm's environment simulated.

The two-process checks start real `weakspots sweep --distributed` processes on this
machine (a coordinator on 127.0.0.1 at a free port, CPU collectives over gloo, 2 host
devices each: one 4-device mesh) and compare their store with one made by a single
process on one device. Every wait is bounded: each subprocess has a deadline, and the
sweep's own `--distributed-timeout` ends a process whose peer never arrives.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pandas as pd
import pytest

from weakspots.cli import main
from weakspots.sims import store, sweep

TRAIN_SPEC = """\
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
seed = [0, 1, 2]
"""
FLOW_SPEC = """\
kind = "flow"
[fixed]
stride = 4
chunks = 64
init_scale = 0.01
t1 = 200.0
saves = 21
[grid]
gain = [8.0, 12.0, 16.0]
seed = [0, 1]
"""
RUNS = 6  # per spec; batches of 1 run per device: 2 batches of 3, each padded to 4
TIMING = ["wall_seconds", "written_ns"]  # when and how fast, not what
# docs/sweeps.md: a partitioned program may round differently in the last bits (float32
# training; the float64 flow is solved to rtol 1e-8 by an adaptive solver whose step
# sequence a last-bit difference can change).
TRAIN_ATOL = 1e-5
FLOW_ATOL = 1e-9
DEADLINE = 600  # seconds for any one subprocess: compiles on 2 shared cores


SLURM_PORTS = (
    65535 - 2**12 + 1,
    65535,
)  # jax's coordinator port under Slurm: 61440 + job id % 4096


def free_port(low: int | None = None, high: int | None = None) -> int:
    """A loopback port nobody listens on: any, or the first free one in [low, high]."""
    candidates = [0] if low is None else range(low, high + 1)
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port in [{low}, {high}]")


def _env(devices: int, port: int | None = None, **extra) -> dict:
    """A subprocess's environment: CPU, `devices` host devices, coordinator bound to loopback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "JAX_COORD"))}
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        **extra,
    )
    if port is not None:  # jax's coordinator would listen on every interface
        env["JAX_COORDINATOR_BIND_ADDRESS"] = f"127.0.0.1:{port}"
    return env


def _sweep_command(spec: Path, store_dir: Path, *extra) -> list[str]:
    return [sys.executable, "-m", "weakspots", "sweep", str(spec), "--store", str(store_dir),
            "--runs-per-device", "1", *extra]  # fmt: skip


def _together(commands_envs, deadline=DEADLINE) -> list[subprocess.CompletedProcess]:
    """Start every (command, env) at once; wait for all, killing any left at the deadline."""
    started = [
        subprocess.Popen(c, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c, e in commands_envs
    ]
    end, done = time.monotonic() + deadline, []
    try:
        for process in started:
            out, err = process.communicate(timeout=max(1.0, end - time.monotonic()))
            done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
    return done


def _table(store_dir: Path) -> pd.DataFrame:
    table = store.load(store_dir).drop(columns=TIMING).sort_values("hash")
    return table.reset_index(drop=True)


def _assert_same_runs(store_dir: Path, reference: Path, atol: float) -> float:
    """The same runs, each once, with the same numbers (to `atol`) and trajectories.

    Returns the largest difference found.
    """
    assert len(list((store_dir / "runs").glob("*.json"))) == RUNS  # one file per run
    assert not list(store_dir.rglob("*.tmp"))
    got, want = _table(store_dir), _table(reference)
    assert got["hash"].is_unique and list(got["hash"]) == list(want["hash"])
    numbers = [c for c in want.columns if want[c].dtype.kind == "f"]
    assert "final_loss" in numbers and "acc_0" in numbers
    np.testing.assert_allclose(got[numbers], want[numbers], rtol=0, atol=atol)
    other = [c for c in want.columns if c not in numbers and c != "diverged"]
    pd.testing.assert_frame_equal(got[other], want[other])
    largest = _largest_difference(got[numbers].to_numpy(), want[numbers].to_numpy())
    for run_hash in want["hash"]:
        a = store.load_trajectory(store_dir, run_hash)
        b = store.load_trajectory(reference, run_hash)
        assert a.keys() == b.keys()
        for name in b:
            np.testing.assert_allclose(a[name], b[name], rtol=0, atol=atol, err_msg=name)
            largest = max(largest, _largest_difference(a[name], b[name]))
    return largest


def _largest_difference(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    finite = np.isfinite(a) & np.isfinite(b)  # equal infinities (never specialised) aside
    return float(np.max(np.abs(a[finite] - b[finite]), initial=0.0))


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
    """Train sweep with an explicit coordinator; flow sweep with Slurm's variables simulated."""
    specs = {"train": TRAIN_SPEC, "flow": FLOW_SPEC}
    for kind, text in specs.items():
        (tmp_path / f"{kind}.toml").write_text(text)
    # One process, one device: the reference stores (both sweeps in one process each).
    references = _together(
        [
            (_sweep_command(tmp_path / f"{k}.toml", tmp_path / f"{k}_one", "--quiet"), _env(1))
            for k in specs
        ]
    )
    for done in references:
        assert done.returncode == 0, done.stderr

    # Train: two processes, 2 devices each, coordinator named on the command line.
    port = free_port()
    train = _together(
        [
            (
                _sweep_command(
                    tmp_path / "train.toml",
                    tmp_path / "train_two",
                    "--distributed",
                    "--coordinator",
                    f"127.0.0.1:{port}",
                    "--num-processes",
                    "2",
                    "--process-id",
                    str(i),
                ),  # fmt: skip
                _env(2, port),
            )
            for i in range(2)
        ]
    )
    # Flow: the same, but every setting detected from Slurm's variables (srun -n 2 on one
    # node): coordinator = the step's first node at port 61440 + job id % 4096.
    port = free_port(*SLURM_PORTS)
    slurm = {
        "SLURM_JOB_ID": str(port - SLURM_PORTS[0] + 2**12 * 7),
        "SLURM_STEP_NODELIST": "127.0.0.1",
        "SLURM_NTASKS": "2",
        "SLURM_STEP_NUM_NODES": "1",
    }
    flow = _together(
        [
            (
                _sweep_command(tmp_path / "flow.toml", tmp_path / "flow_two", "--distributed"),
                _env(2, port, **slurm, SLURM_PROCID=str(i), SLURM_LOCALID=str(i)),
            )
            for i in range(2)
        ]
    )
    for kind, processes in (("train", train), ("flow", flow)):
        for i, done in enumerate(processes):
            print(f"--- {kind} process {i} (exit {done.returncode}) stderr:\n{done.stderr}")
            assert done.returncode == 0, done.stderr
            summary = done.stderr.strip().splitlines()[-1]
            assert (
                f"over 4 device(s) in 2 processes; process {i} wrote {RUNS if i == 0 else 0}"
                in summary
            )
    for kind, atol in (("train", TRAIN_ATOL), ("flow", FLOW_ATOL)):
        largest = _assert_same_runs(tmp_path / f"{kind}_two", tmp_path / f"{kind}_one", atol)
        print(f"{kind}: {RUNS} runs, each once; largest difference from one process {largest:.2g}")


def test_two_processes_size_their_batches_and_a_lone_one_gives_up(tmp_path):
    """The default batch sizing under two processes; a coordinator left alone, at once.

    Three processes start together: two `--distributed` ones (2 devices each, no
    `--runs-per-device`, so each sizes its batches from its own devices' memory), and a
    third, process 0 of another two-process job whose peer never comes. The pair must store
    what one process on one device stores; the lone one must end in one line, in its timeout.
    """
    spec = tmp_path / "train.toml"
    spec.write_text(TRAIN_SPEC)
    ports = [free_port(), free_port()]

    def distributed(store_dir, port, i, *extra):
        return [sys.executable, "-m", "weakspots", "sweep", str(spec), "--store", str(store_dir),
                "--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
                "--process-id", str(i), *extra]  # fmt: skip

    def two_cpus(port):  # the devices as a user asks for them: JAX_NUM_CPU_DEVICES
        return {**_env(2, port), "XLA_FLAGS": "", "JAX_NUM_CPU_DEVICES": "2"}

    commands = [
        ([sys.executable, "-m", "weakspots", "sweep", str(spec), "--store",
          str(tmp_path / "one"), "--quiet"], _env(1)),  # fmt: skip
        *[(distributed(tmp_path / "two", ports[0], i), two_cpus(ports[0])) for i in (0, 1)],
        (distributed(tmp_path / "alone", ports[1], 0, "--distributed-timeout", "5"),
         two_cpus(ports[1])),  # fmt: skip
    ]
    start = time.monotonic()
    one, *two, alone = _together(commands, deadline=180)
    assert one.returncode == 0, one.stderr
    for i, done in enumerate(two):
        assert done.returncode == 0, done.stderr
        summary = done.stderr.strip().splitlines()[-1]
        wrote = RUNS if i == 0 else 0
        assert f"over 4 device(s) in 2 processes; process {i} wrote {wrote}" in summary
    _assert_same_runs(tmp_path / "two", tmp_path / "one", TRAIN_ATOL)
    assert alone.returncode == 1, alone.stderr
    lines = [line for line in alone.stderr.splitlines() if "weakspots sweep" in line]
    assert len(lines) == 1 and "not every process connected" in lines[0], alone.stderr
    assert "within 5s" in lines[0] and "--distributed-timeout" in lines[0]
    assert time.monotonic() - start < 180
    assert store.completed_hashes(tmp_path / "alone") == set()


@pytest.mark.slow  # two jax processes: about 15 s each on 2 loaded cores
def test_a_peer_that_never_arrives_ends_the_wait(tmp_path):
    """Process 0 without process 1, and process 1 without a coordinator: exit 1, one line."""
    spec = tmp_path / "train.toml"
    spec.write_text(TRAIN_SPEC)
    ports = [free_port(), free_port()]
    alone = [
        (
            _sweep_command(
                spec,
                tmp_path / f"store{i}",
                "--distributed",
                "--coordinator",
                f"127.0.0.1:{ports[i]}",
                "--num-processes",
                "2",
                "--process-id",
                str(i),
                "--distributed-timeout",
                "5",
            ),  # fmt: skip
            _env(1, ports[i]),
        )
        for i in range(2)
    ]
    start = time.monotonic()
    done = _together(alone, deadline=120)
    assert time.monotonic() - start < 90  # the timeout, not the deadline, ended them
    for process in done:
        assert process.returncode == 1, process.stderr
        lines = [line for line in process.stderr.splitlines() if "weakspots sweep" in line]
        assert len(lines) == 1, process.stderr
        assert "not every process connected" in lines[0] and "within 5s" in lines[0]
        assert "--distributed-timeout" in lines[0]
    # The store was prepared (checked writable) before the wait, but holds no run.
    assert not any((tmp_path / "store0" / "runs").iterdir())
    assert store.completed_hashes(tmp_path / "store0") == set()


@pytest.mark.slow  # two jax processes: about 15 s each on 2 loaded cores
def test_processes_that_plan_different_runs_stop(tmp_path):
    """Two processes given different slices: both stop before computing, naming the cause."""
    spec = tmp_path / "train.toml"
    spec.write_text(TRAIN_SPEC)
    port = free_port()
    done = _together(
        [
            (
                _sweep_command(
                    spec,
                    tmp_path / "store",
                    "--distributed",
                    "--coordinator",
                    f"127.0.0.1:{port}",
                    "--num-processes",
                    "2",
                    "--process-id",
                    str(i),
                    "--slice",
                    f"{i}/2",
                    "--distributed-timeout",
                    "30",
                ),  # fmt: skip
                _env(1, port),
            )
            for i in range(2)
        ],
        deadline=180,
    )
    for process in done:
        assert process.returncode != 0
    messages = "".join(p.stderr for p in done)
    assert "plan different runs" in messages
    assert not list((tmp_path / "store").glob("runs/*.json"))


# ----------------------------------------------------------------------------- Slurm


@pytest.mark.parametrize(
    ("env", "share"),
    [
        ({}, None),
        ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8"}, (3, 8)),
        (  # --array=4-11: ids 4..11, shares 0..7
            {"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_MAX": "11"},
            (2, 8),
        ),
        (  # --array=0-14:7 -> ids 0, 7, 14
            {
                "SLURM_ARRAY_TASK_ID": "14",
                "SLURM_ARRAY_TASK_MIN": "0",
                "SLURM_ARRAY_TASK_MAX": "14",
                "SLURM_ARRAY_TASK_STEP": "7",
                "SLURM_ARRAY_TASK_COUNT": "3",
            },
            (2, 3),
        ),
    ],
)
def test_slurm_array_gives_the_slice(env, share):
    assert sweep.slurm_array_slice(env) == share


@pytest.mark.parametrize("task", ["3", "7"])
def test_slurm_array_that_is_not_a_range_is_refused(task):
    listed = {  # --array=3,7: a rerun of two shares, not shares 0 and 1 of 2
        "SLURM_ARRAY_TASK_ID": task,
        "SLURM_ARRAY_TASK_MIN": "3",
        "SLURM_ARRAY_TASK_MAX": "7",
        "SLURM_ARRAY_TASK_COUNT": "2",
    }
    with pytest.raises(sweep.SpecError, match=f"--slice: Slurm array task {task}"):
        sweep.slurm_array_slice(listed)


def test_cli_slice_defaults_to_the_slurm_array_task(tmp_path, monkeypatch, capsys):
    spec = tmp_path / "train.toml"
    spec.write_text(TRAIN_SPEC)
    runs = sweep.load_spec(spec).runs()
    hashes = {r.hash for r in runs}

    def listed(*extra):
        assert main(["sweep", str(spec), "--store", str(tmp_path / "s"), "--dry-run", *extra]) == 0
        out = capsys.readouterr().out.splitlines()  # the dry run's table: a run's hash first
        return [line.split()[0] for line in out if line.split()[:1] and line.split()[0] in hashes]

    assert listed() == [r.hash for r in runs]  # no array: every run
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "1")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "4")
    assert listed() == [r.hash for r in runs[1::4]]
    assert listed("--slice", "0/2") == [r.hash for r in runs[0::2]]  # the flag wins
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "4")
    assert main(["sweep", str(spec), "--store", str(tmp_path / "s"), "--dry-run"]) == 2
    assert "--slice: Slurm array task 4" in capsys.readouterr().err


def test_slurm_step_environment_is_what_jax_detects(monkeypatch):
    """What `--distributed` reads under `srun` (jax's Slurm cluster detection, as documented)."""
    from jax._src import clusters

    monkeypatch.delenv("JAX_COORDINATOR_PORT", raising=False)
    for name, value in {
        "SLURM_JOB_ID": "1000",
        "SLURM_STEP_NODELIST": "gpu[017-020],gpu031",
        "SLURM_NTASKS": "8",
        "SLURM_PROCID": "5",
        "SLURM_LOCALID": "1",
        "SLURM_STEP_NUM_NODES": "5",
    }.items():
        monkeypatch.setenv(name, value)
    detected = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        None, None, None, None, None, 10
    )
    # coordinator: the step's first node, port 61440 + job id mod 4096
    assert detected == ("gpu017:62440", 8, 5, [1])


def test_timeout_comes_from_flag_env_or_default(monkeypatch):
    monkeypatch.delenv(sweep.TIMEOUT_ENV, raising=False)
    assert sweep.distributed_timeout() == sweep.DISTRIBUTED_TIMEOUT <= 120
    monkeypatch.setenv(sweep.TIMEOUT_ENV, "7.5")
    assert sweep.distributed_timeout() == 7.5
    assert sweep.distributed_timeout(3) == 3
    with pytest.raises(sweep.SpecError, match="--distributed-timeout"):
        sweep.distributed_timeout(0)


# ----------------------------------------------------------------------------- batch sizing


class _Accelerator:
    platform, process_index = "gpu", 0

    def memory_stats(self):
        return {"bytes_limit": 10 * 2**30, "bytes_in_use": 2 * 2**30}


def test_batches_are_sized_from_the_devices_memory():
    assert sweep.device_memory_bytes([_Accelerator()]) == 4 * 2**30  # half of 8 GiB free
    with open("/proc/meminfo") as f:  # a CPU reports no memory: half the host's, per device
        available = next(int(line.split()[1]) * 1024 for line in f if "MemAvailable" in line)
    cpu = jax.devices("cpu")[0]
    assert cpu.memory_stats() is None
    share = sweep.device_memory_bytes([cpu, cpu])
    assert share == pytest.approx(available / 4, rel=0.1)  # MemAvailable moves a little
    run = sweep.parse_spec({"fixed": {"stride": 4, "chunks": 8, "dim": 8}}).runs()[0]
    per_run = sweep._bytes_per_run(run)
    assert sweep.runs_that_fit(run, 10 * per_run, "gpu") == 10
    assert sweep.runs_that_fit(run, per_run // 2, "gpu") == 1
    assert sweep.runs_that_fit(run, 10**6 * per_run, "gpu") == sweep.MAX_RUNS_PER_DEVICE
    assert sweep.runs_that_fit(run, 10**6 * per_run, "cpu") == sweep.CPU_MAX_RUNS_PER_DEVICE

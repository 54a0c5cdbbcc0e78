"""Importing weakspots changes no jax setting, and its numbers do not depend on the user's.

The project computes its theory and flows in float64 and draws the trainer's random bits
as jax does with 64-bit types on: `idealized.precision` turns them on inside its own
functions. These tests run with the process's setting (off unless the user turns it on):
a fresh process imports every module and finds `jax.config` as it set it, and the results
of the public entry points, computed here with 64-bit types off, are bit for bit those of
a process that turns them on for itself (as `import weakspots.idealized` used to).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

pytestmark = pytest.mark.user_precision

IMPORT_ALL = """
import importlib, json, pkgutil
import jax
def config():
    return {k: repr(v) for k, v in jax.config.values.items()}
def changed(before):
    after = config()
    return {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
            if before.get(k) != after.get(k)}
report = {}
# the issue's one-liner: jax's defaults, then two packages
before = config()
import weakspots.idealized, weakspots.sims
report["one_liner"] = {"x64": jax.config.jax_enable_x64, "changed": changed(before)}
# settings away from jax's defaults, then every other module and the lazy API
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_default_matmul_precision", "highest")
before = config()
import weakspots
names = []
for package in ("idealized", "theory", "sims", "figures", "benchmarks", "examples"):
    module = importlib.import_module("weakspots." + package)
    names.append(module.__name__)
    for info in pkgutil.walk_packages(module.__path__, module.__name__ + "."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
            names.append(info.name)
for name in weakspots.__all__:
    getattr(weakspots, name)
report["everything"] = {"x64": jax.config.jax_enable_x64, "changed": changed(before),
                        "modules": len(names)}
print(json.dumps(report))
"""


def _python(code: str, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg", **env}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environ, timeout=300
    )


def test_importing_every_module_leaves_jax_config_as_the_user_set_it():
    """At jax's defaults 64-bit types stay off; set otherwise, every setting stays as set."""
    done = _python(IMPORT_ALL)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["one_liner"] == {"x64": False, "changed": {}}
    assert report["everything"]["x64"] is True and report["everything"]["changed"] == {}
    assert report["everything"]["modules"] > 50  # every package's modules were imported


def results() -> dict[str, np.ndarray]:
    """What the public entry points return for tiny inputs, as numpy arrays."""
    from weakspots import theory
    from weakspots.idealized.toy.config import FlowConfig, TrainConfig
    from weakspots.sims.toy import flow, train

    out = {}
    run = train.train(TrainConfig(stride=4, chunks=8, dim=8, steps=20, eval_every=10,
                                  eval_samples=64, batch=32, lr=0.5, seed=3))  # fmt: skip
    for name in ("pooling_weights", "gain", "loss", "phase_accuracy"):
        out[f"train_{name}"] = np.asarray(getattr(run.history, name))
    solved = flow.solve(FlowConfig(stride=4, chunks=64, gain=12.0, init_scale=0.01, t1=200.0,
                                   saves=11, seed=1))  # fmt: skip
    out["flow_weights"] = np.asarray(solved.history.pooling_weights)
    out["flow_loss"] = np.asarray(solved.history.loss)
    out["flow_t_star"] = np.asarray(solved.history.specialization_time)
    out["growth_rate"] = np.asarray(theory.growth_rate(8, np.array([20.0, 64.0]), 16.0))
    out["critical_chunks"] = np.asarray(theory.critical_chunks(16.0, 8))
    out["growth_rate_d"] = np.asarray(theory.growth_rate_finite_d(8, 64.0, 16.0, 64))
    out["profile"] = np.asarray(theory.phase_accuracy_profile(8, 64, 3, 64))
    sizes, probabilities, _ = theory.predicted_support_size(4, 64, 16.0, samples=8)
    out["support_sizes"], out["support_p"] = np.asarray(sizes), np.asarray(probabilities)
    return out


@pytest.mark.slow  # two processes train, solve and integrate: about 40 s on 2 loaded cores
def test_results_do_not_depend_on_the_users_setting(tmp_path):
    """64-bit types off here; a fresh process turns them on for itself: the same bits."""
    assert not jax.config.jax_enable_x64
    saved = tmp_path / "x64.npz"
    code = (
        "import sys, numpy as np, jax; jax.config.update('jax_enable_x64', True); "
        f"sys.path.insert(0, {str(Path(__file__).parent)!r}); import test_precision as t; "
        f"np.savez({str(saved)!r}, **t.results())"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    here = results()
    assert not jax.config.jax_enable_x64  # the entry points restored the setting
    with np.load(saved) as there:
        assert sorted(there.files) == sorted(here)
        for name in here:
            assert here[name].dtype == there[name].dtype, name
            np.testing.assert_array_equal(here[name], there[name], err_msg=name)
    assert here["flow_weights"].dtype == np.float64 and here["growth_rate"].dtype == np.float64
    assert here["train_loss"].dtype == np.float32  # the trainer's explicit float32

"""A pretraining run as the command line that makes it, and the machine that ran it, for the
study's recordings (`sweep`, `recipes`)."""

from __future__ import annotations

import os
from pathlib import Path

from weakspots.idealized.pretrain.config import PretrainConfig


def argv_of(chosen: PretrainConfig, out: str) -> list[str]:
    """`weakspots lm pretrain --out OUT` with a flag for every field of `chosen` that differs
    from the default, then `--json --quiet`."""
    default = PretrainConfig()
    argv = ["lm", "pretrain", "--out", out]
    for name, value in chosen.asdict().items():
        if value != getattr(default, name):
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            else:
                argv += [flag, str(value)]
    return argv + ["--json", "--quiet"]


def machine() -> str:
    """The accelerator (or CPU) jax runs on, in words: the CPU's model and cores, jax's and
    jaxlib's (XLA's) versions, and the load average when asked."""
    import jax  # the designs as command lines need no jax; only this report does
    import jaxlib

    device = jax.devices()[0]
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{device.platform}: {getattr(device, 'device_kind', '?')}; CPU {cpu} x "
        f"{os.cpu_count()} cores; jax {jax.__version__}, jaxlib (XLA) {jaxlib.__version__}; "
        f"load {load:.1f}"
    )

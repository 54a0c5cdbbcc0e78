"""A pretraining run as the command line that makes it, and the machine that ran it, for the
study's recordings (`sweep`, `recipes`)."""

from __future__ import annotations

import os

from weakspots.idealized.pretrain.config import PretrainConfig
from weakspots.sims.machine import describe


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
    """The device jax runs on and the machine (`sims.machine.describe`: the CPU's model, jax's
    and jaxlib's versions) in words, with its cores and the load average when asked."""
    import jax  # the designs as command lines need no jax; only this report does

    device = jax.devices()[0]
    facts = describe()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{device.platform}: {getattr(device, 'device_kind', '?')}; CPU {facts['cpu']} x "
        f"{os.cpu_count()} cores; jax {facts['jax']}, jaxlib (XLA) {facts['jaxlib (XLA)']}; "
        f"load {load:.1f}"
    )

"""The machine a recording was made on: the CPU, jax's and jaxlib's (XLA's) versions."""

from __future__ import annotations

import platform
from pathlib import Path


def describe() -> dict:
    """`cpu` (the model name /proc/cpuinfo gives, else the platform's), `jax`, `jaxlib (XLA)`,
    `python`: what decides whether a rerun gives the same numbers."""
    import jax  # a recording's machine only: the module imports without jax
    import jaxlib

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "jax": jax.__version__,
        "jaxlib (XLA)": jaxlib.__version__,
        "python": platform.python_version(),
    }

"""weakspots: periodic weak spots from chunked KV-cache compression, simulated and explained.

The packages live under this namespace: `weakspots.idealized` (the model studied),
`weakspots.theory` (closed forms), `weakspots.sims` (training, flows, sweeps, store),
`weakspots.figures`, `weakspots.probe` (phase scans of real models; `weakspots.probe(...)`
runs one) and, above them all, `weakspots.cli` (the command line). The names below are the public API; each is
imported on first use, so `import weakspots` stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

try:
    __version__ = importlib.metadata.version("weakspots")
except importlib.metadata.PackageNotFoundError:  # a source checkout that was never installed
    __version__ = "0+unknown"

# In a source checkout the subpackages are the repository's top-level folders (the wheel
# maps them under this package instead), so a checkout on sys.path imports as installed.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "idealized" / "__init__.py").is_file() and not (
    Path(__file__).resolve().parent / "idealized"
).is_dir():
    __path__.append(str(_CHECKOUT))

_API = {
    "TrainConfig": "weakspots.idealized.toy.config",
    "ConfigError": "weakspots.errors",
    "train": "weakspots.sims.toy.train",
    "train_many": "weakspots.sims.toy.train",
    "TrainResult": "weakspots.sims.toy.train",
    "FlowConfig": "weakspots.idealized.toy.config",
    "solve_many": "weakspots.sims.toy.flow",
    "FlowResult": "weakspots.sims.toy.flow",
    "FlowFailed": "weakspots.sims.toy.flow",
    "predictions": "weakspots.theory.predictions",
    "load_spec": "weakspots.sims.sweep",
    "run_sweep": "weakspots.sims.sweep",
    "load": "weakspots.sims.store",
    "load_trajectory": "weakspots.sims.store",
    "plot_store": "weakspots.figures.sweep_plot",
    "example": "weakspots.examples",
}
_PACKAGES = ("idealized", "theory", "sims", "figures", "probe")  # probe is callable: a scan

__all__ = sorted(_API) + list(_PACKAGES)


def __getattr__(name: str):
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
    elif name in _PACKAGES:
        value = importlib.import_module(f"weakspots.{name}")
    else:
        raise AttributeError(f"module 'weakspots' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

"""Example sweep and flow specs (TOML), shipped with the package: `example(name)` finds one.

`sweep_gain.toml` (6 gains across beta_c, the README's sweep), `sweep_tiny.toml`,
`flow_tiny.toml`; each says in its comments what it sweeps.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def names() -> list[str]:
    """The example specs' file names."""
    return sorted(p.name for p in resources.files(__name__).iterdir() if p.name.endswith(".toml"))


def example(name: str) -> Path:
    """The path of example spec `name` (`"sweep_gain.toml"`), wherever weakspots is installed."""
    found = resources.files(__name__) / name
    if not found.is_file():
        raise FileNotFoundError(f"no example spec {name!r}; there are {', '.join(names())}")
    return Path(str(found))

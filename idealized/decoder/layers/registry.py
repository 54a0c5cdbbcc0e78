"""The one list of decoder layer kinds: a new kind is one file and one `register` line.

Every consumer asks here instead of comparing names: the configs' validation
(`layer_kind_names`, the facts of `lookup(name)`), the model's blocks
(`idealized.decoder.model`), the FLOP count and reach (`sims.decoder.train`,
`sims.decoder.evaluate`), the edits and carry tests (`sims.decoder.edits`,
`sims.decoder.carry`) and the command line's help.
"""

from __future__ import annotations

from weakspots.errors import ConfigError
from weakspots.idealized.decoder.layers.base import AbstractLayerKind
from weakspots.idealized.decoder.layers.compressed import Compressed
from weakspots.idealized.decoder.layers.csa import CSA
from weakspots.idealized.decoder.layers.dense import Dense
from weakspots.idealized.decoder.layers.hca import HCA
from weakspots.idealized.decoder.layers.sliding import Sliding
from weakspots.idealized.decoder.layers.swa import SWA

_REGISTRY: dict[str, type[AbstractLayerKind]] = {}


def register(kind: type[AbstractLayerKind]) -> type[AbstractLayerKind]:
    """Add `kind` under `kind.name` (usable as a class decorator); returns it."""
    if kind.name in _REGISTRY:
        raise ValueError(f"layer kind {kind.name!r} is already registered")
    if not kind.name or "," in kind.name or kind.name != kind.name.strip():
        raise ValueError(f"a layer kind's name is one --layout item, got {kind.name!r}")
    _REGISTRY[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the layer kind registered as `name`."""
    del _REGISTRY[name]


def layer_kind_names(**facts) -> tuple[str, ...]:
    """Names in registration order, of kinds with the given class facts
    (e.g. `layer_kind_names(v4=True)`)."""
    return tuple(
        name
        for name, kind in _REGISTRY.items()
        if all(getattr(kind, fact) == value for fact, value in facts.items())
    )


def lookup(name: str) -> type[AbstractLayerKind]:
    """The layer kind registered as `name`; a `ConfigError` on `--layout` if none."""
    if name not in _REGISTRY:
        raise ConfigError("layout", f"layer kinds are {', '.join(_REGISTRY)}; got {name!r}")
    return _REGISTRY[name]


register(Dense)
register(Sliding)
register(Compressed)
register(SWA)
register(CSA)
register(HCA)

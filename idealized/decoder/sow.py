"""Intermediates on request, as flax's `examples/gemma/sow_lib.py` records them.

A layer hands what it can show to `sow`; the value is computed and stored only while the
module runs inside `nnx.capture(..., kind)` for that kind of variable. Forward passes
carry no `record` flag, and a plain (or jitted, or differentiated) call computes nothing
extra.
"""

from __future__ import annotations

from collections.abc import Callable

from flax import nnx


def capturing(module: nnx.Module, kind: type[nnx.Variable] = nnx.Intermediate) -> bool:
    """Whether `module` runs inside `nnx.capture(..., kind)` (the exact type, as flax matches)."""
    return any(type(v) is kind for v in getattr(module, "__captures__", ()))


def sow(
    module: nnx.Module,
    name: str,
    value: Callable[[], object],
    kind: type[nnx.Variable] = nnx.Intermediate,
) -> None:
    """Store `value()` under `name` as a `kind` of `module`, only while it is captured for `kind`.

    Args:
        module: the module that owns the value (its path keys the captured state).
        name: the key within the module.
        value: a thunk, called only when the value is captured.
        kind: the variable type `nnx.capture` collects.
    """
    if capturing(module, kind):
        module.sow(kind, name, value())

"""64-bit types inside the project's own functions, never for the whole process.

The theory and the flows are integrated in float64 and the trainer's random bits are those
of jax with 64-bit types on (`idealized.toy.task`); the trainer itself asks for float32
explicitly. Rather than switching `jax_enable_x64` for the process on import, each public
function of a module that computes with jax runs inside `jax.enable_x64(True)`
(`float64`, applied to a module by `float64_module`), so a user's own jax code in the same
process keeps the setting the user chose.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import TypeVar

import jax

F = TypeVar("F", bound=Callable)


def float64(fn: F) -> F:
    """`fn`, run with jax's 64-bit types on (`jax.enable_x64(True)`), restored afterwards.

    A call made where they are already on runs `fn` directly. Arrays `fn` returns keep
    their (64-bit) dtypes. jax's setting is per thread: a thread `fn` starts has them off
    unless what it runs is wrapped too.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if jax.config.jax_enable_x64:
            return fn(*args, **kwargs)
        with jax.enable_x64(True):
            return fn(*args, **kwargs)

    wrapper.__float64__ = True
    return wrapper


def float64_module(name: str) -> None:
    """Wrap every public plain function defined in module `name` with `float64`.

    Called at the end of a module (`float64_module(__name__)`); calls between the module's
    functions go through the wrapped names. Cached functions are wrapped outside their
    cache (what they cache is the float64 result); classes, jitted callables and names
    imported from elsewhere are left as they are.
    """
    module = sys.modules[name]
    for attr, value in list(vars(module).items()):
        if (
            not attr.startswith("_")
            and (inspect.isfunction(value) or isinstance(value, functools._lru_cache_wrapper))
            and getattr(value, "__module__", None) == name
            and not getattr(value, "__float64__", False)
        ):
            setattr(module, attr, float64(value))

"""How this project's programs are compiled: `jit` and `filter_jit` with one set of XLA options.

Every jitted function of `idealized`, `theory` and `sims` compiles through these, so a
function gives the same numbers whichever entry point calls it (the options travel with
the function, not with the process, unlike `XLA_FLAGS`).

`COMPILER_OPTIONS` turns off XLA:CPU's MLIR fusion emitters
(`xla_cpu_use_fusion_emitters=False`): they leave a loop fusion that mixes the
counter-based random draw with a broadcast operand unvectorised, such as
`scale[:, None, None] * standard_normal(key, (B, N, s))` in `idealized.toy.task.sample_batch`,
and that fusion dominates a training step. Results agree with XLA's defaults to float32
rounding. `python -m weakspots.benchmarks.xla_options` times both settings
(docs/performance.md). The option is XLA:CPU's, so it is passed only when jax's default
backend is the CPU (`compiler_options()`); on a GPU or TPU a function compiles with XLA's
defaults. The backend is read at a function's first call, never at import (that would
start the backend before `jax.distributed.initialize`).

Jax accepts compiler options on a top-level jit only, and refuses them where a jitted
function is staged into another trace (called inside `jax.jit`, differentiated with
`jax.grad`). There a function jitted here compiles as a plain jit instead, with the same
static and donated arguments: inside an outer jit the outer program's options apply;
under a transformation at top level (`jax.grad(f)(x)`) XLA's defaults do, so such a call
may differ from `f(x)` by float32 rounding. Jax versions before
`FUSION_EMITTER_OPTION_SINCE` compile with XLA's defaults, because an option XLA does not
know is an error.
"""

from __future__ import annotations

import functools
import gc

import equinox as eqx
import jax

FUSION_EMITTER_OPTION_SINCE = (0, 10)  # the oldest jax this option was checked against

COMPILER_OPTIONS: dict[str, bool] = (
    {"xla_cpu_use_fusion_emitters": False}
    if jax.__version_info__ >= FUSION_EMITTER_OPTION_SINCE
    else {}
)


def compiler_options() -> dict[str, bool]:
    """`COMPILER_OPTIONS` when jax's default backend is the CPU; none on an accelerator."""
    return COMPILER_OPTIONS if jax.default_backend() == "cpu" else {}


class _Compiled:
    """A function compiled with `compiler_options()` where jax allows them, plainly elsewhere.

    The top-level program is built at the first call, once the backend is known.
    Attributes other than the call (`lower`, `trace`, `_cache_size`, ...) are the top-level
    program's; `__wrapped__` is the undecorated function.
    """

    def __init__(self, fun, decorate, kwargs):
        self._fun, self._decorate, self._kwargs = fun, decorate, kwargs
        self._nested = decorate(fun, **kwargs)
        self._top_program = None
        functools.update_wrapper(self, fun)

    @property
    def compiler_options(self) -> dict[str, bool]:
        """The options the top-level program compiles with."""
        return compiler_options()

    @property
    def _top(self):
        if self._top_program is None:
            options = self.compiler_options
            self._top_program = (
                self._decorate(self._fun, compiler_options=options, **self._kwargs)
                if options
                else self._nested
            )
        return self._top_program

    def __call__(self, *args, **kwargs):
        try:
            return self._top(*args, **kwargs)
        except ValueError as error:  # raised at the call, before anything is staged
            if not _refused_options(error):
                raise
        return self._nested(*args, **kwargs)

    def __getattr__(self, name):
        if "_nested" not in self.__dict__:  # not yet initialised (copy, pickle)
            raise AttributeError(name)
        return getattr(self._top, name)

    def __get__(self, instance, owner=None):
        return self if instance is None else functools.partial(self, instance)


def _refused_options(error: ValueError) -> bool:
    """True for jax's refusal of compiler options on a nested (staged) jit."""
    message = str(error)
    return "compiler_options" in message and "top-level" in message


def jit(fun=None, /, **kwargs):
    """`jax.jit` with `compiler_options()`; use as `@jit` or `@partial(jit, static_argnums=...)`."""
    if fun is None:
        return lambda f: jit(f, **kwargs)
    if not COMPILER_OPTIONS:
        return jax.jit(fun, **kwargs)
    return _Compiled(fun, jax.jit, kwargs)


def filter_jit(fun=None, /, **kwargs):
    """`equinox.filter_jit` with `compiler_options()`."""
    if fun is None:
        return lambda f: filter_jit(f, **kwargs)
    if not COMPILER_OPTIONS:
        return eqx.filter_jit(fun, **kwargs)
    return _Compiled(fun, eqx.filter_jit, kwargs)


def mapped_regions() -> tuple[int, int] | None:
    """This process's memory mappings and the kernel's limit on them (`vm.max_map_count`);
    None where `/proc` does not say (not Linux)."""
    try:
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f), limit
    except (OSError, ValueError):
        return None


def release_compiled_programs(fraction: float = 0.5) -> bool:
    """Drop jax's compiled programs (`jax.clear_caches`) once this process holds more than
    `fraction` of the kernel's memory-mapping limit; True if it did.

    Each XLA:CPU executable keeps about three mappings until its cache entry goes, and at
    Linux's default limit (65,530) the next compile segfaults inside XLA's CPU compiler: a
    pytest worker running the slow tests died so at 65,294 mappings (docs/performance.md,
    "CI"). A long process that compiles many programs (a test session, a report of every
    experiment) calls this between units of work; later calls recompile what they need.
    """
    regions = mapped_regions()
    if regions is None or regions[0] <= fraction * regions[1]:
        return False
    jax.clear_caches()
    gc.collect()
    return True

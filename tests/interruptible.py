"""A `python -m MODULE ...` command line whose process turns SIGINT into KeyboardInterrupt.

A shell starts background jobs (`pytest &`) with SIGINT ignored, children inherit that, and
Python then installs no KeyboardInterrupt. A `preexec_fn` restoring the signal runs Python
code in the forked child, which jax warns about once its threads have started (and the
suite turns warnings into errors), so the child restores the handler itself.
"""

from __future__ import annotations


def interruptible(command: list[str]) -> list[str]:
    """`[python, "-m", module, *args]` as a command that restores SIGINT before running."""
    python, flag, module, *args = command
    if flag != "-m":
        raise ValueError(f"expected a `python -m MODULE` command line, got {command[:3]}")
    code = (
        "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [python, "-c", code, *args]

import os
import time

os.environ.setdefault("MPLBACKEND", "Agg")

import jax  # noqa: E402
import pytest  # noqa: E402

# Silent broadcasting fails loudly (as in equinox's own test-suite).
jax.config.update("jax_numpy_rank_promotion", "raise")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "user_precision: run with jax's 64-bit types as the process set them (off), not on",
    )


@pytest.fixture(autouse=True)
def _float64_references(request):
    """Each test's own jax code with 64-bit types on, as its float64 references were written.

    The library turns them on inside its own functions (`idealized.precision`) and leaves
    the process's setting alone; tests marked `user_precision` (tests/test_precision.py)
    call it with them off, as a user's process has them.
    """
    if request.node.get_closest_marker("user_precision"):
        yield
        return
    with jax.enable_x64(True):
        yield


@pytest.fixture(autouse=True)
def _room_for_compiled_programs():
    """After each test, compiled programs are dropped once the worker holds half the kernel's
    memory-mapping limit: a worker that compiled past it segfaulted in XLA's compiler."""
    yield
    from weakspots.idealized.xla import release_compiled_programs

    release_compiled_programs()


def pytest_runtest_setup(item):
    """Past `WEAKSPOTS_TEST_DEADLINE` (seconds since the epoch; `.ci/run` sets it inside CI's
    time limit), a test not yet started is skipped, saying why, rather than the whole run
    outlasting the limit. Unset (the README's command, a developer's run): no deadline."""
    deadline = os.environ.get("WEAKSPOTS_TEST_DEADLINE")
    if deadline and time.time() > float(deadline):
        pytest.skip("CI's time budget was spent before this test started (WEAKSPOTS_TEST_DEADLINE)")


@pytest.fixture(scope="session")
def smollm2_hf(tmp_path_factory):
    """SmolLM2-135M-Instruct as a Hugging Face directory, converted once per test process in a
    child process (tests/probe/smollm2_support.py); skips naming what is missing."""
    import sys

    here = os.path.join(os.path.dirname(__file__), "probe")
    if here not in sys.path:
        sys.path.insert(0, here)
    from smollm2_support import convert

    return convert(tmp_path_factory.mktemp("smollm2"))

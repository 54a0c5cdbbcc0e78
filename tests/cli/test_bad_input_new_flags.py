"""Bad input to the verbs and flags of the V4 layers, the footprint and selection models and
the probe: refused before any work, exit 2, one line on stderr naming the flag.

A table of one bad value per refusal rule, and a property over numeric flags (hypothesis):
any value outside a flag's domain (negative, zero where a count, nan, inf) is refused
naming that flag. Every case is refused at config validation, so nothing trains and no
request is sent (the probe's URL is a closed port).
"""

import contextlib
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weakspots.cli import main

PROBE = ["probe", "--backend", "openai", "--url", "http://127.0.0.1:9", "--model", "m"]
V4 = ["lm", "train", "--design", "v4"]
FOOTPRINT = ["predict", "--model", "footprint"]
SELECTION = ["predict", "--model", "selection"]

TABLE = [
    (V4 + ["--rope-fraction", "1.5"], "--rope-fraction"),
    (["lm", "train", "--design", "v5"], "--design"),
    (["lm", "train", "--layout", "sliding,dense", "--indexer-topk", "4"], "--indexer-topk"),
    (["lm", "train", "--layout", "sliding,compressed", "--sink"], "--sink"),
    (SELECTION + ["--chunks", "8", "--topk", "9"], "--topk"),
    (SELECTION + ["--stride", "4", "--indexer-weights", "1,-1,1,1"], "--indexer-weights"),
    (["predict", "--model", "bogus"], "--model"),
    (["train", "--model", "footprint", "--window", "-2"], "--window"),
    (["flow", "--model", "selection", "--topk", "0"], "--topk"),
    (PROBE + ["--depth", "1.5"], "--depth"),
    (["probe", "--backend", "pigeon"], "--backend"),
    (["probe", "--backend", "openai", "--model", "m"], "--url"),
    (["probe", "--backend", "decoder"], "--checkpoint"),
]

# Numeric flags and the values outside their domain: counts refuse 0 and negatives,
# nonnegative reals refuse negatives, nan and inf.
COUNTS = [
    (V4, "--hca-stride"),
    (V4, "--index-heads"),
    (FOOTPRINT, "--window"),
    (SELECTION, "--topk"),
    (PROBE, "--stride"),
    (PROBE, "--context"),
    (PROBE, "--concurrency"),
    (PROBE, "--trials"),
]
NONNEGATIVE = [
    (V4, "--indexer-kl"),
    (V4, "--rope-fraction"),
    (V4, "--indexer-topk"),
    (FOOTPRINT, "--carry-gain"),
    (FOOTPRINT, "--decoy-gain"),
    (PROBE, "--max-retries"),
]
INTEGER_FLAGS = {"--hca-stride", "--index-heads", "--window", "--topk", "--stride", "--context",
                 "--concurrency", "--trials", "--indexer-topk", "--max-retries"}  # fmt: skip


def refusal(args: list[str]) -> tuple[int, list[str]]:
    """Exit code and stderr lines of `weakspots ARGS`."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(args)
        except SystemExit as exit_:
            code = exit_.code
    return code, err.getvalue().strip().splitlines()


def assert_refused(args: list[str], flag: str):
    code, lines = refusal(args)
    assert code == 2, (args, code, lines)
    assert len(lines) == 1 and flag in lines[0], (args, lines)


@pytest.mark.parametrize(("args", "flag"), TABLE, ids=[" ".join(a[:3]) + " " + f for a, f in TABLE])
def test_each_refusal_rule_is_one_line_naming_the_flag(args, flag):
    assert_refused(args, flag)


def _bad_value(flag: str, counts: bool):
    integers = st.integers(-(2**31), 0 if counts else -1)
    if flag in INTEGER_FLAGS:
        return integers.map(str)
    reals = st.floats(max_value=-1e-9, allow_nan=False, allow_infinity=False)
    return st.one_of(reals.map(repr), st.sampled_from(["nan", "inf", "-inf"]))


@st.composite
def bad_numeric_flag(draw):
    counts = draw(st.booleans())
    prefix, flag = draw(st.sampled_from(COUNTS if counts else NONNEGATIVE))
    return prefix, flag, draw(_bad_value(flag, counts))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(bad_numeric_flag())
def test_values_outside_a_flags_domain_are_refused_naming_it(case):
    prefix, flag, value = case
    assert_refused([*prefix, flag, value], flag)

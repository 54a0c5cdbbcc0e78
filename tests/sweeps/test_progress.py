"""`sims.progress.Progress`: the ETA leaves compilation out; in place on a terminal, lines elsewhere."""

import io

import pytest

from weakspots.sims import progress as progress_lib
from weakspots.sims.progress import Progress, format_seconds


class Clock:
    """A stand-in for time.perf_counter that the test advances by hand."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_lib.time, "perf_counter", clock)
    return clock


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_eta_excludes_the_compile(clock):
    bar = Progress("train", "steps", total=600, warmups=1, stream=io.StringIO())
    clock.now += 20.0  # first block of 50 steps: a 19 s compile + 1 s of steps
    bar.update(50, warmup=True)
    assert bar.eta() is None  # nothing yet says how fast the steps go
    clock.now += 1.0
    bar.update(50)
    # 500 steps left at 50 steps/s, no compile ahead
    assert bar.eta() == pytest.approx(500 / 50)


def test_eta_charges_the_compiles_still_ahead(clock):
    bar = Progress("sweep", "runs", total=20, warmups=2, stream=io.StringIO())
    clock.now += 12.0
    bar.update(5, warmup=True)  # bucket 1, first batch: 10 s compile + 5 runs at 0.4 s
    clock.now += 2.0
    bar.update(5)  # 5 runs at 0.4 s
    per_run, compile_cost = 2.0 / 5, 12.0 - 5 * 0.4
    assert bar.eta() == pytest.approx(10 * per_run + 1 * compile_cost)
    clock.now += 12.0
    bar.update(5, warmup=True)  # bucket 2 compiles: no compile left to charge
    assert bar.eta() == pytest.approx(5 * per_run)


def test_only_warmups_extrapolate_from_the_warmups_ahead(clock):
    bar = Progress("sweep", "runs", total=4, warmups=2, stream=io.StringIO())
    clock.now += 6.0
    bar.update(2, warmup=True)
    assert bar.eta() == pytest.approx(6.0)  # one more bucket like this one


def test_resume_counts_stored_runs_and_ends_full(clock):
    out = io.StringIO()
    bar = Progress("sweep", "runs", every_seconds=0.0, stream=out)
    bar.plan(32, done=16, warmups=1)
    for _ in range(4):
        clock.now += 1.0
        bar.update(4, warmup=False)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("sweep: 16/32 runs (50%)")  # the stored runs count as done
    assert lines[1].startswith("sweep: 20/32 runs (62%)")
    assert lines[-1].startswith("sweep: 32/32 runs (100%)") and lines[-1].endswith("done")
    assert "\r" not in out.getvalue()


def test_lines_are_periodic_off_a_terminal(clock):
    out = io.StringIO()
    with Progress("train", "steps", total=100, stream=out, every_seconds=10.0) as bar:
        for _ in range(100):
            clock.now += 0.5
            bar.update(1)
    lines = out.getvalue().splitlines()
    # every 10 s over 50 s (at 10, 20, 30, 40, 50 s), the last one saying done
    assert len(lines) == 5
    assert lines[-1] == "train: 100/100 steps (100%), 50s elapsed, done"


def test_short_work_off_a_terminal_prints_nothing(clock):
    out = io.StringIO()
    with Progress("train", "steps", total=10, stream=out) as bar:
        clock.now += 1.0
        bar.update(10)
    assert out.getvalue() == ""


def test_bar_updates_in_place_on_a_terminal(clock):
    out = Terminal()
    with Progress("train", "steps", total=4, warmups=1, stream=out) as bar:
        assert "compiling" in out.getvalue()
        for _ in range(4):
            clock.now += 1.0
            bar.update(1, warmup=bar.done == 0)
            bar._bar.refresh()  # tqdm redraws at most every 0.2 s of real time
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")  # one line, redrawn with \r
    assert text.count("\r") >= 5
    assert "4/4 steps" in text.rsplit("\r", 1)[-1] and "done" in text.rsplit("\r", 1)[-1]


def test_disabled_prints_nothing_but_counts(clock):
    out = Terminal()
    with Progress("train", "steps", total=4, stream=out, enabled=False) as bar:
        bar.update(3)
        bar.write("hello")
    assert out.getvalue() == "" and bar.done == 3


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "?"), (float("inf"), "?"), (4.4, "4s"), (65, "1m05s"), (3725, "1h02m")],
)
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_a_line_without_eta_is_followed_by_one_with_it(clock):
    out = io.StringIO()
    with Progress("train", "steps", total=100, warmups=1, stream=out, every_seconds=10.0) as bar:
        clock.now += 15.0
        bar.update(10, warmup=True)  # past the period: a line, but no rate yet
        clock.now += 1.0
        bar.update(10)  # the rate is known: a line at once, not 10 s later
        for _ in range(8):
            clock.now += 1.0
            bar.update(10)
    lines = out.getvalue().splitlines()
    assert lines[0] == "train: 10/100 steps (10%), 15s elapsed, ETA ?"
    assert lines[1] == "train: 20/100 steps (20%), 16s elapsed, ETA 8s"
    assert lines[-1] == "train: 100/100 steps (100%), 24s elapsed, done"

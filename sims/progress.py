"""Progress of long work on stderr, with an ETA that leaves compilation out.

On a terminal a bar updates in place (tqdm); anywhere else (a log file, a pipe, a batch
scheduler) a plain line is printed every `every_seconds`, and one at the end if any was.
Work is counted in units (steps, runs, figures). An update whose time includes a
compilation (the first block of a newly compiled program) is marked `warmup=True`: the
rate is measured on the other updates only, and what a warmup cost beyond that rate is
charged once for each warmup still expected.

    with Progress("sweep", "runs", total=32, done=16, warmups=2) as bar:
        for batch in batches:
            ...
            bar.update(len(batch), warmup=batch is first_of_its_bucket)
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TextIO

__all__ = ["Progress", "format_seconds"]

BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit} [{elapsed}{postfix}]"


def format_seconds(seconds: float | None) -> str:
    """`42s`, `3m05s`, `1h02m`; `?` for None or a non-finite value."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _columns(stream) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


class Progress:
    """A progress report on `stream` (default stderr): in place on a terminal, lines elsewhere.

    Arguments:
        label: what is running (`train`, `sweep`, ...); starts every line.
        unit: what is counted, plural (`steps`, `runs`).
        total: units to do; None until `plan` is called (nothing shows before).
        done: units already done before this process started (a resumed sweep's stored
            runs): shown, but not part of the rate.
        warmups: updates expected to carry a compilation (one per compiled program).
        enabled: False makes every method a no-op except the counting (`--quiet`).
        stream: where to write; default `sys.stderr`.
        every_seconds: the period of the plain lines when `stream` is not a terminal.
        in_place: force (True) or refuse (False) the in-place bar; default: `stream.isatty()`.
    """

    def __init__(
        self,
        label: str,
        unit: str,
        total: int | None = None,
        *,
        done: int = 0,
        warmups: int = 0,
        enabled: bool = True,
        stream: TextIO | None = None,
        every_seconds: float = 10.0,
        in_place: bool | None = None,
    ):
        self.label, self.unit, self.enabled = label, unit, enabled
        self.stream = stream if stream is not None else sys.stderr
        self.every_seconds = every_seconds
        if in_place is None:
            isatty = getattr(self.stream, "isatty", None)
            in_place = bool(isatty and isatty())
        self.in_place = in_place
        self.total: int | None = None
        self.done = 0
        self._bar = None
        self._lines = 0
        self._last_line_done: int | None = None
        self._line_without_eta = False
        self._closed = False
        self._start = self._last_event = self._last_line = time.perf_counter()
        self._clean_seconds = self._warm_seconds = 0.0
        self._clean_units = self._warm_units = self._warm_count = 0
        self._warmups = 0
        if total is not None:
            self.plan(total, done=done, warmups=warmups)

    # ------------------------------------------------------------------ counting

    def plan(self, total: int, *, done: int = 0, warmups: int = 0) -> None:
        """Set the work: `total` units of which `done` are done already; `warmups` compiles ahead."""
        self.total, self.done, self._warmups = int(total), int(done), int(warmups)
        self._last_event = time.perf_counter()
        if self.enabled and self.in_place and not self._closed:
            self._open_bar()
        self._show()

    def update(self, n: int = 1, *, warmup: bool = False) -> None:
        """`n` more units done since the last update; `warmup`: their time includes a compile."""
        now = time.perf_counter()
        seconds, self._last_event = now - self._last_event, now
        if warmup:
            self._warm_seconds += seconds
            self._warm_units += n
            self._warm_count += 1
        else:
            self._clean_seconds += seconds
            self._clean_units += n
        self.done += n
        self._show(advanced=n)

    def eta(self) -> float | None:
        """Seconds left: remaining units at the compile-free rate, plus the compiles ahead.

        None until a rate is known: a warmup's time says nothing about the updates after
        it, except that the warmups still expected will cost as much (work made only of
        warmups, such as a sweep whose buckets are one batch each, gets that estimate).
        """
        if self.total is None:
            return None
        left = max(self.total - self.done, 0)
        if left == 0:
            return 0.0
        pending = max(self._warmups - self._warm_count, 0)
        if self._clean_units > 0:
            per_unit = self._clean_seconds / self._clean_units
            overhead = 0.0
            if self._warm_count:
                excess = self._warm_seconds - per_unit * self._warm_units
                overhead = max(excess, 0.0) / self._warm_count
            return left * per_unit + pending * overhead
        if self._warm_count and pending:
            return pending * self._warm_seconds / self._warm_count
        return None

    # ------------------------------------------------------------------ output

    def write(self, message: str) -> None:
        """Print one line on the stream without breaking the bar (nothing when disabled)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)

    def close(self) -> None:
        """End the report: the bar stays as last drawn; a final line if lines were printed."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.close()
            self._bar = None
        elif self.enabled and self._lines and self._last_line_done != self.done:
            self._print_line()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _postfix(self) -> str:
        if self.total is not None and self.done >= self.total:
            return "done"
        if self._clean_units == 0 and self._warm_count == 0 and self._warmups > 0:
            return "compiling"
        return f"ETA {format_seconds(self.eta())}"

    def _open_bar(self) -> None:
        from tqdm import tqdm

        if self._bar is not None:
            self._bar.close()
        self._bar = tqdm(
            total=self.total,
            initial=self.done,
            desc=self.label,
            unit=self.unit,
            file=self.stream,
            bar_format=BAR_FORMAT,
            # a pseudo-terminal may report 0 columns (script, some CI runners): 80 then
            dynamic_ncols=_columns(self.stream) > 0,
            ncols=None if _columns(self.stream) > 0 else 80,
            mininterval=0.2,
            leave=True,
        )
        self._bar.set_postfix_str(self._postfix())

    def _show(self, advanced: int = 0) -> None:
        if not self.enabled or self._closed or self.total is None:
            return
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.update(advanced)
            return
        now = time.perf_counter()
        # A line that could give no ETA (the compile had just ended) is followed by one as
        # soon as there is one.
        first_eta = self._line_without_eta and self.eta() is not None
        if now - self._last_line >= self.every_seconds or first_eta:
            self._print_line()

    def _print_line(self) -> None:
        now = time.perf_counter()
        self._last_line = now
        self._lines += 1
        self._last_line_done = self.done
        self._line_without_eta = self.eta() is None
        total = self.total if self.total is not None else "?"
        percent = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        print(
            f"{self.label}: {self.done}/{total} {self.unit}{percent}, "
            f"{format_seconds(now - self._start)} elapsed, {self._postfix()}",
            file=self.stream,
            flush=True,
        )

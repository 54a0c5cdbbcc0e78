"""Timing shared by the benchmarks: wall and CPU seconds of a call, rounds interleaved so that
machine load hits every contender alike, and paired ratios over rounds."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class Timing:
    """Wall-clock and process CPU seconds of one timed call."""

    wall: float
    cpu: float


def timed(fn: Callable[[], object]) -> Timing:
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return Timing(time.perf_counter() - wall, time.process_time() - cpu)


def interleaved(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[Timing]]:
    """Time every call once per round, `repeats` rounds, so that machine load hits all alike."""
    times: dict[str, list[Timing]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, fn in calls.items():
            times[name].append(timed(fn))
    return times


def median_rate(work: float, times: list[Timing], clock: str = "wall") -> float:
    """`work` units per second at the median of `times`."""
    return work / float(np.median([getattr(t, clock) for t in times]))


def paired_ratio(times, work: dict[str, float], top: str, bottom: str, clock: str) -> float:
    """Median over rounds of `rate(top) / rate(bottom)`, each pair timed back to back.

    Pairing cancels load that drifts between rounds; the median drops a round that a
    neighbour's burst hit on one side only.
    """
    ratios = [
        (work[top] / getattr(a, clock)) / (work[bottom] / getattr(b, clock))
        for a, b in zip(times[top], times[bottom], strict=True)
    ]
    return float(np.median(ratios))


def ratios(times, work, top: str, bottom: str) -> dict[str, float]:
    """`paired_ratio` of `top` over `bottom` on both clocks: {"wall": ..., "cpu": ...}."""
    return {clock: paired_ratio(times, work, top, bottom, clock) for clock in ("wall", "cpu")}

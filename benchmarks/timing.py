"""Timing shared by the benchmark scripts: warm up, then time each call."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timings(fn: Callable[[], object], repeats: int, warmup: int = 1) -> list[float]:
    """Seconds taken by each of ``repeats`` calls of ``fn``, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """The median of ``timings``: robust to the noise of a shared machine."""
    return statistics.median(timings(fn, repeats, warmup))

"""Timing for tests and benchmarks: medians of repeated calls, robust to a shared
machine's noise, and functions timed in turns on every rank (the slowest rank's)."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np


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
    """The median of ``timings``."""
    return statistics.median(timings(fn, repeats, warmup))


def time_in_turns(fns: dict[str, Callable[[], object]], reps: int, warmup: int = 2,
                  sync: Callable[[], object] | None = None, world=None,
                  shuffle: bool = False) -> dict[str, float]:
    """Median seconds of each function over ``reps`` turns, after ``warmup`` turns.

    In each turn every function runs once, so that a passing load weighs on all alike:
    in the given order, or with ``shuffle`` in an order drawn anew for each turn (seeded,
    the same on every rank), so that none always follows the same other one.  ``sync()``
    (a device's stream) is called before and after each timed call.  With ``world`` (an
    mpi4py communicator) the ranks start each call together and each time is the
    slowest rank's; every rank must call this with the same functions."""
    if world is not None:
        from mpi4py import MPI
    names = list(fns)
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in names}
    order = np.random.RandomState(0)
    for _ in range(reps):
        for k in (order.permutation(len(names)) if shuffle else range(len(names))):
            name = names[k]
            if sync is not None:
                sync()
            if world is not None:
                world.Barrier()
            start = time.perf_counter()
            fns[name]()
            if sync is not None:
                sync()
            elapsed = time.perf_counter() - start
            if world is not None:
                slowest = np.array([elapsed])
                world.Allreduce(MPI.IN_PLACE, slowest, op=MPI.MAX)
                elapsed = float(slowest[0])
            times[name].append(elapsed)
    return {name: statistics.median(t) for name, t in times.items()}

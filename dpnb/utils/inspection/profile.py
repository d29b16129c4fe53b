"""nnabla's ``TimeProfiler``: function hooks that time each function of a graph (and
each ``scope`` as a whole) over iterations, then report means on stdout or as CSV."""
from __future__ import annotations

import csv
import os
import time
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from ...errors import DpnbValueError
from ...ext_utils import import_extension_module
from .base import FunctionHookCallbackBase

_EXTENSIONS = ("cpu", "cuda", "cudnn")


class CpuTimerCallback(FunctionHookCallbackBase):
    """Wall-clock timing of keys (functions, scope names): ``pre_hook(key)`` starts a
    key's clock and ``post_hook(key)`` stops it, each after waiting for the device of
    ``ext_name`` to finish what is queued; ``calc_elapsed_time`` appends each key's
    last interval to ``results``."""

    def __init__(self, ext_name: str, device_id):
        self.results: OrderedDict[object, list[float]] = OrderedDict()
        self.device_id = str(device_id)
        self.ext_module = import_extension_module(ext_name)
        self.key_to_times: OrderedDict[object, list[float]] = OrderedDict()

    @property
    def pre_hook(self):
        def callback(key) -> None:
            self.ext_module.synchronize(device_id=self.device_id)
            self.key_to_times.setdefault(key, [0.0, 0.0])[0] = self.timer()
        return callback

    @property
    def post_hook(self):
        def callback(key) -> None:
            if key not in self.key_to_times:
                raise DpnbValueError(f"the timer of {key} was stopped before it was started: "
                                     "give the same profiler's pre_hook too")
            self.ext_module.synchronize(device_id=self.device_id)
            self.key_to_times[key][1] = self.timer()
        return callback

    @staticmethod
    def timer() -> float:
        """Seconds on a monotonic clock."""
        return time.perf_counter()

    def calc_elapsed_time(self) -> None:
        """Record each key's last measured interval."""
        for key, (start, end) in self.key_to_times.items():
            self.results.setdefault(key, []).append(end - start)

    def average(self, start_index: int = 0) -> dict:
        """Per key: ``time`` (the mean of the intervals from ``start_index`` on, in ms,
        NaN if there are none), ``num`` (how many) and ``scale`` ("ms")."""
        averages = {}
        for key, times in self.results.items():
            kept = times[start_index:]
            averages[key] = {"time": float(np.mean(kept)) * 1e3 if kept else float("nan"),
                             "num": len(times) - start_index, "scale": "ms"}
        return averages


class TimeProfiler(FunctionHookCallbackBase):
    """Time the functions that ``forward``/``backward`` run with ``pre_hook`` and
    ``post_hook``, grouped by the ``scope`` they run in; each scope's whole duration
    goes to the "summary" scope.  Call ``calc_elapsed_time`` once per iteration, then
    print the means (calling the profiler) or write them with ``to_csv``.

    GPU extensions ("cuda", "cudnn") are timed on the host clock after synchronising
    the device (nnabla uses CUDA events there)."""

    def __init__(self, ext_name: str, device_id):
        if ext_name not in _EXTENSIONS:
            raise NotImplementedError(f"TimeProfiler times the extensions {list(_EXTENSIONS)}, "
                                      f"got {ext_name!r}; pass one of them")
        self.profiler = CpuTimerCallback
        self.ext_name = ext_name
        self.device_id = device_id
        self._scope_name = ""
        self.profilers: dict[str, CpuTimerCallback] = {}
        self.create_new_profiler("summary")

    def create_new_profiler(self, scope_name: str) -> None:
        """Start a fresh timer for ``scope_name``."""
        self.profilers[scope_name] = self.profiler(ext_name=self.ext_name,
                                                   device_id=self.device_id)

    @contextmanager
    def scope(self, scope_name: str):
        """Label the functions timed inside the context with ``scope_name``, and time the
        context itself under that name in the "summary" scope."""
        previous = self._scope_name
        try:
            if scope_name not in self.profilers:
                self.create_new_profiler(scope_name)
            self.call_pre_hook("summary", scope_name)
            self._scope_name = scope_name
            yield self
        finally:
            self._scope_name = previous
            self.call_post_hook("summary", scope_name)

    def _current(self) -> CpuTimerCallback:
        if self._scope_name not in self.profilers:
            raise DpnbValueError("TimeProfiler's hooks time functions inside a scope: take "
                                 "pre_hook and post_hook within `with profiler.scope(name):`")
        return self.profilers[self._scope_name]

    @property
    def pre_hook(self):
        """The ``function_pre_hook`` for the current scope."""
        return self._current().pre_hook

    @property
    def post_hook(self):
        """The ``function_post_hook`` for the current scope."""
        return self._current().post_hook

    def call_pre_hook(self, scope_name: str, key) -> None:
        """Start timing ``key`` in ``scope_name`` (made if new)."""
        if scope_name not in self.profilers:
            self.create_new_profiler(scope_name)
        self.profilers[scope_name].pre_hook(key)

    def call_post_hook(self, scope_name: str, key) -> None:
        """Stop timing ``key`` in ``scope_name``."""
        if scope_name not in self.profilers:
            raise DpnbValueError(f"TimeProfiler has no scope {scope_name!r} to stop timing in; "
                                 f"it has {sorted(self.profilers)}")
        self.profilers[scope_name].post_hook(key)

    def calc_elapsed_time(self, names: str | list[str] | None = None) -> None:
        """Record this iteration's times of the scopes ``names`` (all when None)."""
        if isinstance(names, str):
            names = [names]
        chosen = self.profilers.values() if names is None else [self.profilers[n] for n in names]
        for profiler in chosen:
            profiler.calc_elapsed_time()

    def average(self, start_index: int = 0) -> dict:
        """Scope -> key -> mean time (see ``CpuTimerCallback.average``)."""
        return {name: profiler.average(start_index) for name, profiler in self.profilers.items()}

    def get_all_results(self) -> dict:
        """Scope -> key -> every recorded interval (in seconds), for scopes with any."""
        return {name: profiler.results for name, profiler in self.profilers.items()
                if profiler.results}

    def to_csv(self, out_dir: str = "./", ignore_init: bool = True) -> None:
        """Write the means to ``out_dir``: ``profile_summary.csv`` (one row per scope) and
        ``profile_detail.csv`` (one row per timed function, a column per scope and
        statistic); ``ignore_init`` leaves the first iteration out."""
        os.makedirs(out_dir, exist_ok=True)
        averages = self.average(start_index=1 if ignore_init else 0)
        with open(os.path.join(out_dir, "profile_summary.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, ["scope", "time", "scale", "num"])
            writer.writeheader()
            writer.writerows(dict(result, scope=scope)
                             for scope, result in averages["summary"].items())
        rows: dict[object, dict] = {}
        labels: dict[object, str] = {}
        seen: dict[str, int] = {}
        for scope, results in averages.items():
            if scope == "summary":
                continue
            for key, result in results.items():
                if key not in labels:
                    count = seen.get(str(key), 0)
                    seen[str(key)] = count + 1
                    labels[key] = f"{key}_{count}"
                    rows[key] = {}
                rows[key].update((f"{k}_{scope}", v) for k, v in result.items())
        columns = sorted({column for row in rows.values() for column in row})
        with open(os.path.join(out_dir, "profile_detail.csv"), "w", newline="") as f:
            writer = csv.DictWriter(f, ["scope", "original_key"] + columns)
            writer.writeheader()
            writer.writerows(dict(row, scope=labels[key], original_key=key)
                             for key, row in rows.items())

    def __call__(self, *args, **kwargs) -> None:
        """Print each scope's mean times, leaving the first iteration out."""
        for name, results in self.average(start_index=1).items():
            if not results:
                continue
            print(f"### {name} ###")
            for key, result in results.items():
                print(f"{key}: {result['time']} [{result['scale']}]")
            print()

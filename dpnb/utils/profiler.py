"""nnabla's ``nnabla.utils.profiler``: ``GraphProfiler`` times each function of a graph
(forward and backward, run alone many times), the whole graph's forward and backward,
and a training step; ``GraphProfilerCsvWriter`` writes its results as CSV."""
from __future__ import annotations

import csv
import importlib.metadata
import os
import sys
import time
from collections import namedtuple
from collections.abc import Callable, Sequence

from ..errors import DpnbValueError
from ..ext_utils import import_extension_module
from ..graph import Function, Variable
from ..parameter import get_parameters

ProfileStat = namedtuple("ProfileStat", ["parameter_scope", "inputs_shape", "args_info",
                                         "function_name", "mean_time", "n_run"])

_SCALES = {"m": 1e3, "u": 1e6, "n": 1e9}


def convert_time_scale(sec: float, format: str = "m") -> float:
    """``sec`` seconds in milli- ("m"), micro- ("u") or nanoseconds ("n")."""
    if format not in _SCALES:
        raise DpnbValueError(f"time scale must be one of {list(_SCALES)} (milli, micro, nano "
                             f"seconds), got {format!r}")
    return sec * _SCALES[format]


def _zero_variables(variables: Sequence[Variable]) -> None:
    """Zero the data and gradients of the variables a function computes (not the leaves)."""
    for v in variables:
        if v.parent is not None:
            v.data.zero()
            v.grad.zero()


class GraphProfiler:
    """Measure the time of every function of ``graph``'s graph, forward and backward,
    each run alone ``n_run`` times (or until ``max_measure_execution_time`` seconds have
    passed) after one warm-up run; then of the whole graph's forward and backward, and
    of a training step (forward, ``zero_grad``, backward, ``update``) if a ``solver`` is
    given.  Times are means in ``time_scale`` ("m", "u", "n": milli-, micro-,
    nanoseconds), kept as strings of 8 significant digits, as nnabla keeps them.

    ``backward_accum`` is the accumulation flag given to each function's backward."""

    def __init__(self, graph: Variable, device_id, ext_name: str, solver=None, n_run: int = 100,
                 max_measure_execution_time: float = 1, time_scale: str = "m",
                 backward_accum: bool = False):
        if n_run < 1:
            raise DpnbValueError(f"GraphProfiler needs n_run >= 1 (how many times to run each "
                                 f"function), got {n_run}")
        convert_time_scale(0.0, time_scale)
        self.graph = graph
        self.solver = solver
        self.n_run = n_run
        self.device_id = str(device_id)
        self.ext_name = ext_name
        self.ext_module = import_extension_module(ext_name)
        self.max_measure_execution_time = max_measure_execution_time
        self.time_scale = time_scale
        self.result: dict = {}
        self.name2val = {v: k for k, v in get_parameters().items()}
        self.backward_accum = backward_accum

    def _measure_execution_time(self, execution: Callable, *execution_args) -> tuple[str, int]:
        """(mean time of ``execution(*execution_args)`` as a string, runs measured)."""
        execution(*execution_args)
        self.ext_module.synchronize(device_id=self.device_id)
        total, count = 0.0, 0
        first = time.perf_counter()
        for _ in range(self.n_run):
            start = time.perf_counter()
            execution(*execution_args)
            self.ext_module.synchronize(device_id=self.device_id)
            stop = time.perf_counter()
            total += stop - start
            count += 1
            if stop - first > self.max_measure_execution_time:
                break
        return "{:.8}".format(convert_time_scale(total / count, self.time_scale)), count

    def _time_profiling(self, f: Function, target_process: str) -> None:
        """Time ``f``'s forward or backward alone and record a ``ProfileStat``; the
        variables it computes are zeroed before and after."""
        _zero_variables(f.inputs)
        _zero_variables(f.outputs)
        if target_process == "forward":
            mean_time, count = self._measure_execution_time(f.forward, f.inputs, f.outputs)
        elif target_process == "backward":
            accum = [self.backward_accum] * len(f.inputs)
            mean_time, count = self._measure_execution_time(f.backward, f.inputs, f.outputs,
                                                            accum)
        else:
            raise DpnbValueError(f"target_process must be 'forward' or 'backward', got "
                                 f"{target_process!r}")
        _zero_variables(f.inputs)
        _zero_variables(f.outputs)
        scope = None
        if len(f.inputs) > 1 and f.inputs[1] in self.name2val:
            scope = os.path.dirname(self.name2val[f.inputs[1]])
        self.result[target_process].append(ProfileStat(
            parameter_scope=scope, inputs_shape=[x.shape for x in f.inputs],
            args_info=f.info.args.items(), function_name=f.name, mean_time=mean_time,
            n_run=count))

    def time_profiling_forward(self) -> None:
        """Time every function's forward, into ``result["forward"]``."""
        self.result["forward"] = []
        self.graph.visit(lambda f: self._time_profiling(f, "forward"))

    def time_profiling_backward(self) -> None:
        """Time every function's backward, into ``result["backward"]``."""
        self.result["backward"] = []
        self.graph.visit(lambda f: self._time_profiling(f, "backward"))

    def training_function(self) -> None:
        """One training step: forward, ``zero_grad``, backward, ``update``."""
        self.graph.forward(clear_no_need_grad=True)
        self.solver.zero_grad()
        self.graph.backward(clear_buffer=True)
        self.solver.update()

    def time_profiling_whole_graph(self) -> None:
        """Time the whole graph's forward and backward, and a training step if there is
        a solver."""
        self.result["forward_all"], self.result["n_run_forward_all"] = \
            self._measure_execution_time(self.graph.forward)
        self.result["backward_all"], self.result["n_run_backward_all"] = \
            self._measure_execution_time(self.graph.backward)
        if self.solver is not None:
            self.result["training"], self.result["n_run_training"] = \
                self._measure_execution_time(self.training_function)

    def run(self) -> None:
        """Measure everything: each function's forward and backward, then the whole graph."""
        self.time_profiling_forward()
        self.time_profiling_backward()
        self.time_profiling_whole_graph()

    def get_result(self) -> dict:
        """The measurements: "forward" and "backward" (lists of ``ProfileStat``),
        "forward_all", "backward_all" (and "training") with their "n_run_..." counts."""
        return self.result

    def print_result(self) -> None:
        """Print the measurements."""
        print(f"time scale: {self.time_scale}")
        for direction in ("forward", "backward"):
            print(f"-----------------{direction}--------------------")
            for stat in self.result[direction]:
                print(stat)
            print()
        print(f"all forward: {self.result['forward_all']}, "
              f"all backward: {self.result['backward_all']}")


class GraphProfilerCsvWriter:
    """Write a ``GraphProfiler``'s results (``gb``, after ``run()``) as CSV to ``file``:
    a header at construction, the rows on ``write()``."""

    def __init__(self, gb: GraphProfiler, file=sys.stdout):
        self.file = file
        self.gb = gb
        self.fields = ["parameter_scope", "function_name", "inputs_shape", "args_info",
                       "forward", "backward", "forward_n_run", "backward_n_run"]
        self.write_header()

    def write_header(self) -> None:
        """The run's settings, then the column names."""
        writer = csv.writer(self.file)
        writer.writerow(["num. of run", self.gb.n_run])
        writer.writerow(["device id", self.gb.device_id])
        writer.writerow(["ext name", self.gb.ext_name])
        writer.writerow(["time scale", self.gb.time_scale])
        writer.writerow(["nnabla version", f"dpnb {importlib.metadata.version('dpnb')}"])
        writer.writerow([])
        writer.writerow(self.fields)

    def check_same(self, f: dict, b: dict) -> bool:
        """Whether a forward and a backward record are of the same function."""
        return all(f[field] == b[field] for field in self.fields[:4])

    def write(self) -> None:
        """One row per function (forward and backward times side by side), then the
        whole-graph and training times."""
        writer = csv.writer(self.file)
        for forward, backward in zip(self.gb.result["forward"], self.gb.result["backward"]):
            f, b = forward._asdict(), backward._asdict()
            if not self.check_same(f, b):
                raise DpnbValueError(f"the forward and backward records disagree ({f} and {b}); "
                                     "profile the same graph with GraphProfiler.run()")
            args_info = ", ".join(f"{k}: {v}" for k, v in f["args_info"])
            writer.writerow([f["parameter_scope"], f["function_name"], f["inputs_shape"],
                             args_info, f["mean_time"], b["mean_time"], f["n_run"], b["n_run"]])
        result = self.gb.result
        writer.writerow([])
        writer.writerow(["forward all", result["forward_all"]])
        writer.writerow(["forward_all_n_run", result["n_run_forward_all"]])
        writer.writerow([])
        writer.writerow(["backward all", result["backward_all"]])
        writer.writerow(["backward_all_n_run", result["n_run_backward_all"]])
        if "training" in result and "n_run_training" in result:
            writer.writerow([])
            writer.writerow(["training(forward + backward + update)", result["training"]])
            writer.writerow(["training_n_run", result["n_run_training"]])

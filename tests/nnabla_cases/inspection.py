"""Inspection and profiling cases run with nnabla (record_inspection.py records them into
inspection.json) and with dpnb (test_nnabla_inspection.py compares): pprint's output,
NanInfTracer's findings, and the layout (not the times) of TimeProfiler's and
GraphProfiler's reports.  Each takes the library's modules."""
import contextlib
import csv
import io
from pathlib import Path

import numpy as np

GRAPH_PROFILER_TIMED_ROWS = ("nnabla version", "forward all", "backward all",
                             "training(forward + backward + update)")


def network(nn, F, PF):
    """x -> fc/affine -> relu -> *2 -> mean, with seeded input and parameters."""
    nn.clear_parameters()
    rng = np.random.RandomState(0)
    x = nn.Variable.from_numpy_array(rng.randn(2, 3).astype(np.float32))
    with nn.parameter_scope("fc"):
        h = PF.affine(x, 4)
    for v in nn.get_parameters().values():
        v.d = rng.randn(*v.shape).astype(np.float32)
    return x, F.mean(F.relu(h) * 2.0)


def printed(call):
    """What ``call()`` prints, and what it returns."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = call()
    return out.getvalue(), result


def pprint_summary(inspection, y):
    """pprint's output after forward and backward, with statistics and hidden functions,
    and the functions (names, input and output shapes) its printer keeps."""
    text, printer = printed(lambda: inspection.pprint(y, forward=True, backward=True,
                                                      summary=True, hidden=True, printer=True))
    return text, [{"name": f["name"], "inputs": [list(v.shape) for v in f["inputs"]],
                   "outputs": [list(v.shape) for v in f["outputs"]]}
                  for f in printer.functions]


def nan_inf_message(F, inspection, y, kind: str) -> str:
    """The message of the ValueError NanInfTracer raises for a forward of ``y`` divided
    by zero (``kind`` "inf"), or that again divided by itself ("nan")."""
    with np.errstate(divide="ignore", invalid="ignore"):
        z = y / F.constant(0, shape=y.shape)
        if kind == "nan":
            z = z / z
        tracer = inspection.NanInfTracer(trace_nan=kind == "nan", trace_inf=kind == "inf")
        z.forward(function_post_hook=tracer.forward_post_hook)
    try:
        printed(tracer.check)
    except ValueError as e:
        return str(e)
    raise AssertionError(f"NanInfTracer found no {kind} in a network that has one")


def checked_functions(inspection, y) -> list:
    """The types of the functions a NanInfTracer checks in a forward and backward of ``y``."""
    tracer = inspection.NanInfTracer()
    with tracer.trace():
        y.forward(function_post_hook=tracer.forward_post_hook)
        y.backward(function_post_hook=tracer.backward_post_hook)
    return [f.info.type_name for f in tracer.key_to_stat_fwd]


def _csv_rows(path):
    with open(path) as f:
        return list(csv.reader(f))


def time_profile(inspection, y, out_dir):
    """A TimeProfiler over three forwards and backwards of ``y``, written as CSV into
    ``out_dir``: the profiler, and its scopes, keys, counts and CSV layout."""
    tp = inspection.TimeProfiler("cpu", device_id="0")
    for _ in range(3):
        with tp.scope("forward"):
            y.forward(function_pre_hook=tp.pre_hook, function_post_hook=tp.post_hook)
        with tp.scope("backward"):
            y.backward(function_pre_hook=tp.pre_hook, function_post_hook=tp.post_hook)
        tp.calc_elapsed_time(["forward", "backward", "summary"])
    averages = tp.average(start_index=1)
    tp.to_csv(out_dir=str(out_dir))
    summary = _csv_rows(Path(out_dir) / "profile_summary.csv")
    detail = _csv_rows(Path(out_dir) / "profile_detail.csv")
    return tp, {"scopes": sorted(averages),
                "summary_keys": sorted(averages["summary"]),
                "summary_rows": [[r[0], r[2], r[3]] for r in summary],
                "detail_header": sorted(detail[0]),
                "detail_scopes": [r[0] for r in detail[1:]],
                "num": {scope: sorted({v["num"] for v in res.values()})
                        for scope, res in averages.items()}}


def graph_profile(nn, S, profiler, y):
    """A GraphProfiler of ``y`` with an Sgd solver over three runs: its result, and its
    CSV (the timed columns and rows left out), result keys and forward statistics."""
    solver = S.Sgd()
    solver.set_parameters(nn.get_parameters())
    graph_profiler = profiler.GraphProfiler(y, device_id=0, ext_name="cpu", solver=solver,
                                            n_run=3)
    graph_profiler.run()
    out = io.StringIO()
    profiler.GraphProfilerCsvWriter(graph_profiler, file=out).write()
    rows = list(csv.reader(io.StringIO(out.getvalue())))
    result = graph_profiler.get_result()
    return result, {
        "rows": [row if len(row) < 8 else row[:4] + row[6:] for row in rows
                 if not row or row[0] not in GRAPH_PROFILER_TIMED_ROWS],
        "result_keys": sorted(result),
        "stats": [[s.parameter_scope, [list(x) for x in s.inputs_shape], dict(s.args_info),
                   s.function_name, s.n_run] for s in result["forward"]]}

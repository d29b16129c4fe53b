"""nnabla.utils.inspection (pprint, NanInfTracer, TimeProfiler) and nnabla.utils.profiler
(GraphProfiler and its CSV writer) print and write what nnabla 1.39 does for a small
network, as recorded in tests/fixtures/nnabla/inspection.json (times aside)."""
import contextlib
import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.utils.inspection import NanInfTracer, TimeProfiler, pprint
from dpnb.utils.profiler import GraphProfiler, GraphProfilerCsvWriter

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "inspection.json")
                     .read_text())


def network():
    """The recorder's network: x -> fc/affine -> relu -> *2 -> mean, seeded."""
    nn.clear_parameters()
    rng = np.random.RandomState(0)
    x = nn.Variable.from_numpy_array(rng.randn(2, 3).astype(np.float32))
    with nn.parameter_scope("fc"):
        h = PF.affine(x, 4)
    for v in nn.get_parameters().values():
        v.d = rng.randn(*v.shape).astype(np.float32)
    return x, F.mean(F.relu(h) * 2.0)


def printed(call):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = call()
    return out.getvalue(), result


def test_pprint_with_statistics_prints_as_nnabla():
    _, y = network()
    text, printer = printed(lambda: pprint(y, forward=True, backward=True, summary=True,
                                           hidden=True, printer=True))
    assert text == FIXTURE["pprint"]["summary"]
    assert [{"name": f["name"], "inputs": [list(v.shape) for v in f["inputs"]],
             "outputs": [list(v.shape) for v in f["outputs"]]}
            for f in printer.functions] == FIXTURE["pprint"]["hidden"]


def test_pprint_without_running_prints_the_graph_as_nnabla():
    """Depths aside: nnabla numbers a graph not yet run from 0, dpnb as after a forward."""
    _, y = network()
    text, result = printed(lambda: pprint(y))
    assert result is None

    def without_depth(s):
        return [line for line in s.splitlines() if not line.startswith("\tDepth")]
    assert without_depth(text) == without_depth(FIXTURE["pprint"]["plain"])


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_nan_inf_tracer_names_the_function_as_nnabla(kind):
    _, y = network()
    with np.errstate(divide="ignore", invalid="ignore"):
        z = y / F.constant(0, shape=y.shape)
        if kind == "nan":
            z = z / z
        tracer = NanInfTracer(trace_nan=kind == "nan", trace_inf=kind == "inf")
        z.forward(function_post_hook=tracer.forward_post_hook)
    expected = FIXTURE["nan_inf"][kind]["message"]
    with pytest.raises(ValueError) as raised:
        printed(tracer.check)
    message = str(raised.value)
    # nnabla numbers the output from 0 ("0th"); dpnb says "1st"
    assert message.split("output")[1].strip().splitlines()[0] == \
        expected.split("output")[1].strip().splitlines()[0]
    for field in ("function type", "shapes of inputs", "shapes of outputs", "function args"):
        line = next(s for s in expected.splitlines() if field in s)
        assert line.strip() in message


def test_nan_inf_tracer_passes_a_clean_network_and_refuses_post_hook():
    _, y = network()
    tracer = NanInfTracer()
    with tracer.trace():
        y.forward(function_post_hook=tracer.forward_post_hook)
        y.backward(function_post_hook=tracer.backward_post_hook)
    assert [f.info.type_name for f in tracer.key_to_stat_fwd] == \
        FIXTURE["nan_inf"]["checked_functions"]
    assert tracer.pre_hook is None
    assert NanInfTracer(trace_nan=False, trace_inf=False).forward_post_hook is None
    with pytest.raises(NotImplementedError, match="forward_post_hook"):
        tracer.post_hook


def test_time_profiler_reports_and_writes_csv_as_nnabla(tmp_path):
    _, y = network()
    tp = TimeProfiler("cpu", device_id="0")
    for _ in range(3):
        with tp.scope("forward"):
            y.forward(function_pre_hook=tp.pre_hook, function_post_hook=tp.post_hook)
        with tp.scope("backward"):
            y.backward(function_pre_hook=tp.pre_hook, function_post_hook=tp.post_hook)
        tp.calc_elapsed_time(["forward", "backward", "summary"])
    averages = tp.average(start_index=1)
    expected = FIXTURE["time_profiler"]
    assert sorted(averages) == expected["scopes"]
    assert sorted(averages["summary"]) == expected["summary_keys"]
    assert {s: sorted({v["num"] for v in r.values()}) for s, r in averages.items()} == \
        expected["num"]
    assert all(v["time"] >= 0 and v["scale"] == "ms" for r in averages.values()
               for v in r.values())
    tp.to_csv(out_dir=str(tmp_path))
    with open(tmp_path / "profile_summary.csv") as f:
        assert [[r[0], r[2], r[3]] for r in csv.reader(f)] == expected["summary_rows"]
    with open(tmp_path / "profile_detail.csv") as f:
        detail = list(csv.reader(f))
    assert sorted(detail[0]) == expected["detail_header"]
    assert [r[0] for r in detail[1:]] == expected["detail_scopes"]
    text, _ = printed(tp)
    assert "### forward ###" in text and "### summary ###" in text


def test_time_profiler_refuses_an_unknown_extension():
    with pytest.raises(NotImplementedError, match="'tpu'"):
        TimeProfiler("tpu", device_id="0")


def test_graph_profiler_writes_the_csv_of_nnabla():
    _, y = network()
    solver = S.Sgd()
    solver.set_parameters(nn.get_parameters())
    profiler = GraphProfiler(y, device_id=0, ext_name="cpu", solver=solver, n_run=3)
    profiler.run()
    out = io.StringIO()
    GraphProfilerCsvWriter(profiler, file=out).write()
    rows = [row if len(row) < 8 else row[:4] + row[6:]
            for row in csv.reader(io.StringIO(out.getvalue()))
            if not row or row[0] not in ("nnabla version", "forward all", "backward all",
                                         "training(forward + backward + update)")]
    expected = FIXTURE["graph_profiler"]
    assert rows == expected["rows"]
    result = profiler.get_result()
    assert sorted(result) == expected["result_keys"]
    assert [[s.parameter_scope, [list(x) for x in s.inputs_shape], dict(s.args_info),
             s.function_name, s.n_run] for s in result["forward"]] == expected["stats"]
    assert all(float(s.mean_time) >= 0 for s in result["forward"] + result["backward"])


def test_graph_profiler_refuses_bad_settings():
    _, y = network()
    with pytest.raises(ValueError, match="n_run >= 1"):
        GraphProfiler(y, device_id=0, ext_name="cpu", n_run=0)
    with pytest.raises(ValueError, match="time scale must be one of"):
        GraphProfiler(y, device_id=0, ext_name="cpu", time_scale="s")

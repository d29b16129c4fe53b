"""nnabla.utils.inspection (pprint, NanInfTracer, TimeProfiler) and nnabla.utils.profiler
(GraphProfiler and its CSV writer) print and write what nnabla 1.39 does for a small
network, as recorded in tests/fixtures/nnabla/inspection.json (times aside) from the cases
of tests/nnabla_cases/inspection.py."""
import json
from pathlib import Path

import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.utils import inspection, profiler
from dpnb.utils.inspection import NanInfTracer, TimeProfiler
from dpnb.utils.profiler import GraphProfiler
from nnabla_cases import inspection as cases

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "inspection.json")
                     .read_text())


def network():
    """The recorder's network: x -> fc/affine -> relu -> *2 -> mean, seeded."""
    return cases.network(nn, F, PF)


def test_pprint_with_statistics_prints_as_nnabla():
    _, y = network()
    text, hidden = cases.pprint_summary(inspection, y)
    assert text == FIXTURE["pprint"]["summary"]
    assert hidden == FIXTURE["pprint"]["hidden"]


def test_pprint_without_running_prints_the_graph_as_nnabla():
    """Depths aside: nnabla numbers a graph not yet run from 0, dpnb as after a forward."""
    _, y = network()
    text, result = cases.printed(lambda: inspection.pprint(y))
    assert result is None

    def without_depth(s):
        return [line for line in s.splitlines() if not line.startswith("\tDepth")]
    assert without_depth(text) == without_depth(FIXTURE["pprint"]["plain"])


@pytest.mark.parametrize("kind", ["nan", "inf"])
def test_nan_inf_tracer_names_the_function_as_nnabla(kind):
    message = cases.nan_inf_message(F, inspection, network()[1], kind)
    expected = FIXTURE["nan_inf"][kind]["message"]
    # nnabla numbers the output from 0 ("0th"); dpnb says "1st"
    assert message.split("output")[1].strip().splitlines()[0] == \
        expected.split("output")[1].strip().splitlines()[0]
    for field in ("function type", "shapes of inputs", "shapes of outputs", "function args"):
        line = next(s for s in expected.splitlines() if field in s)
        assert line.strip() in message


def test_nan_inf_tracer_passes_a_clean_network_and_refuses_post_hook():
    assert cases.checked_functions(inspection, network()[1]) == \
        FIXTURE["nan_inf"]["checked_functions"]
    tracer = NanInfTracer()
    assert tracer.pre_hook is None
    assert NanInfTracer(trace_nan=False, trace_inf=False).forward_post_hook is None
    with pytest.raises(NotImplementedError, match="forward_post_hook"):
        tracer.post_hook


def test_time_profiler_reports_and_writes_csv_as_nnabla(tmp_path):
    _, y = network()
    tp, report = cases.time_profile(inspection, y, tmp_path)
    assert report == FIXTURE["time_profiler"]
    assert all(v["time"] >= 0 and v["scale"] == "ms" for r in tp.average(start_index=1).values()
               for v in r.values())
    text, _ = cases.printed(tp)
    assert "### forward ###" in text and "### summary ###" in text


def test_time_profiler_refuses_an_unknown_extension():
    with pytest.raises(NotImplementedError, match="'tpu'"):
        TimeProfiler("tpu", device_id="0")


def test_graph_profiler_writes_the_csv_of_nnabla():
    result, report = cases.graph_profile(nn, S, profiler, network()[1])
    assert report == FIXTURE["graph_profiler"]
    assert all(float(s.mean_time) >= 0 for s in result["forward"] + result["backward"])


def test_graph_profiler_refuses_bad_settings():
    _, y = network()
    with pytest.raises(ValueError, match="n_run >= 1"):
        GraphProfiler(y, device_id=0, ext_name="cpu", n_run=0)
    with pytest.raises(ValueError, match="time scale must be one of"):
        GraphProfiler(y, device_id=0, ext_name="cpu", time_scale="s")

"""nnabla.core on dpnb: nn.Module (parameters, submodules, training), nn.Sequential and
nn.graph_def (networks defined on ProtoVariables or converted from a graph, their
protobuf, saving, loading and rebuilding), against what nnabla 1.39 gives (fixture
recorded by fixtures/nnabla/record_core_module.py from the cases of
tests/nnabla_cases/core_module.py)."""
import io
import json
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.core import modules
from dpnb.core.graph_optimizer import rename_variable
from dpnb.core.proto_initializer import initializer_from_proto
from dpnb.errors import DpnbError, DpnbValueError
from dpnb.formats import nnabla_pb2
from nnabla_cases import core_module as cases

REC = json.loads((Path(__file__).parent / "fixtures" / "nnabla" / "core_module.json").read_text())


@pytest.fixture(autouse=True)
def fresh_graph():
    nn.graph_def.reset_default_graph()
    yield
    nn.graph_def.reset_default_graph()


TwoBranches, Shared = cases.module_classes(nn, F, modules)


def _set(params, values):
    for name, value in values.items():
        params[name].d = np.array(value)


def _data(values):
    return [nn.Variable.from_numpy_array(np.array(x, np.float32)) for x in values]


def test_module_defines_the_network_nnabla_does():
    rec = REC["modules"]
    m, net, names = cases.two_branches_graph(nn, TwoBranches)
    assert names == {k: rec[k] for k in names}
    _set(m.get_parameters(), rec["values"])
    out = net(*_data(rec["inputs_data"]))
    out.forward()
    np.testing.assert_allclose(out.d, rec["rebuilt"], rtol=1e-5, atol=1e-5)
    assert cases.text(net.owner().as_proto(networks=[net])) == rec["nntxt"]
    assert net.batch_size == rec["batch_size"]


def test_shared_submodule_listed_once_and_training_passed_down():
    rec = REC["shared"]
    m = Shared()
    x = nn.Variable.from_numpy_array(np.array(rec["input"]))
    y = m(x)
    assert cases.shapes(m.get_parameters()) == rec["parameters"]
    _set(m.get_parameters(), rec["values"])
    y.forward()
    np.testing.assert_allclose(y.d, rec["output"], rtol=1e-3, atol=1e-3)
    assert cases.training_flags(m) == rec["training"]


def test_flat_network_saved_loaded_and_rebuilt(tmp_path):
    rec = REC["flat"]
    g = cases.flat_graph(nn, F, PF)
    net = g.default_graph()
    assert (list(g.networks), net.inputs, net.outputs) == (rec["networks"], rec["inputs"],
                                                           rec["outputs"])
    assert [pf.name for pf in net.forward_sequence()] == rec["sequence"]
    _set(g.get_parameters(), rec["values"])
    assert cases.text(g.as_proto()) == rec["nntxt"]
    g.save(str(tmp_path / "flat.nnp"))
    nn.clear_parameters()
    loaded = nn.graph_def.load(str(tmp_path / "flat.nnp"), batch_size=3)
    assert loaded.default_graph().batch_size == rec["loaded_batch_size"]
    assert sorted(loaded.get_parameters()) == rec["loaded_parameters"]
    assert nn.get_parameters() == {}  # the file's parameters went to the graph's own scope
    out = loaded(*_data(rec["inputs_data"]))
    out.forward()
    np.testing.assert_allclose(out.d, rec["output"], rtol=1e-5, atol=1e-5)


def test_create_graph_from_variable_and_rename():
    rec = REC["from_variable"]
    x, g = cases.from_variable_graph(nn, F, PF)
    net = g.networks["my_model"]
    assert cases.text(g.as_proto(variable_batch_size=False)) == rec["nntxt"]
    assert (net.inputs, net.outputs) == (rec["inputs"], rec["outputs"])
    assert sorted(g.get_parameters()) == rec["parameters"]
    assert cases.renamed(rename_variable, net) == rec["renamed"]
    _set(g.get_parameters(), rec["values"])
    x.d = np.array(rec["input"])
    outs = net(x)
    F.sink(*outs).forward()
    for got, want in zip(outs, rec["output"]):
        np.testing.assert_allclose(got.d, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(DpnbError, match="no such variable"):
        rename_variable(net, {"y_0": "again"})


def test_sequential_names_its_layers():
    assert cases.sequential(nn, F, modules) == REC["sequential"]
    with pytest.raises(DpnbError, match="must be an nn.Module"):
        nn.Sequential(lambda x: x)


@pytest.mark.parametrize("extension", [".h5", ".protobuf"])
def test_module_parameters_round_trip(extension):
    a, b = TwoBranches(), TwoBranches()
    xs = _data(REC["modules"]["inputs_data"])
    ya, yb = a(*xs), b(*xs)
    buffer = io.BytesIO()
    a.save_parameters(buffer, extension=extension)
    buffer.seek(0)
    b.load_parameters(buffer, extension=extension)
    for name, p in a.get_parameters().items():
        np.testing.assert_array_equal(b.get_parameters()[name].d, p.d)
    yb = b(*xs)
    F.sink(ya, yb).forward()
    np.testing.assert_allclose(yb.d, ya.d)


def test_set_parameter_checks_module_keys():
    m = TwoBranches()
    m(*_data(REC["modules"]["inputs_data"]))
    w = nn.Variable.from_numpy_array(np.ones((2, 3, 1, 1)))
    m.set_parameter("@conv_bn_1/conv/W", w)
    assert m.conv_bn_1.get_parameters()["conv/W"] is w
    m.set_parameter("@missing/conv/W", w)  # skipped unless raise_if_missing
    with pytest.raises(DpnbValueError, match="no submodule 'missing'"):
        m.set_parameter("@missing/conv/W", w, raise_if_missing=True)
    with pytest.raises(DpnbValueError, match="must be followed by '/'"):
        m.set_parameter("@conv_bn_1", w)
    with pytest.raises(AttributeError, match="no attribute or submodule 'nothing'"):
        m.nothing
    with pytest.raises(NotImplementedError):
        nn.Module()()


def test_graph_errors_say_what_to_do():
    with pytest.raises(DpnbError, match="not an output of any network"):
        nn.graph_def.get_default_graph_by_variable(nn.ProtoVariable((1, 2), name="nowhere"))
    with pytest.raises(DpnbError, match="has no network"):
        nn.graph_def.ProtoGraph()()
    with pytest.raises(DpnbError, match="ProtoGraph or a ProtoNetwork"):
        nn.graph_def.save(io.BytesIO(), [object()])
    with pytest.raises(DpnbError, match="known sizes only"):
        F.relu(nn.ProtoVariable((-1, 3)))
    with nn.graph_def.graph() as g:
        PF.affine(nn.ProtoVariable((2, 3)), 4)
    proto = g.as_proto()  # the batch axis is -1, the batch size 2
    proto.network[0].ClearField("batch_size")
    unsized = nn.graph_def.ProtoGraph.from_proto(proto, param_scope=g.parameter_scope)
    with pytest.raises(DpnbError, match="pass batch_size="):
        unsized()
    assert unsized(batch_size=5).shape == (5, 4)
    assert g().shape == (2, 4)


@pytest.mark.parametrize("kind", sorted(REC["initializers"]))
def test_file_initializers_draw_as_nnabla(kind):
    v = nnabla_pb2.Variable()
    v.initializer.type, v.initializer.multiplier = kind, 1.5
    init = initializer_from_proto(v, np.random.RandomState(313))
    want = REC["initializers"][kind]
    if want is None:
        assert init is None
        return
    np.testing.assert_allclose(init((4, 3, 2, 2)), want, rtol=1e-6)
    pv = nn.ProtoVariable((4, 3, 2, 2), name="w", var_type="Parameter")
    pv.initializer = init  # written back as read
    written = pv.to_message().initializer
    assert (written.type, written.multiplier) == (kind, 1.5)

"""nnabla's network-file utilities on dpnb: nnabla.utils.load on a training file written
by nnabla (and the same setup saved by dpnb), NnpNetworkPass edits, progress, the file
handles and Function.arguments, against what nnabla 1.39 recorded
(tests/fixtures/nnabla/record_load.py runs the cases of tests/nnabla_cases/load.py)."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
import dpnb.solvers as S
from dpnb.errors import DpnbError
from dpnb import ext_utils
from dpnb.utils import nnp_graph
from dpnb.utils.get_file_handle import get_buf_type, get_file_handle_load, get_file_handle_save
from dpnb.utils.load import load
from dpnb.utils.load_function import function_instance
from dpnb.utils.nnp_format import nnp_version
from dpnb.utils.progress import configure_progress, progress
from dpnb.utils.save import save
from nnabla_cases import load as load_cases

FIXTURES = Path(__file__).parent / "fixtures" / "nnabla" / "load"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
ARRAYS = np.load(FIXTURES / "expected.npz")


@pytest.fixture(autouse=True)
def fresh_parameters():
    nn.clear_parameters()
    ctx = nn.get_current_context()
    yield
    nn.clear_parameters()
    nn.set_default_context(ctx)


def _run_executor(info) -> np.ndarray:
    return load_cases.run_executor(info, ARRAYS["training_x"])


def test_load_training_file_written_by_nnabla():
    info = load([str(FIXTURES / "training.nnp")], prepare_data_iterator=False)
    assert load_cases.load_report(info) == EXPECTED["training"]
    np.testing.assert_allclose(_run_executor(info), ARRAYS["training_y"], rtol=1e-5)


def test_save_writes_the_training_setup_nnabla_writes(tmp_path):
    nn.load_parameters(str(FIXTURES / "training.nnp"))
    save(str(tmp_path / "training.nnp"),
         load_cases.training_contents(nn, F, PF, S, ext_utils))
    nn.clear_parameters()
    info = load(str(tmp_path / "training.nnp"), prepare_data_iterator=False,
                extension=".nnp")
    assert load_cases.load_report(info) == EXPECTED["training"]
    np.testing.assert_allclose(_run_executor(info), ARRAYS["training_y"], rtol=1e-5)


def test_load_from_a_file_object_twice():
    data = io.BytesIO((FIXTURES / "training.nnp").read_bytes())
    first = load(data, prepare_data_iterator=False, extension=".nnp")
    second = load(data, prepare_data_iterator=False, extension=".nnp")
    assert list(first.executors) == list(second.executors) == ["runtime"]


def test_load_prepares_lazy_data_iterators(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    info = load([str(FIXTURES / "training.nnp")])
    assert all(callable(d.data_iterator) for d in info.datasets.values())


def test_load_parameter_only_and_exclude_parameter():
    info = load([str(FIXTURES / "training.nnp")], parameter_only=True)
    assert list(info.networks) == [] and "fc1/affine/W" in nn.get_parameters()
    nn.clear_parameters()
    with pytest.raises(DpnbError, match="needs parameter"):
        load([str(FIXTURES / "training.nnp")], exclude_parameter=True,
             prepare_data_iterator=False)


def test_load_refuses_an_unknown_format(tmp_path):
    with pytest.raises(DpnbError, match="load reads"):
        load([str(tmp_path / "model.onnx")])


@pytest.mark.parametrize("name", sorted(EXPECTED["passes"]))
def test_network_pass_as_nnabla(name):
    callback = nnp_graph.NnpNetworkPass()
    load_cases.PASSES[name](callback)
    net = nnp_graph.NnpLoader(str(FIXTURES / "mlp.nnp")).get_network(
        "model", batch_size=2, callback=callback)
    assert load_cases.pass_report(nn, net) == EXPECTED["passes"][name]
    outputs = load_cases.run_network(F, net, {k: ARRAYS[f"{name}/in/{k}"] for k in net.inputs})
    for k, v in outputs.items():
        np.testing.assert_allclose(v, ARRAYS[f"{name}/out/{k}"], rtol=1e-5, atol=1e-6)


def test_network_pass_set_variable_and_generate_function():
    callback = nnp_graph.NnpNetworkPass()
    x = nn.Variable.from_numpy_array(ARRAYS["none/in/Affine_in"])
    callback.set_variable("Affine_in", x)

    @callback.on_generate_function_by_type("Tanh")
    def keep(f):
        assert f.proto.type == "Tanh"
        return f

    net = nnp_graph.NnpLoader(str(FIXTURES / "mlp.nnp")).get_network(
        "model", batch_size=2, callback=callback)
    assert net.inputs["Affine_in"] is x and x.name == "Affine_in"
    net.inputs["Affine_in_1"].d = ARRAYS["none/in/Affine_in_1"]
    net.outputs["Affine_out_3"].forward()
    np.testing.assert_allclose(net.outputs["Affine_out_3"].d, ARRAYS["none/out/Affine_out_3"],
                               rtol=1e-5, atol=1e-6)


def test_progress_writes_what_nnabla_writes(tmp_path):
    state = tmp_path / "state.txt"
    calls = []
    configure_progress(str(state), lambda s, p: calls.append([s, p]))
    try:
        expected = EXPECTED["progress"]
        assert state.read_text() == expected["after_configure"]
        progress("Training", 0.25)
        assert state.read_text() == ""  # within a second of the last write
        time.sleep(1.05)
        progress("Training", 0.25)
        assert state.read_text() == expected["written"]
        assert calls[0] == expected["calls"][0] and calls[-1] == expected["calls"][-1]
    finally:
        configure_progress("")


def test_file_handles_write_and_read_an_nnp(tmp_path):
    path = str(tmp_path / "copy.nnp")
    with get_file_handle_load(None, str(FIXTURES / "mlp.nnp"), ".nnp") as source:
        members = {name: source.read(name) for name in source.namelist()}
    with get_file_handle_save(path, ".nnp") as nnp:
        for name, data in members.items():
            nnp.writestr(name, data)
    with get_file_handle_load(None, path, ".nnp") as nnp:
        assert nnp.read("nnp_version.txt").decode().strip() == nnp_version() == "0.1"
        with get_file_handle_load(nnp, "parameter.h5", ".h5") as h5:
            assert "affine2" in h5
    assert nnp_graph.NnpLoader(path).get_network_names() == ["model"]
    assert get_buf_type("optimizer_adam_states.protobuf") == "protobuf"
    with pytest.raises(DpnbError, match="nnabla's network files"):
        with get_file_handle_save(str(tmp_path / "x.onnx"), ".onnx"):
            pass


def test_function_arguments_as_nnabla():
    assert load_cases.function_arguments(nn, F, PF) == EXPECTED["arguments"]


def test_function_instance_builds_nnabla_type_with_defaults():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = nn.Variable.from_numpy_array(data)
    y = function_instance("Reshape", None, shape=(4, 3))(x, n_outputs=1, auto_forward=True)
    np.testing.assert_array_equal(y.d, data.reshape(4, 3))
    s = function_instance("Sum", axes=[1])(x, auto_forward=True)
    np.testing.assert_allclose(s.d, data.sum(axis=1))
    with pytest.raises(DpnbError, match="has no parameters"):
        function_instance("Reshape", shap=(4, 3))

"""nnabla's network-file utilities on dpnb: nnabla.utils.load on a training file written
by nnabla (and the same setup saved by dpnb), NnpNetworkPass edits, progress, the file
handles and Function.arguments, against what nnabla 1.39 recorded
(tests/fixtures/nnabla/record_load.py)."""
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
from dpnb.ext_utils import get_extension_context
from dpnb.utils import nnp_graph
from dpnb.utils.get_file_handle import get_buf_type, get_file_handle_load, get_file_handle_save
from dpnb.utils.load import load
from dpnb.utils.load_function import function_instance
from dpnb.utils.nnp_format import nnp_version
from dpnb.utils.progress import configure_progress, progress
from dpnb.utils.save import save

FIXTURES = Path(__file__).parent / "fixtures" / "nnabla" / "load"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())
ARRAYS = np.load(FIXTURES / "expected.npz")
BATCH = 4


@pytest.fixture(autouse=True)
def fresh_parameters():
    nn.clear_parameters()
    ctx = nn.get_current_context()
    yield
    nn.clear_parameters()
    nn.set_default_context(ctx)


def _training_contents():
    """The training setup record_load.py saves with nnabla, built with dpnb."""
    x, t = nn.Variable([BATCH, 8]), nn.Variable([BATCH, 1])
    y = F.sigmoid(PF.affine(F.relu(PF.affine(x, 6, name="fc1")), 1, name="fc2"))
    loss = F.mean(F.binary_cross_entropy(y, t))
    adam = S.Adam(alpha=0.002, beta1=0.8)
    adam.set_parameters(nn.get_parameters())
    momentum = S.Momentum(lr=0.05, momentum=0.7)
    with nn.parameter_scope("fc2"):
        momentum.set_parameters(nn.get_parameters())
    dataset = {"uri": "train.csv", "cache_dir": "", "shuffle": True, "batch_size": BATCH,
               "no_image_normalization": True, "variables": {"x": x, "t": t}}
    return {
        "global_config": {"default_context": get_extension_context("cpu", device_id="0")},
        "training_config": {"max_epoch": 7, "iter_per_epoch": 11, "save_best": True},
        "networks": [
            {"name": "Main", "batch_size": BATCH, "outputs": {"loss": loss},
             "names": {"x": x, "t": t}},
            {"name": "Runtime", "batch_size": BATCH, "outputs": {"y": y}, "names": {"x": x}}],
        "datasets": [dict(dataset, name="train"),
                     dict(dataset, name="valid", uri="valid.csv", shuffle=False)],
        "optimizers": [
            {"name": "adam", "solver": adam, "network": "Main", "dataset": ["train"],
             "weight_decay": 0.001, "lr_decay": 0.5, "lr_decay_interval": 3,
             "update_interval": 2},
            {"name": "momentum", "solver": momentum, "network": "Main", "dataset": "train",
             "weight_decay": 0, "lr_decay": 1, "lr_decay_interval": 1, "update_interval": 1}],
        "monitors": [{"name": "valid_error", "network": "Main", "dataset": ("valid",)}],
        "executors": [{"name": "runtime", "network": "Runtime", "data": ["x"],
                       "output": ["y"], "num_evaluations": 3,
                       "repeat_evaluation_type": "mean", "no_image_normalization": True}],
    }


def _report(info) -> dict:
    """What record_load.py records of nnabla's load, from dpnb's."""
    tc = info.training_config
    return {
        "context": info.default_context.backend,
        "training_config": [tc.max_epoch, tc.iter_per_epoch, tc.save_best, tc.monitor_interval],
        "datasets": {k: [d.uri, d.cache_dir, d.normalize, d.data_iterator]
                     for k, d in info.datasets.items()},
        "networks": {k: {"inputs": list(n.inputs), "outputs": list(n.outputs)}
                     for k, n in info.networks.items()},
        "optimizers": {k: {
            "solver": o.solver.name, "info": o.solver.info,
            "learning_rate": o.solver.learning_rate(),
            "update_interval": o.update_interval, "weight_decay": o.weight_decay,
            "lr_decay": o.lr_decay, "lr_decay_interval": o.lr_decay_interval,
            "scheduler": type(o.scheduler).__name__,
            "data_iterators": list(o.data_iterators),
            "losses": [v.name for v in o.loss_variables],
            "parameters": list(o.parameters),
            "multipliers": {v.name: m for v, m in o.parameter_learning_rate_multipliers.items()},
        } for k, o in info.optimizers.items()},
        "monitors": {k: {"network": m.network.name, "data_iterators": list(m.data_iterators),
                         "variables": [v.name for v in m.monitor_variables]}
                     for k, m in info.monitors.items()},
        "executors": {k: {"network": e.network.name, "num_evaluations": e.num_evaluations,
                          "repeat_evaluation_type": e.repeat_evaluation_type,
                          "need_back_propagation": e.need_back_propagation,
                          "no_image_normalization": e.no_image_normalization,
                          "data": {v.name: d for v, d in e.dataset_assign.items()},
                          "output": {v.name: o for v, o in e.output_assign.items()},
                          "parameters": sorted(e.parameters.values())}
                      for k, e in info.executors.items()},
    }


def _run_executor(info) -> np.ndarray:
    executor = info.executors["runtime"]
    (x,) = executor.dataset_assign
    x.variable_instance.d = ARRAYS["training_x"]
    executor.forward_target.forward()
    (y,) = executor.output_assign
    return y.variable_instance.d


def test_load_training_file_written_by_nnabla():
    info = load([str(FIXTURES / "training.nnp")], prepare_data_iterator=False)
    assert _report(info) == EXPECTED["training"]
    np.testing.assert_allclose(_run_executor(info), ARRAYS["training_y"], rtol=1e-5)


def test_save_writes_the_training_setup_nnabla_writes(tmp_path):
    nn.load_parameters(str(FIXTURES / "training.nnp"))
    save(str(tmp_path / "training.nnp"), _training_contents())
    nn.clear_parameters()
    info = load(str(tmp_path / "training.nnp"), prepare_data_iterator=False,
                extension=".nnp")
    assert _report(info) == EXPECTED["training"]
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
    {"none": lambda: None,
     "remove_and_rewire": lambda: callback.remove_and_rewire("Tanh"),
     "use_up_to": lambda: callback.use_up_to("Tanh_out_1"),
     "drop_function": lambda: callback.drop_function("Affine_4"),
     "fix_parameters": callback.fix_parameters}[name]()
    net = nnp_graph.NnpLoader(str(FIXTURES / "mlp.nnp")).get_network(
        "model", batch_size=2, callback=callback)
    expected = EXPECTED["passes"][name]
    assert {k: list(v.shape) for k, v in net.inputs.items()} == expected["inputs"]
    assert {k: list(v.shape) for k, v in net.outputs.items()} == expected["outputs"]
    assert sorted(net.variables) == expected["variables"]
    assert sorted(nn.get_parameters()) == expected["grad_parameters"]
    for k, v in net.inputs.items():
        v.d = ARRAYS[f"{name}/in/{k}"]
    outputs = [net.outputs[k] for k in sorted(net.outputs)]
    F.sink(*outputs).forward()
    for k, v in zip(sorted(net.outputs), outputs):
        np.testing.assert_allclose(v.d, ARRAYS[f"{name}/out/{k}"], rtol=1e-5, atol=1e-6)


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


@pytest.mark.parametrize("type_name", sorted(EXPECTED["arguments"]))
def test_function_arguments_as_nnabla(type_name):
    x = nn.Variable([2, 3, 8, 8])
    y = PF.convolution(x, 4, (3, 3), pad=(1, 1), stride=(2, 1))
    fn = {"Convolution": y, "Reshape": F.reshape(y, (2, -1)), "Sum": F.sum(y, axis=1),
          "MaxPooling": F.max_pooling(x, (2, 2))}[type_name].parent
    assert fn.arguments == EXPECTED["arguments"][type_name]


def test_function_instance_builds_nnabla_type_with_defaults():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = nn.Variable.from_numpy_array(data)
    y = function_instance("Reshape", None, shape=(4, 3))(x, n_outputs=1, auto_forward=True)
    np.testing.assert_array_equal(y.d, data.reshape(4, 3))
    s = function_instance("Sum", axes=[1])(x, auto_forward=True)
    np.testing.assert_allclose(s.d, data.sum(axis=1))
    with pytest.raises(DpnbError, match="has no parameters"):
        function_instance("Reshape", shap=(4, 3))

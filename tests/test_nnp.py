"""nnabla's network files (dpnb.utils.save, dpnb.utils.nnp_graph): files written by nnabla
1.39 run on dpnb with nnabla's outputs (tests/fixtures/nnabla/record_nnp.py), and dpnb's
own networks round-trip through save and NnpLoader with identical outputs."""
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.parametric_functions as PF
from dpnb.errors import DpnbError
from dpnb.graph import Function
from dpnb.models import resnet23_prediction, tutorial_network
from dpnb.utils.function_specs import exported_types
from dpnb.utils.nnp_graph import NnpLoader
from dpnb.utils.save import save

FIXTURES = Path(__file__).parent / "fixtures" / "nnabla" / "nnp"
EXPECTED = np.load(FIXTURES / "expected.npz")


def run(net, inputs: dict) -> dict:
    for name, value in inputs.items():
        net.inputs[name].d = value
    nn.forward_all(list(net.outputs.values()))
    return {name: v.d.copy() for name, v in net.outputs.items()}


@pytest.mark.parametrize("filename", ["cnn.nnp", "cnn_protobuf.nnp"])
@pytest.mark.parametrize("batch", [2, 3])
def test_nnabla_cnn_runs_with_nnablas_outputs(filename, batch):
    loader = NnpLoader(str(FIXTURES / filename))
    assert loader.get_network_names() == ["cnn"]
    net = loader.get_network("cnn", batch_size=batch)
    assert list(net.inputs) == ["x"] and list(net.outputs) == ["y"]
    out = run(net, {"x": EXPECTED[f"cnn_x_{batch}"]})
    np.testing.assert_allclose(out["y"], EXPECTED[f"cnn_y_{batch}"], rtol=1e-5, atol=1e-6)
    # nnabla registers the file's parameters in the current scope.
    assert sorted(nn.get_parameters(grad_only=False)) == sorted(
        ["conv1/conv/W", "conv1/conv/b", "bn1/bn/beta", "bn1/bn/gamma", "bn1/bn/mean",
         "bn1/bn/var", "fc/affine/W", "fc/affine/b"])


@pytest.mark.parametrize("batch", [2, 3])
def test_nnabla_network_of_every_deterministic_function(batch):
    net = NnpLoader(str(FIXTURES / "ops.nnp")).get_network("ops", batch_size=batch)
    out = run(net, {"x": EXPECTED[f"ops_x_{batch}"], "t": EXPECTED[f"ops_t_{batch}"]})
    assert sorted(out) == ["ce", "err", "sce", "sq", "y"]
    for name, value in out.items():
        np.testing.assert_allclose(value, EXPECTED[f"ops_{name}_{batch}"], rtol=2e-5,
                                   atol=1e-6, err_msg=name)


def test_default_batch_size_is_the_saved_one():
    net = NnpLoader(str(FIXTURES / "cnn_protobuf.nnp")).get_network("cnn")
    assert net.inputs["x"].shape == (2, 3, 8, 8)


def randomize_parameters(seed: int = 0) -> None:
    rng = np.random.RandomState(seed)
    for name, p in nn.get_parameters(grad_only=False).items():
        p.d = rng.uniform(0.5, 1.5, p.shape) if name.endswith("/var") else rng.normal(
            0, 0.5, p.shape)


def round_trip(tmp_path, outputs: dict, inputs: dict, filename: str, **save_args):
    """Save the graph, forward it, then load the file into a fresh parameter scope and
    forward the loaded graph on the same inputs: both results."""
    names = {name: v for name, (v, _) in inputs.items()}
    for name, (v, value) in inputs.items():
        v.d = value
    path = tmp_path / filename
    save(str(path), {"networks": [{"name": "net", "batch_size": 2, "outputs": outputs,
                                   "names": names}],
                     "executors": [{"name": "runtime", "network": "net",
                                    "data": list(inputs), "output": list(outputs)}]},
         **save_args)
    nn.forward_all(list(outputs.values()))
    expected = {k: v.d.copy() for k, v in outputs.items()}
    with nn.parameter_scope("loaded"):
        net = NnpLoader(str(path)).get_network("net")
        got = run(net, {name: value for name, (_, value) in inputs.items()})
    return expected, got, net


@pytest.mark.parametrize("filename,args", [
    ("tutorial.nnp", {"parameter_format": ".protobuf"}),
    ("tutorial_h5.nnp", {}),
    ("tutorial.nntxt", {"include_params": True}),
    ("tutorial.protobuf", {"include_params": True}),
])
def test_tutorial_network_round_trips(tmp_path, rng, filename, args):
    x, t = nn.Variable((2, 1, 8, 8)), nn.Variable((2, 1))
    loss = tutorial_network(x, t, n_class=2, maps=3)
    randomize_parameters()
    expected, got, net = round_trip(
        tmp_path, {"loss": loss},
        {"x": (x, rng.normal(0, 1, x.shape)), "t": (t, np.array([[0], [1]]))}, filename, **args)
    np.testing.assert_array_equal(got["loss"], expected["loss"])
    assert sorted(net.inputs) == ["t", "x"]


def test_resnet23_round_trips_and_runs_at_another_batch_size(tmp_path, rng):
    x = nn.Variable((2, 3, 32, 32))
    y = resnet23_prediction(x, test=True, ncls=4, nmaps=8)
    randomize_parameters()
    image = rng.normal(0, 1, x.shape)
    expected, got, _ = round_trip(tmp_path, {"y": y}, {"x": (x, image)}, "resnet.nnp",
                                  parameter_format=".protobuf")
    np.testing.assert_array_equal(got["y"], expected["y"])
    with nn.parameter_scope("other"):
        net = NnpLoader(str(tmp_path / "resnet.nnp")).get_network("net", batch_size=1)
        one = run(net, {"x": image[1:]})
    np.testing.assert_allclose(one["y"], expected["y"][1:], rtol=1e-5, atol=1e-6)


def every_function(x, t):
    """A graph with every function dpnb writes, but SyncBatchNormalization (which needs
    a communicator); dropout and augmentation with fixed seeds."""
    h = PF.convolution(x, 4, (3, 3), pad=(1, 1), name="conv")
    h = PF.batch_normalization(h, batch_stat=False, name="bn")
    a = F.elu(h, 0.5) + F.leaky_relu(h, 0.2) - F.tanh(h)
    a = F.sigmoid(a) * F.relu(h)
    a = F.average_pooling(a, (2, 2), pad=(1, 1), including_pad=False)
    m = F.max_pooling(F.image_augmentation(h, flip_lr=True, angle=0.3, seed=7), (3, 3),
                      stride=(2, 2), ignore_border=False)
    g = F.global_average_pooling(F.dropout(h, 0.25, seed=5))
    s = F.concatenate(F.reshape(a, (2, -1)), F.reshape(m, (2, -1)), F.reshape(g, (2, -1)),
                      axis=1)
    s = F.identity(F.slice(s, start=(1,), stop=(-1,), step=(2,)))
    p = PF.affine(s, 6, name="fc")
    q = F.exp(F.mul_scalar(p, 0.1)) + F.log(F.add_scalar(F.sigmoid(p), 0.5))
    q = F.div2(q, F.pow_scalar(F.add_scalar(F.exp(p), 1.0), 2.0))
    q = F.pow2(F.add_scalar(F.sigmoid(q), 0.5), F.r_sub_scalar(F.sigmoid(p), 2.0))
    q = F.r_div_scalar(F.add_scalar(q, 1.0), 3.0) + F.r_pow_scalar(F.tanh(q), 1.5)
    q = F.transpose(F.reshape(q, (2, 2, 3)), (0, 2, 1))
    q = F.sub2(q, F.sum(q, axis=(1, 2), keepdims=True) * 0.01)
    value, index = F.max(q, axis=1, keepdims=True, with_index=True)
    r = F.mean(q, axis=(1, 2), keepdims=True) * value + F.min(q, axis=2, keepdims=True)
    logits = F.reshape(r, (2, -1))
    return {"y": F.log_softmax(logits, axis=1) + F.softmax(logits, axis=1),
            "ce": F.softmax_cross_entropy(logits, t, axis=1),
            "err": F.top_n_error(logits, t, axis=1, n=2),
            "index": index, "only_index": F.min(q, axis=1, only_index=True),
            "sink": F.sink(F.squared_error(logits, F.sigmoid(logits)),
                           F.sigmoid_cross_entropy(logits, F.sigmoid(logits)))}


def test_every_function_round_trips(tmp_path, rng):
    x, t = nn.Variable((2, 2, 6, 6)), nn.Variable((2, 1))
    outputs = every_function(x, t)
    written = {type(fn).__name__ for v in outputs.values() for fn in _functions(v)}
    assert set(exported_types()) - written == {"SyncBatchNormalization"}
    randomize_parameters()
    expected, got, _ = round_trip(
        tmp_path, outputs, {"x": (x, rng.normal(0, 1, x.shape)), "t": (t, np.array([[0], [2]]))},
        "ops.nnp", parameter_format=".protobuf")
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def _functions(v):
    found = []
    v.visit(found.append)
    return found


def test_batch_axis_is_written_as_minus_one(tmp_path):
    x = nn.Variable((2, 3, 8, 8))
    y = F.reshape(PF.convolution(x, 2, (3, 3), name="c"), (2, -1))
    buffer = io.StringIO()
    save(buffer, {"networks": [{"name": "n", "batch_size": 2, "outputs": {"y": y},
                                "names": {"x": x}}]}, extension=".nntxt")
    text = buffer.getvalue()
    assert 'name: "@n/Convolution"' in text and 'name: "@n/Convolution_out"' in text
    assert "dim: -1\n      dim: 3\n      dim: 8" in text  # x
    assert "shape {\n        dim: -1\n        dim: 72\n      }" in text  # Reshape's target
    fixed = io.StringIO()
    save(fixed, {"networks": [{"name": "n", "batch_size": 2, "outputs": {"y": y},
                               "names": {"x": x}}]}, variable_batch_size=False,
         extension=".nntxt")
    assert "dim: -1" not in fixed.getvalue()


def small_network_file(tmp_path, filename="net.nntxt", **args):
    x = nn.Variable((2, 3))
    y = F.relu(PF.affine(x, 2, name="fc"))
    path = tmp_path / filename
    save(str(path), {"networks": [{"name": "net", "batch_size": 2, "outputs": {"y": y},
                                   "names": {"x": x}}]}, **args)
    return path


def test_unknown_function_type_is_named(tmp_path):
    path = small_network_file(tmp_path, include_params=True)
    path.write_text(path.read_text().replace('type: "ReLU"', 'type: "Swish"'))
    with pytest.raises(DpnbError, match="'Swish'"):
        NnpLoader(str(path)).get_network("net")


def test_file_without_parameters(tmp_path):
    path = small_network_file(tmp_path)
    with pytest.raises(DpnbError, match="parameter 'fc/affine/W'"):
        NnpLoader(str(path)).get_network("net")


def test_missing_network(tmp_path):
    loader = NnpLoader(str(small_network_file(tmp_path, include_params=True)))
    with pytest.raises(DpnbError, match=r"no network 'other'.*\['net'\]"):
        loader.get_network("other")


def test_truncated_nnp(tmp_path):
    path = small_network_file(tmp_path, "net.nnp", parameter_format=".protobuf")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(DpnbError, match="truncated"):
        NnpLoader(str(path))


def test_nnp_layout_is_nnablas(tmp_path):
    path = small_network_file(tmp_path, "net.nnp", parameter_format=".protobuf")
    with zipfile.ZipFile(path) as nnp:
        assert nnp.namelist() == ["nnp_version.txt", "network.nntxt", "parameter.protobuf"]
        assert nnp.read("nnp_version.txt") == b"0.1\n"


def test_function_without_nnabla_form_is_refused(tmp_path):
    class Double(Function):
        def setup(self, inputs):
            return [(inputs[0].shape, inputs[0].dtype)]

        def forward(self, xp, xs):
            return (xs[0] * 2,)

    x = nn.Variable((2, 3))
    with pytest.raises(DpnbError, match="Double cannot be written"):
        save(str(tmp_path / "n.nnp"), {"networks": [{"name": "n", "outputs": {"y": Double()(x)},
                                                     "names": {"x": x}}]})
    assert not (tmp_path / "n.nnp").exists()


def test_unsupported_extension(tmp_path):
    with pytest.raises(DpnbError, match="'.zip'"):
        small_network_file(tmp_path, "net.zip")

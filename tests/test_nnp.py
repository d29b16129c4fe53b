"""nnabla's network files (dpnb.utils.save, dpnb.utils.nnp_graph): files written by nnabla
1.39 run on dpnb with nnabla's outputs (tests/fixtures/nnabla/record_nnp.py), and dpnb's
own networks round-trip through save and NnpLoader with identical outputs."""
import importlib
import importlib.util
import inspect
import io
import pkgutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

import dpnb as nn
import dpnb.functions as F
import dpnb.functions as functions_package
import dpnb.parametric_functions as PF
from dpnb.errors import DpnbError
from dpnb.graph import Function
from dpnb.models import resnet23_prediction, tutorial_network
from dpnb.formats import nnabla_pb2
from dpnb.formats.function_specs import (
    NOT_WRITABLE,
    exported_types,
    spec_of_class,
    spec_of_function,
    spec_of_type,
)
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
    h = PF.fused_batch_normalization(h, F.tanh(h), batch_stat=False, name="fbn")
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
    written = {spec_of_function(fn).type_name for v in outputs.values()
               for fn in _functions(v)}
    assert {"Affine", "Convolution", "BatchNormalization", "ImageAugmentation"} <= written
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
    path.write_text(path.read_text().replace('type: "ReLU"', 'type: "NoSuchFunction"'))
    with pytest.raises(DpnbError, match="'NoSuchFunction'"):
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
        def output_specs(self, inputs):
            return [(inputs[0].shape, inputs[0].dtype)]

        def forward_arrays(self, xp, xs):
            return (xs[0] * 2,)

    x = nn.Variable((2, 3))
    with pytest.raises(DpnbError, match="Double cannot be written"):
        save(str(tmp_path / "n.nnp"), {"networks": [{"name": "n", "outputs": {"y": Double()(x)},
                                                     "names": {"x": x}}]})
    assert not (tmp_path / "n.nnp").exists()


def test_unsupported_extension(tmp_path):
    with pytest.raises(DpnbError, match="'.zip'"):
        small_network_file(tmp_path, "net.zip")


def _record_module():
    """record_nnp.py, whose network builders take the library's F (nnabla is imported
    only inside its recording functions)."""
    spec = importlib.util.spec_from_file_location("record_nnp", FIXTURES.parent / "record_nnp.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RECORD = _record_module()
FUNCTION_INPUTS = {name[len("functions_in_"):]: EXPECTED[name] for name in EXPECTED.files
                   if name.startswith("functions_in_")}


def network_text(path) -> str:
    with zipfile.ZipFile(path) as nnp:
        return nnp.read("network.nntxt").decode("utf-8")


def assert_recorded(out: dict, prefix: str, every: bool = True) -> None:
    """``out`` equals nnabla's recorded outputs (all of them, unless not ``every``)."""
    recorded = sorted(k[len(prefix):] for k in EXPECTED.files if k.startswith(prefix))
    assert sorted(out) == recorded if every else set(out) <= set(recorded)
    for name, value in out.items():
        np.testing.assert_allclose(value, EXPECTED[prefix + name], rtol=2e-5, atol=2e-5,
                                   err_msg=name)


def test_nnabla_runs_dpnbs_file_of_the_new_functions(tmp_path):
    """dpnb writes today what nnabla 1.39 read (record_nnp.py), and nnabla's outputs of it
    are dpnb's."""
    contents, values = RECORD.functions_contents(nn, F)
    for name, value in values.items():
        np.testing.assert_array_equal(value, FUNCTION_INPUTS[name])
    save(str(tmp_path / "functions.nnp"), contents, variable_batch_size=False)
    assert network_text(tmp_path / "functions.nnp") == network_text(
        FIXTURES / "dpnb_functions.nnp")
    net = NnpLoader(str(FIXTURES / "dpnb_functions.nnp")).get_network("functions")
    assert_recorded(run(net, FUNCTION_INPUTS), "dpnb_functions_")
    outputs = contents["networks"][0]["outputs"]
    nn.forward_all(list(outputs.values()))
    assert_recorded({k: v.d for k, v in outputs.items()}, "dpnb_functions_", every=False)


def test_nnablas_file_of_the_new_functions_runs_with_nnablas_outputs():
    net = NnpLoader(str(FIXTURES / "nnabla_functions.nnp")).get_network("functions")
    # nnabla's tensor_normalization over one axis is a batch normalization whose running
    # statistics (unused: it normalizes by the batch's) become inputs of the file.
    assert set(net.inputs) - set(FUNCTION_INPUTS) == {"@functions/BatchNormalization_in",
                                                      "@functions/BatchNormalization_in_1"}
    assert_recorded(run(net, FUNCTION_INPUTS), "nnabla_functions_")


def stateful_network(v):
    """Functions whose outputs depend on seeds or change their inputs (outside the
    nnabla-recorded network): seeded draws repeat in the loaded graph."""
    x, a, pos = v["x"], v["a"], v["pos"]
    return {
        "dropout": F.dropout(a, 0.3, seed=3),
        "rand": F.rand(-1, 2, (2, 3), seed=1) + F.randn(0.5, 2.0, (2, 3), seed=2),
        "randint": F.randint(0, 5, (2, 3), seed=3),
        "draws": (F.rand_binomial(4, 0.3, (2, 3), seed=4) + F.rand_beta(0.5, 1.5, (2, 3), seed=5)
                  + F.rand_gamma(2.0, 0.5, (2, 3), seed=6)),
        "choice": F.random_choice(a, pos, shape=(3,), replace=True, seed=7),
        "crop": F.random_crop(x, (2, 3), base_axis=1, seed=8),
        "random_flip": F.random_flip(x, axes=(2, 3), seed=9),
        "random_shift": F.random_shift(x, (0, 0, 1, 1), border_mode="reflect", seed=10),
        "erase": F.random_erase(x, prob=0.9, n=2, seed=11),
        "nonzero": F.nonzero(F.greater_scalar(a, 0)),
        "unlink": F.unlink(a) * a,
        "mean_sub": F.mean_subtraction(a, v["mean"], v["t"], update_running_mean=False),
        "spectral": F.spectral_norm(v["w"], v["u"], itr=2, test=True),
        "assign": F.assign(v["dst"], a),
        "unique": F.unique(F.round(a), with_index=True, with_counts=True)[0],
        "bool_gather": F.bool_gather(a, F.greater_scalar(a, 1.0)),
        "patch_correlation": F.patch_correlation(
            F.transpose(x, (0, 2, 3, 1)), F.transpose(x, (0, 2, 3, 1)) * 0.5, patch=(2, 1),
            shift=(1, 1), padding=(1, 0, 1, 1), channel_last=True),
        "bool_scatter": F.bool_scatter(F.reshape(a, (12,)), F.greater_scalar(v["dst"], 0.0)),
        "binary_activations": F.binary_sigmoid(a - 1.0) + F.binary_tanh(1.0 - a),
        "binary_affines": (F.binary_connect_affine(a, v["bw"], v["bwb"], v["bb"])
                           + F.binary_weight_affine(a, v["bw"], v["bwb"], v["balpha"])),
        "binary_convolutions": (
            F.binary_connect_convolution(x, v["cw"], v["cwb"], pad=(1, 1), stride=(2, 2))
            + F.binary_weight_convolution(x, v["cw"], v["cwb"], v["calpha"], pad=(1, 1),
                                          stride=(2, 2))),
        "quantized": (F.prune(a, 0.5) + F.fixed_point_quantize(a, n=4, delta=0.25)
                      + F.pow2_quantize(a, n=4, m=1)
                      + F.min_max_quantize(a, v["qr_min"], v["qr_max"], v["ql_min"],
                                           v["ql_max"], x_min_max=True)),
        "linear_quantized": F.dequantize_linear(
            F.quantize_linear(a, v["scale"], v["zero_point"]), v["scale"], v["zero_point"]),
        "detections": F.nms_detection2d(v["det"] - 1.0, thresh=0.1, nms=0.3, nms_per_class=False),
        "onnx_nms": F.onnx_non_max_suppression(v["boxes"] - 1.0, v["scores"] - 0.5, 1, 2, 0.2,
                                               0.1),
        "roi_align": F.roi_align(x, v["rois"], (2, 3), (1.5, 1.0), 2),
        "deformable": (F.deformable_convolution(x, v["dw"], v["doff"], v["dmask"], v["db"],
                                                pad=(1, 1))
                       + F.deformable_convolution(x, v["dw"], v["doff"], None, v["db"],
                                                  pad=(1, 1))),
        "adaptive_separable": F.adaptive_separable_convolution(x, v["kv"], v["kh"]),
        "warped": (F.warp_by_grid(x, F.affine_grid(v["theta"], (3, 2)), "linear", "reflect", True)
                   + F.warp_by_grid(x, F.affine_grid(v["theta"], [3, 2], True), "nearest",
                                    "repeat")),
        "flowed": F.warp_by_flow(x, v["flow"]),
        "inq_affine": F.inq_affine(a, v["iw"], v["iind"], v["bb"], num_bits=3,
                                   inq_iterations=(0, 2), selection_algorithm="largest_abs"),
        "inq_convolution": F.inq_convolution(x, v["icw"], v["icind"], pad=(1, 1), group=1,
                                             inq_iterations=(0,), seed=4,
                                             selection_algorithm="random"),
        "short_time": (
            F.istft(*F.stft(v["sig"], 8, 4, 8), 8, 4, 8, pad_mode="constant")
            + F.istft(*F.stft(v["sig"], 6, 4, 8, "hamming", True, "constant", True), 6, 4, 8,
                      "hamming", True, "reflect", True)),
        "fourier": F.ifft(F.fft(v["cplx"], 1), 2, normalized=True),
    }


# The shapes of stateful_network's inputs.
STATEFUL_INPUTS = {"x": (2, 3, 4, 4), "a": (2, 6), "pos": (2, 6), "mean": (6,), "t": (1,),
                   "w": (4, 6), "u": (4,), "dst": (2, 6), "bw": (6, 3), "bwb": (6, 3),
                   "bb": (3,), "balpha": (3,), "cw": (2, 3, 2, 2), "cwb": (2, 3, 2, 2),
                   "calpha": (2,), "qr_min": (1, 1), "qr_max": (1, 1), "ql_min": (1, 1),
                   "ql_max": (1, 1), "scale": (1, 1), "zero_point": (1, 1),
                   "det": (2, 5, 7), "boxes": (2, 5, 4), "scores": (2, 3, 5), "rois": (3, 5),
                   "dw": (2, 3, 3, 3), "doff": (2, 18, 4, 4), "dmask": (2, 9, 4, 4), "db": (2,),
                   "kv": (2, 2, 3, 3), "kh": (2, 2, 3, 3), "theta": (2, 2, 3),
                   "flow": (2, 2, 4, 4),
                   "iw": (6, 3), "iind": (6, 3), "icw": (2, 3, 2, 2), "icind": (2, 3, 2, 2),
                   "sig": (2, 32), "cplx": (2, 4, 3, 2)}


def test_every_new_function_round_trips(tmp_path, rng):
    contents, values = RECORD.functions_contents(nn, F)
    outputs = dict(contents["networks"][0]["outputs"])
    inputs = {name: (v, values[name]) for name, v in contents["networks"][0]["names"].items()}
    for name, shape in STATEFUL_INPUTS.items():
        inputs[f"s_{name}"] = (nn.Variable(shape), rng.uniform(0.5, 1.5, shape))
    stateful = stateful_network({name: inputs[f"s_{name}"][0] for name in STATEFUL_INPUTS})
    assert not set(stateful) & set(outputs)  # one name for two outputs would hide one
    outputs.update(stateful)
    expected, got, _ = round_trip(tmp_path, outputs, inputs, "functions.nnp",
                                  variable_batch_size=False)
    # The file's outputs are also the results no function reads (GRU's h ...), unnamed.
    assert set(expected) <= set(got)
    assert all(name.startswith("@net/") for name in set(got) - set(expected))
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def _function_classes():
    """Every public Function class of dpnb.functions' modules (not the shared bases)."""
    found = {}
    for info in pkgutil.iter_modules(functions_package.__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"dpnb.functions.{info.name}")
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, Function)
                    and value.__module__ == module.__name__ and not name.startswith("_")):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_function_class_has_a_spec_or_a_reason():
    classes = _function_classes()
    assert len(classes) > 150
    missing = [name for name, cls in classes.items()
               if spec_of_class(cls) is None and cls not in NOT_WRITABLE]
    assert missing == []
    assert all(spec_of_class(cls) is None for cls in NOT_WRITABLE)


def test_every_spec_is_written_by_some_test_network(rng):
    """The round-trip networks above use every function type dpnb writes (but the two
    whose inputs a file cannot hold, checked below)."""
    x, t = nn.Variable((2, 2, 6, 6)), nn.Variable((2, 1))
    contents, _ = RECORD.functions_contents(nn, F)
    outputs = [*every_function(x, t).values(), *contents["networks"][0]["outputs"].values(),
               *stateful_network({k: nn.Variable(s) for k, s in STATEFUL_INPUTS.items()}).values()]
    written = {spec_of_function(fn).type_name for v in outputs for fn in _functions(v)}
    written |= {spec_of_function(y.parent).type_name for y in data_dependent_functions()}
    assert set(exported_types()) - written == {"SyncBatchNormalization"}


def data_dependent_functions():
    """Functions whose inputs a file's data variables cannot hold before the data come
    (unsigned integers; lengths that fix the output's shape): made from arrays."""
    data = nn.Variable.from_numpy_array
    x, s = data(np.array([1, 2, 12], np.uint8)), data(np.array([1, 2, 3], np.uint8))
    padded = data(np.arange(24, dtype=np.float32).reshape(4, 2, 3))
    packed, sizes = F.pack_padded_sequence(padded, data(np.array([4, 3])))
    unpacked = F.pad_packed_sequence(packed, sizes, batch_first=True, padding_value=-1.0,
                                     total_length=5)
    return [F.bit_shift(x, s, "RIGHT"), packed, *unpacked]


def test_data_dependent_functions_are_written_and_read_back(tmp_path):
    """Written to a file, their parameters read back and built on the same inputs give
    the same outputs."""
    outputs = data_dependent_functions()
    save(str(tmp_path / "n.nntxt"), {"networks": [{"name": "n", "outputs": {
        f"y{i}": y for i, y in enumerate(outputs)}}]}, variable_batch_size=False)
    loader = NnpLoader(str(tmp_path / "n.nntxt"))
    written = {f.type: f for f in loader.network_dict["n"].function}
    assert sorted(written) == ["BitShift", "PackPaddedSequence", "PadPackedSequence"]
    for y in outputs[:3]:  # one output of each function
        f = written[spec_of_function(y.parent).type_name]
        spec = spec_of_type(f.type)
        params = {fd.name: getattr(getattr(f, spec.param_field), fd.name)
                  for fd in getattr(f, spec.param_field).DESCRIPTOR.fields}
        built = spec.build(y.parent.inputs, params, len(f.output))
        built = built if isinstance(built, tuple) else (built,)
        nn.forward_all(list(built) + y.parent.outputs)
        for got, want in zip(built, y.parent.outputs):
            np.testing.assert_array_equal(got.d, want.d)
    assert outputs[0].d.tolist() == [0, 0, 1]
    assert outputs[2].shape == (2, 5, 3) and float(outputs[2].d[1, 3, 0]) == -1.0


def test_spec_fields_are_the_schemas():
    """Each spec names its type's ``*_param`` message and exports exactly its fields."""
    fields = nnabla_pb2.Function.DESCRIPTOR.fields_by_name
    for type_name in exported_types():
        spec = spec_of_type(type_name)
        if spec.param_field is not None:
            assert fields[spec.param_field].message_type.name == f"{type_name}Parameter"


def test_channel_first_patch_correlation_is_refused(tmp_path):
    x = nn.Variable((1, 2, 4, 4))
    with pytest.raises(DpnbError, match="channel_last=False cannot be written"):
        save(str(tmp_path / "p.nntxt"), {"networks": [{"name": "n", "outputs": {
            "y": F.patch_correlation(x, x)}, "names": {"x": x}}]})


def test_broadcast_keeps_a_variable_batch_axis(tmp_path, rng):
    """As nnabla, a Broadcast whose input has the batch axis writes -1 there; the file
    runs at another batch size."""
    x = nn.Variable((2, 1))
    y = F.broadcast(PF.affine(x, 1, name="fc"), (2, 3))
    randomize_parameters()
    path = tmp_path / "b.nntxt"
    save(str(path), {"networks": [{"name": "n", "batch_size": 2, "outputs": {"y": y},
                                   "names": {"x": x}}]}, include_params=True)
    assert "shape {\n        dim: -1\n        dim: 3\n      }" in path.read_text()
    with nn.parameter_scope("loaded"):
        net = NnpLoader(str(path)).get_network("n", batch_size=4)
        value = rng.normal(0, 1, (4, 1))
        out = run(net, {"x": value})
    w, b = (nn.get_parameters()[k].d for k in ("fc/affine/W", "fc/affine/b"))
    np.testing.assert_allclose(out["y"], np.repeat(value @ w + b, 3, axis=1), rtol=1e-6)


def test_broadcast_that_moves_the_batch_axis_is_refused(tmp_path):
    x = nn.Variable((2, 3))
    y = F.broadcast(F.reshape(PF.affine(x, 1, name="fc"), (2,)), (3, 2))
    with pytest.raises(DpnbError, match=r"Broadcast gives shape \[3, 2\].*variable_batch_size"):
        save(str(tmp_path / "b.nntxt"), {"networks": [{"name": "n", "outputs": {"y": y},
                                                       "names": {"x": x}}]})


def test_svd_affine_network_round_trips_through_nnp(tmp_path, rng):
    """As nnabla-examples compress a classifier: low-rank affines (U, V from the SVD of a
    seeded weight) saved to .nnp with their parameters and loaded into a fresh scope give
    the same outputs, and the file holds nnabla's parameter names."""
    x = nn.Variable((2, 1, 6, 6))
    h = F.relu(PF.svd_affine(x, 16, 4, rng=np.random.RandomState(1), name="fc1"))
    y = PF.svd_affine(h, 3, 2, rng=np.random.RandomState(2), name="fc2")
    expected, got, _ = round_trip(tmp_path, {"y": y}, {"x": (x, rng.normal(0, 1, x.shape))},
                                  "svd.nnp")
    np.testing.assert_allclose(got["y"], expected["y"], rtol=1e-6, atol=1e-6)
    with nn.parameter_scope("loaded"):
        loaded = nn.get_parameters()
    assert sorted(loaded) == [f"fc{i}/svd_affine/{p}" for i in (1, 2) for p in "UVb"]
    assert loaded["fc1/svd_affine/U"].shape == (36, 4)
    assert loaded["fc1/svd_affine/V"].shape == (4, 16)

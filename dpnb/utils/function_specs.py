"""How each dpnb Function is written in nnabla's network files and rebuilt from them:
nnabla's type name, its ``*_param`` field, the field values of a function in a graph,
and the dpnb call that adds the function back to a graph.

Parameters travel as plain dicts (field name -> number, bool, str or list of ints), so
this table knows nothing of protobuf; the readers and writers of ``.nnp`` files turn
the dicts into nnabla's messages and back."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import functions as F
from ..errors import DpnbError
from ..functions import (activation, array, loss, math, nn, normalization, pooling, reduction,
                         stochastic)
from ..graph import Function, Variable

Params = dict[str, object]
Built = Variable | tuple[Variable, ...]


@dataclass(frozen=True)
class FunctionSpec:
    """One function as nnabla's files know it.

    ``export`` gives the ``param_field`` values of a function that has been set up;
    ``build`` adds the function to a graph from its inputs, those values (every field
    of the message, defaults included) and its number of outputs."""

    type_name: str
    cls: type
    param_field: str | None
    export: Callable[[Function], Params]
    build: Callable[[list[Variable], Params, int], Built]


def _no_params(fn: Function) -> Params:
    return {}


def _inplace(fn: Function) -> Params:
    return {"inplace": False}


def _val(fn: Function) -> Params:
    return {"val": float(fn.val)}


def _with_inplace(export: Callable[[Function], Params]) -> Callable[[Function], Params]:
    return lambda fn: {**export(fn), "inplace": False}


def _unary(call: Callable) -> Callable[[list[Variable], Params, int], Built]:
    return lambda xs, p, n: call(xs[0])


def _binary(call: Callable) -> Callable[[list[Variable], Params, int], Built]:
    return lambda xs, p, n: call(xs[0], xs[1])


def _scalar(call: Callable) -> Callable[[list[Variable], Params, int], Built]:
    return lambda xs, p, n: call(xs[0], p["val"])


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _affine(xs, p, n):
    return F.affine(*xs, base_axis=p["base_axis"])


def _convolution_params(fn) -> Params:
    base_axis = fn.base_axis + fn.inputs[0].ndim if fn.base_axis < 0 else fn.base_axis
    return {"base_axis": int(base_axis), "pad": _ints(fn.pad), "stride": _ints(fn.stride),
            "dilation": _ints(fn.dilation), "group": fn.group,
            "channel_last": bool(fn.channel_last)}


def _convolution(xs, p, n):
    return F.convolution(*xs, base_axis=p["base_axis"], pad=p["pad"], stride=p["stride"],
                         dilation=p["dilation"], group=p["group"],
                         channel_last=p["channel_last"])


def _pooling_params(fn) -> Params:
    win = fn.win
    return {"kernel": _ints(win.kernel), "stride": _ints(win.stride),
            "ignore_border": bool(fn.args[2]), "pad": _ints(win.pad),
            "channel_last": bool(fn.args[4])}


def _average_pooling_params(fn) -> Params:
    return {**_pooling_params(fn), "including_pad": bool(fn.including_pad)}


def _max_pooling(xs, p, n):
    return F.max_pooling(xs[0], p["kernel"], p["stride"], p["ignore_border"], p["pad"],
                         p["channel_last"])


def _average_pooling(xs, p, n):
    return F.average_pooling(xs[0], p["kernel"], p["stride"], p["ignore_border"], p["pad"],
                             p["channel_last"], p["including_pad"])


def _axis(fn) -> Params:
    return {"axis": int(fn.axis)}


def _reduction_params(fn) -> Params:
    return {"axes": _ints(fn.axes), "keep_dims": fn.keepdims}


def _extremum_params(fn) -> Params:
    kept = fn.outputs_kept
    return {**_reduction_params(fn), "with_index": kept == "both", "only_index": kept == "index"}


def _reduction(call: Callable) -> Callable[[list[Variable], Params, int], Built]:
    return lambda xs, p, n: call(xs[0], axis=tuple(p["axes"]), keepdims=p["keep_dims"])


def _extremum(call: Callable) -> Callable[[list[Variable], Params, int], Built]:
    return lambda xs, p, n: call(xs[0], axis=tuple(p["axes"]), keepdims=p["keep_dims"],
                                 with_index=p["with_index"], only_index=p["only_index"])


def _slice_params(fn) -> Params:
    """Start, stop and step of the axes given (the last ones, as in nnabla), as the
    non-negative bounds Python resolves (a stop before index 0 of a reversed slice as
    one below -size, so that it stays there)."""
    given = [len(v) for v in (fn.start, fn.stop, fn.step) if v is not None]
    n = given[0] if given else len(fn.in_shape)
    start, stop, step = [], [], []
    for index, size in list(zip(fn.index, fn.in_shape))[len(fn.in_shape) - n:]:
        a, b, s = index.indices(size)
        start.append(a)
        stop.append(b if b >= 0 else -size - 1)
        step.append(s)
    return {"start": start, "stop": stop, "step": step}


def _batch_norm_params(fn) -> Params:
    if not {"mean", "variance"} <= set(fn.roles):
        raise DpnbError(f"{fn.name} without running mean and variance (None given) cannot be "
                        "written in nnabla's format, which always has them; pass parameters "
                        "for mean and variance (as PF.batch_normalization does)")
    return {"axes": _ints(fn.axes), "decay_rate": fn.decay_rate, "eps": fn.eps,
            "batch_stat": fn.batch_stat, "no_scale": "gamma" not in fn.roles,
            "no_bias": "beta" not in fn.roles}


def _batch_norm_inputs(xs: list[Variable], p: Params, type_name: str) -> list:
    """x, beta, gamma, mean, variance, with None for the beta and gamma the file leaves out."""
    roles = [r for r, absent in (("beta", p.get("no_bias")), ("gamma", p.get("no_scale")))
             if not absent] + ["mean", "variance"]
    if len(xs) != 1 + len(roles):
        raise DpnbError(f"{type_name} has {len(xs)} inputs in the file, expected "
                        f"{1 + len(roles)} (x, {', '.join(roles)}); the file is inconsistent")
    given = dict(zip(roles, xs[1:]))
    return [xs[0]] + [given.get(r) for r in ("beta", "gamma", "mean", "variance")]


def _batch_norm(xs, p, n):
    return F.batch_normalization(*_batch_norm_inputs(xs, p, "BatchNormalization"),
                                 axes=p["axes"], decay_rate=p["decay_rate"], eps=p["eps"],
                                 batch_stat=p["batch_stat"], output_stat=n == 3)


def _sync_batch_norm_params(fn) -> Params:
    params = _batch_norm_params(fn)
    if params["no_scale"] or params["no_bias"]:
        raise DpnbError(f"{fn.name} without beta or gamma cannot be written in nnabla's format, "
                        "whose SyncBatchNormalization always has both; pass both parameters")
    return {"comm": {}, "group": fn.group, "axes": params["axes"],
            "decay_rate": params["decay_rate"], "eps": params["eps"],
            "batch_stat": params["batch_stat"]}


def _sync_batch_norm(xs, p, n):
    """Read back as plain batch normalization where it uses the running statistics (the
    same computation, nothing exchanged): a file cannot hold the communicator that batch
    statistics need."""
    if p["batch_stat"]:
        raise DpnbError("SyncBatchNormalization with batch_stat=True needs a communicator, which "
                        "a network file cannot hold; load the network for inference "
                        "(batch_stat=False) or build it in code with F.sync_batch_normalization")
    return F.batch_normalization(*xs, axes=p["axes"], decay_rate=p["decay_rate"], eps=p["eps"],
                                 batch_stat=False, output_stat=n == 3)


def _image_augmentation_params(fn) -> Params:
    names = ("min_scale", "max_scale", "angle", "aspect_ratio", "distortion", "flip_lr",
             "flip_ud", "brightness", "brightness_each", "contrast", "contrast_center",
             "contrast_each", "noise", "seed")
    return {"shape": _ints(fn.out_shape[-2:]), "pad": _ints(fn.pad),
            **{name: getattr(fn, name) for name in names}}


def _image_augmentation(xs, p, n):
    fields = {k: v for k, v in p.items() if k != "shape"}
    return F.image_augmentation(xs[0], shape=p["shape"] or None, **fields)


_SPECS = [
    FunctionSpec("Affine", nn.Affine, "affine_param",
                 lambda fn: {"base_axis": int(fn.base_axis)}, _affine),
    FunctionSpec("Convolution", nn.Convolution, "convolution_param", _convolution_params,
                 _convolution),
    FunctionSpec("ReLU", activation.ReLU, "relu_param", _inplace, _unary(F.relu)),
    FunctionSpec("ELU", activation.ELU, "elu_param", lambda fn: {"alpha": float(fn.alpha)},
                 lambda xs, p, n: F.elu(xs[0], p["alpha"])),
    FunctionSpec("LeakyReLU", activation.LeakyReLU, "leaky_relu_param",
                 _with_inplace(lambda fn: {"alpha": float(fn.alpha)}),
                 lambda xs, p, n: F.leaky_relu(xs[0], p["alpha"])),
    FunctionSpec("Tanh", activation.Tanh, None, _no_params, _unary(F.tanh)),
    FunctionSpec("Sigmoid", activation.Sigmoid, None, _no_params, _unary(F.sigmoid)),
    FunctionSpec("Softmax", activation.Softmax, "softmax_param", _axis,
                 lambda xs, p, n: F.softmax(xs[0], p["axis"])),
    FunctionSpec("LogSoftmax", activation.LogSoftmax, "log_softmax_param", _axis,
                 lambda xs, p, n: F.log_softmax(xs[0], p["axis"])),
    FunctionSpec("Add2", math.Add2, "add2_param", _inplace, _binary(F.add2)),
    FunctionSpec("Sub2", math.Sub2, "sub2_param", _inplace, _binary(F.sub2)),
    FunctionSpec("Mul2", math.Mul2, "mul2_param", _inplace, _binary(F.mul2)),
    FunctionSpec("Div2", math.Div2, "div2_param", _inplace, _binary(F.div2)),
    FunctionSpec("Pow2", math.Pow2, "pow2_param", _inplace, _binary(F.pow2)),
    FunctionSpec("AddScalar", math.AddScalar, "add_scalar_param", _with_inplace(_val),
                 _scalar(F.add_scalar)),
    FunctionSpec("MulScalar", math.MulScalar, "mul_scalar_param", _with_inplace(_val),
                 _scalar(F.mul_scalar)),
    FunctionSpec("PowScalar", math.PowScalar, "pow_scalar_param", _with_inplace(_val),
                 _scalar(F.pow_scalar)),
    FunctionSpec("RSubScalar", math.RSubScalar, "r_sub_scalar_param", _val,
                 _scalar(F.r_sub_scalar)),
    FunctionSpec("RDivScalar", math.RDivScalar, "r_div_scalar_param", _val,
                 _scalar(F.r_div_scalar)),
    FunctionSpec("RPowScalar", math.RPowScalar, "r_pow_scalar_param", _val,
                 _scalar(F.r_pow_scalar)),
    FunctionSpec("Exp", math.Exp, None, _no_params, _unary(F.exp)),
    FunctionSpec("Log", math.Log, None, _no_params, _unary(F.log)),
    FunctionSpec("Sum", reduction.Sum, "sum_param", _reduction_params, _reduction(F.sum)),
    FunctionSpec("Mean", reduction.Mean, "mean_param", _reduction_params, _reduction(F.mean)),
    FunctionSpec("Max", reduction.Max, "max_param", _extremum_params, _extremum(F.max)),
    FunctionSpec("Min", reduction.Min, "min_param", _extremum_params, _extremum(F.min)),
    FunctionSpec("Reshape", array.Reshape, "reshape_param",
                 lambda fn: {"shape": _ints(fn.out_shape), "inplace": bool(fn.inplace)},
                 lambda xs, p, n: F.reshape(xs[0], p["shape"], p["inplace"])),
    FunctionSpec("Transpose", array.Transpose, "transpose_param",
                 lambda fn: {"axes": _ints(fn.axes)},
                 lambda xs, p, n: F.transpose(xs[0], p["axes"])),
    FunctionSpec("Concatenate", array.Concatenate, "concatenate_param", _axis,
                 lambda xs, p, n: F.concatenate(*xs, axis=p["axis"])),
    FunctionSpec("Slice", array.Slice, "slice_param", _slice_params,
                 lambda xs, p, n: F.slice(xs[0], p["start"], p["stop"], p["step"])),
    FunctionSpec("Identity", array.Identity, None, _no_params, _unary(F.identity)),
    FunctionSpec("Sink", array.Sink, "sink_param",
                 lambda fn: {"one_input_grad": fn.one_input_grad},
                 lambda xs, p, n: F.sink(*xs, one_input_grad=p["one_input_grad"])),
    FunctionSpec("MaxPooling", pooling.MaxPooling, "max_pooling_param", _pooling_params,
                 _max_pooling),
    FunctionSpec("AveragePooling", pooling.AveragePooling, "average_pooling_param",
                 _average_pooling_params, _average_pooling),
    FunctionSpec("GlobalAveragePooling", pooling.GlobalAveragePooling, None, _no_params,
                 _unary(F.global_average_pooling)),
    FunctionSpec("BatchNormalization", normalization.BatchNormalization,
                 "batch_normalization_param", _batch_norm_params, _batch_norm),
    FunctionSpec("SyncBatchNormalization", normalization.SyncBatchNormalization,
                 "sync_batch_normalization_param", _sync_batch_norm_params, _sync_batch_norm),
    FunctionSpec("SoftmaxCrossEntropy", loss.SoftmaxCrossEntropy, "softmax_cross_entropy_param",
                 _axis, lambda xs, p, n: F.softmax_cross_entropy(xs[0], xs[1], p["axis"])),
    FunctionSpec("SigmoidCrossEntropy", loss.SigmoidCrossEntropy, None, _no_params,
                 _binary(F.sigmoid_cross_entropy)),
    FunctionSpec("SquaredError", loss.SquaredError, None, _no_params, _binary(F.squared_error)),
    FunctionSpec("TopNError", loss.TopNError, "top_n_error_param",
                 lambda fn: {"axis": int(fn.axis), "n": int(fn.n)},
                 lambda xs, p, n: F.top_n_error(xs[0], xs[1], p["axis"], p["n"])),
    FunctionSpec("Dropout", stochastic.Dropout, "dropout_param",
                 lambda fn: {"p": fn.p, "seed": fn.seed},
                 lambda xs, p, n: F.dropout(xs[0], p["p"], p["seed"])),
    FunctionSpec("ImageAugmentation", stochastic.ImageAugmentation, "image_augmentation_param",
                 _image_augmentation_params, _image_augmentation),
]

# Looked up by the exact class, so that SyncBatchNormalization is not taken for its base.
_BY_CLASS = {spec.cls: spec for spec in _SPECS}
_BY_TYPE = {spec.type_name: spec for spec in _SPECS}


def spec_of_function(fn: Function) -> FunctionSpec:
    """The spec of a function in a dpnb graph, or an error naming a function with none."""
    spec = _BY_CLASS.get(type(fn))
    if spec is None:
        raise DpnbError(f"function {type(fn).__name__} cannot be written to an nnabla network "
                        f"file: dpnb knows how to write {', '.join(sorted(_BY_TYPE))}; "
                        "build the network from those")
    return spec


def spec_of_type(type_name: str) -> FunctionSpec:
    """The spec of an nnabla function type read from a file, or an error naming it."""
    spec = _BY_TYPE.get(type_name)
    if spec is None:
        raise DpnbError(f"the network uses function type {type_name!r}, which dpnb does not "
                        f"have; dpnb reads {', '.join(sorted(_BY_TYPE))}. Rebuild the model "
                        "with those functions or run it on nnabla")
    return spec


def exported_types() -> list[str]:
    """nnabla's type names of every function dpnb can write and read."""
    return list(_BY_TYPE)

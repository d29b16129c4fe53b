"""How each dpnb Function is written in nnabla's network files and rebuilt from them:
nnabla's type name, its ``*_param`` field, the field values of a function in a graph,
and the dpnb call that adds the function back to a graph.

Parameters travel as plain dicts (field name -> number, bool, str or list of ints), so
this table knows nothing of protobuf; the readers and writers of ``.nnp`` files turn
the dicts into nnabla's messages and back."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import functions as F
from ..errors import DpnbError
from ..functions import (activation, array, attention, elementary, indexing, linalg, logic, loss,
                         math, nn, normalization, pooling, recurrent, reduction, sequence,
                         stochastic, subscript)
from ..graph import Function, Variable, install_arguments

Params = dict[str, object]
Built = Variable | tuple[Variable, ...]


@dataclass(frozen=True)
class FunctionSpec:
    """One function as nnabla's files know it.

    ``export`` gives the ``param_field`` values of a function that has been set up;
    ``build`` adds the function to a graph from its inputs, those values (every field
    of the message, defaults included) and its number of outputs; ``arguments``, where
    given, the values the function was called with (``Function.arguments``) where they
    differ from those a file holds."""

    type_name: str
    cls: type
    param_field: str | None
    export: Callable[[Function], Params]
    build: Callable[[list[Variable], Params, int], Built]
    arguments: Callable[[Function], Params] | None = None


def _no_params(fn: Function) -> Params:
    return {}


def _inplace(fn: Function) -> Params:
    return {"inplace": False}


def _val(fn: Function) -> Params:
    return {"val": float(fn.val)}


def _bool_val(fn: Function) -> Params:
    return {"val": bool(fn.val)}


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


def _fused_batch_norm_params(fn) -> Params:
    params = _batch_norm_params(fn)
    if params["no_scale"] or params["no_bias"]:
        raise DpnbError(f"{fn.name} without beta or gamma cannot be written in nnabla's format, "
                        "whose FusedBatchNormalization always has both; pass both parameters")
    return {"axes": params["axes"], "decay_rate": params["decay_rate"], "eps": params["eps"],
            "batch_stat": params["batch_stat"], "nonlinearity": fn.nonlinearity}


def _fused_batch_norm(xs, p, n):
    x, beta, gamma, mean, variance, *z = xs
    return F.fused_batch_normalization(x, beta, gamma, mean, variance, z[0] if z else None,
                                       axes=p["axes"], decay_rate=p["decay_rate"], eps=p["eps"],
                                       batch_stat=p["batch_stat"],
                                       nonlinearity=p["nonlinearity"], output_stat=n == 3)


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


def _plain(value):
    """A parameter value as protobuf takes it: Python numbers, bools, strs, lists, dicts."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _attrs(*same: str, **other) -> Callable[[Function], Params]:
    """An export reading fields from the function's attributes: ``same`` under the
    field's own name, ``other`` maps a field to an attribute name or a getter."""
    def export(fn: Function) -> Params:
        values = {name: getattr(fn, name) for name in same}
        for name, source in other.items():
            values[name] = getattr(fn, source) if isinstance(source, str) else source(fn)
        return _plain(values)
    return export


def _call(call: Callable, *fields: str) -> Callable[[list[Variable], Params, int], Built]:
    """A build passing the inputs, then the fields as keywords of the same names."""
    return lambda xs, p, n: call(*xs, **{name: p[name] for name in fields})


def _false(fn: Function) -> bool:
    return False


def _none_to(value, default):
    return default if value is None else value


def _scale_bias(fn) -> Params:
    """nnabla's no_scale / no_bias: which of gamma and beta the function was not given."""
    return {"no_scale": "gamma" not in fn.roles, "no_bias": "beta" not in fn.roles}


def _axis_list(value) -> list[int]:
    return [int(value)] if isinstance(value, (int, np.integer)) else _ints(value)


def _standardization_inputs(xs: list[Variable], p: Params, type_name: str) -> list:
    """x, beta, gamma with None for the ones the file leaves out (nnabla's input order)."""
    roles = [r for r, absent in (("beta", p["no_bias"]), ("gamma", p["no_scale"])) if not absent]
    if len(xs) != 1 + len(roles):
        raise DpnbError(f"{type_name} has {len(xs)} inputs in the file, expected "
                        f"{1 + len(roles)} (x{''.join(', ' + r for r in roles)}); the file is "
                        "inconsistent")
    given = dict(zip(roles, xs[1:]))
    return [xs[0], given.get("beta"), given.get("gamma")]


def _layer_norm(xs, p, n):
    return F.layer_normalization(*_standardization_inputs(xs, p, "LayerNormalization"),
                                 batch_axis=p["batch_axis"], eps=p["eps"], output_stat=n == 3)


def _instance_norm(xs, p, n):
    return F.instance_normalization(*_standardization_inputs(xs, p, "InstanceNormalization"),
                                    channel_axis=p["channel_axis"], batch_axis=p["batch_axis"],
                                    eps=p["eps"], output_stat=n == 3)


def _group_norm(xs, p, n):
    return F.group_normalization(*_standardization_inputs(xs, p, "GroupNormalization"),
                                 num_groups=p["num_groups"], channel_axis=p["channel_axis"],
                                 batch_axis=p["batch_axis"], eps=p["eps"], output_stat=n == 3)


def _tensor_norm(xs, p, n):
    x, beta, gamma = _standardization_inputs(xs, p, "TensorNormalization")
    return F.tensor_normalization(x, p["axes"], beta, gamma, eps=p["eps"], output_stat=n == 3)


def _deconvolution_params(fn) -> Params:
    return {**_convolution_params(fn), "output_padding": _ints(fn.output_padding)}


def _depthwise_params(last: str) -> Callable[[Function], Params]:
    def export(fn) -> Params:
        params = _convolution_params(fn)
        del params["group"], params["channel_last"]
        return {**params, last: int(getattr(fn, last))}
    return export


def _patch_correlation_params(fn) -> Params:
    """nnabla's PatchCorrelation is the channel_last form (its F transposes the others)."""
    if not fn.channel_last:
        raise DpnbError("PatchCorrelation with channel_last=False cannot be written in "
                        "nnabla's format, whose PatchCorrelation takes NHWC arrays (nnabla "
                        "writes transposes around it); transpose x1 and x2 to NHWC and pass "
                        "channel_last=True")
    return _plain({name: getattr(fn, name)
                   for name in ("patch", "shift", "patch_step", "shift_step", "padding")})


def _recurrent(call: Callable, states: int, nonlinearity: bool):
    """x, the states, weight_l0, then weight where there are several layers and bias where
    the file has one more input (nnabla's input order)."""
    def build(xs, p, n):
        rest = list(xs[2 + states:])
        weight = rest.pop(0) if p["num_layers"] > 1 and rest else None
        bias = rest.pop(0) if rest else None
        options = {"nonlinearity": p["nonlinearity"]} if nonlinearity else {}
        return call(*xs[:2 + states], weight=weight, bias=bias, num_layers=p["num_layers"],
                    dropout=p["dropout"], bidirectional=p["bidirectional"],
                    training=p["training"], **options)
    return build


def _recurrent_params(fn) -> Params:
    return _plain({"num_layers": fn.num_layers, "dropout": fn.dropout,
                   "bidirectional": fn.bidirectional, "training": fn.training})


def _broadcast(xs, p, n):
    """A leading -1 (a variable batch size, as nnabla writes it) is the input's first size."""
    shape = list(p["shape"])
    if shape and shape[0] == -1:
        shape[0] = xs[0].shape[0]
    return F.broadcast(xs[0], shape)


def _scatter_nd(xs, p, n):
    if len(xs) == 3:
        return F.scatter_nd(xs[0], xs[1], out=xs[2], add=p["add"])
    return F.scatter_nd(xs[0], xs[1], shape=p["shape"], add=p["add"])


def _sort_params(fn) -> Params:
    return {"axis": int(fn.axis), "reverse": bool(fn.reverse),
            "with_index": fn.kept == "both", "only_index": fn.kept == "index"}


def _sampler(*names: str) -> Callable[[Function], Params]:
    return _attrs(*names, "shape", "seed")


def _generated(type_name: str, field: str, call: Callable) -> FunctionSpec:
    """arange, linspace and constant: one dpnb class, told apart by the type it keeps."""
    return FunctionSpec(type_name, array.Generated, field, lambda fn: _plain(dict(fn.args)),
                        lambda xs, p, n: call(**p))


def _no_param(type_name: str, cls: type, call: Callable) -> FunctionSpec:
    """A function whose nnabla form has no parameters: its inputs alone."""
    return FunctionSpec(type_name, cls, None, _no_params, lambda xs, p, n: call(*xs))


_NO_PARAM = [
    ("Tanh", activation.Tanh, F.tanh), ("Sigmoid", activation.Sigmoid, F.sigmoid),
    ("ReLU6", activation.ReLU6, F.relu6), ("GELU", activation.GELU, F.gelu),
    ("Mish", activation.Mish, F.mish), ("Swish", activation.Swish, F.swish),
    ("SoftSign", activation.SoftSign, F.softsign),
    ("LogSigmoid", activation.LogSigmoid, F.log_sigmoid),
    ("HardSigmoid", activation.HardSigmoid, F.hard_sigmoid),
    ("HardTanh", activation.HardTanh, F.hard_tanh),
    ("TanhShrink", activation.TanhShrink, F.tanh_shrink),
    ("Identity", array.Identity, F.identity), ("MatrixDiag", array.MatrixDiag, F.matrix_diag),
    ("MatrixDiagPart", array.MatrixDiagPart, F.matrix_diag_part),
    ("NonZero", array.NonZero, F.nonzero), ("Unlink", array.Unlink, F.unlink),
    ("Assign", array.Assign, F.assign),
    ("GatherNd", indexing.GatherNd, F.gather_nd), ("Embed", indexing.Embed, F.embed),
    ("Equal", logic.Equal, F.equal), ("NotEqual", logic.NotEqual, F.not_equal),
    ("Greater", logic.Greater, F.greater), ("GreaterEqual", logic.GreaterEqual, F.greater_equal),
    ("Less", logic.Less, F.less), ("LessEqual", logic.LessEqual, F.less_equal),
    ("LogicalAnd", logic.LogicalAnd, F.logical_and), ("LogicalOr", logic.LogicalOr, F.logical_or),
    ("LogicalXor", logic.LogicalXor, F.logical_xor),
    ("LogicalNot", logic.LogicalNot, F.logical_not), ("IsNaN", logic.IsNaN, F.isnan),
    ("IsInf", logic.IsInf, F.isinf), ("Where", logic.Where, F.where),
    ("SigmoidCrossEntropy", loss.SigmoidCrossEntropy, F.sigmoid_cross_entropy),
    ("SquaredError", loss.SquaredError, F.squared_error),
    ("BinaryCrossEntropy", loss.BinaryCrossEntropy, F.binary_cross_entropy),
    ("AbsoluteError", loss.AbsoluteError, F.absolute_error),
    ("BinaryError", loss.BinaryError, F.binary_error),
    ("ATan2", math.ATan2, F.atan2), ("Maximum2", math.Maximum2, F.maximum2),
    ("Minimum2", math.Minimum2, F.minimum2), ("AddN", math.AddN, F.add_n),
    ("MulN", math.MulN, F.mul_n),
    ("Exp", elementary.Exp, F.exp), ("Log", elementary.Log, F.log), ("Abs", elementary.Abs, F.abs),
    ("Sin", elementary.Sin, F.sin), ("Cos", elementary.Cos, F.cos), ("Tan", elementary.Tan, F.tan),
    ("ASin", elementary.ASin, F.asin), ("ACos", elementary.ACos, F.acos),
    ("ATan", elementary.ATan, F.atan), ("Sinh", elementary.Sinh, F.sinh),
    ("Cosh", elementary.Cosh, F.cosh), ("ASinh", elementary.ASinh, F.asinh),
    ("ACosh", elementary.ACosh, F.acosh), ("ATanh", elementary.ATanh, F.atanh),
    ("Sinc", elementary.Sinc, F.sinc), ("Erf", elementary.Erf, F.erf),
    ("ClipGradByValue", math.ClipGradByValue, F.clip_grad_by_value),
    ("GlobalAveragePooling", pooling.GlobalAveragePooling, F.global_average_pooling),
    ("BatchInv", linalg.BatchInv, F.batch_inv), ("BatchDet", linalg.BatchDet, F.batch_det),
    ("BatchLogdet", linalg.BatchLogdet, F.batch_logdet),
    ("BoolGather", indexing.BoolGather, F.bool_gather),
]

# Functions taking one value ``val``: a number (those with ``inplace`` too write it False)
# or, for the logical ones, a bool.
_VAL = [
    ("AddScalar", math.AddScalar, "add_scalar_param", F.add_scalar, _with_inplace(_val)),
    ("MulScalar", math.MulScalar, "mul_scalar_param", F.mul_scalar, _with_inplace(_val)),
    ("PowScalar", math.PowScalar, "pow_scalar_param", F.pow_scalar, _with_inplace(_val)),
    ("RSubScalar", math.RSubScalar, "r_sub_scalar_param", F.r_sub_scalar, _val),
    ("RDivScalar", math.RDivScalar, "r_div_scalar_param", F.r_div_scalar, _val),
    ("RPowScalar", math.RPowScalar, "r_pow_scalar_param", F.r_pow_scalar, _val),
    ("MaximumScalar", math.MaximumScalar, "maximum_scalar_param", F.maximum_scalar, _val),
    ("MinimumScalar", math.MinimumScalar, "minimum_scalar_param", F.minimum_scalar, _val),
    ("ResetNaN", math.ResetNaN, "reset_nan_param", F.reset_nan, _val),
    ("ResetInf", math.ResetInf, "reset_inf_param", F.reset_inf, _val),
    ("EqualScalar", logic.EqualScalar, "equal_scalar_param", F.equal_scalar, _val),
    ("NotEqualScalar", logic.NotEqualScalar, "not_equal_scalar_param", F.not_equal_scalar,
     _val),
    ("GreaterScalar", logic.GreaterScalar, "greater_scalar_param", F.greater_scalar, _val),
    ("GreaterEqualScalar", logic.GreaterEqualScalar, "greater_equal_scalar_param",
     F.greater_equal_scalar, _val),
    ("LessScalar", logic.LessScalar, "less_scalar_param", F.less_scalar, _val),
    ("LessEqualScalar", logic.LessEqualScalar, "less_equal_scalar_param", F.less_equal_scalar,
     _val),
    ("LogicalAndScalar", logic.LogicalAndScalar, "logical_and_scalar_param",
     F.logical_and_scalar, _bool_val),
    ("LogicalOrScalar", logic.LogicalOrScalar, "logical_or_scalar_param", F.logical_or_scalar,
     _bool_val),
    ("LogicalXorScalar", logic.LogicalXorScalar, "logical_xor_scalar_param",
     F.logical_xor_scalar, _bool_val),
]

# Two-input functions whose message holds ``inplace`` alone (written False: dpnb computes
# out of place).
_INPLACE = [
    ("Add2", math.Add2, "add2_param", F.add2), ("BcAdd2", math.BcAdd2, "bc_add2_param", F.bc_add2),
    ("Sub2", math.Sub2, "sub2_param", F.sub2), ("Mul2", math.Mul2, "mul2_param", F.mul2),
    ("Div2", math.Div2, "div2_param", F.div2), ("Pow2", math.Pow2, "pow2_param", F.pow2),
]

_SPECS = [
    *(_no_param(*entry) for entry in _NO_PARAM),
    *(FunctionSpec(t, cls, field, export, _scalar(call)) for t, cls, field, call, export in _VAL),
    *(FunctionSpec(t, cls, field, _inplace, _binary(call)) for t, cls, field, call in _INPLACE),
    _generated("Arange", "arange_param", F.arange),
    _generated("Linspace", "linspace_param", F.linspace),
    _generated("Constant", "constant_param", F.constant),
    # activation
    FunctionSpec("ReLU", activation.ReLU, "relu_param", _inplace, _unary(F.relu)),
    FunctionSpec("ELU", activation.ELU, "elu_param", _attrs("alpha"), _call(F.elu, "alpha")),
    FunctionSpec("LeakyReLU", activation.LeakyReLU, "leaky_relu_param",
                 _attrs("alpha", inplace=_false), _call(F.leaky_relu, "alpha")),
    FunctionSpec("Softmax", activation.Softmax, "softmax_param", _axis, _call(F.softmax, "axis")),
    FunctionSpec("LogSoftmax", activation.LogSoftmax, "log_softmax_param", _axis,
                 _call(F.log_softmax, "axis")),
    FunctionSpec("SELU", activation.SELU, "selu_param", _attrs("scale", "alpha"),
                 _call(F.selu, "scale", "alpha")),
    FunctionSpec("CELU", activation.CELU, "celu_param", _attrs("alpha", "axis"),
                 _call(F.celu, "alpha", "axis")),
    FunctionSpec("CReLU", activation.CReLU, "crelu_param", _axis, _call(F.crelu, "axis")),
    FunctionSpec("SoftPlus", activation.SoftPlus, "softplus_param", _attrs("beta"),
                 _call(F.softplus, "beta")),
    FunctionSpec("PReLU", activation.PReLU, "prelu_param", _attrs("base_axis"),
                 _call(F.prelu, "base_axis")),
    # array
    FunctionSpec("Reshape", array.Reshape, "reshape_param",
                 lambda fn: {"shape": _ints(fn.out_shape), "inplace": bool(fn.inplace)},
                 _call(F.reshape, "shape", "inplace"),
                 arguments=lambda fn: {"shape": _ints(fn.shape), "inplace": bool(fn.inplace)}),
    FunctionSpec("Transpose", array.Transpose, "transpose_param", _attrs("axes"),
                 _call(F.transpose, "axes")),
    FunctionSpec("Concatenate", array.Concatenate, "concatenate_param", _axis,
                 _call(F.concatenate, "axis")),
    FunctionSpec("Slice", array.Slice, "slice_param", _slice_params,
                 _call(F.slice, "start", "stop", "step")),
    FunctionSpec("Sink", array.Sink, "sink_param", _attrs("one_input_grad"),
                 _call(F.sink, "one_input_grad")),
    FunctionSpec("Stack", array.Stack, "stack_param", _axis, _call(F.stack, "axis")),
    FunctionSpec("Split", array.Split, "split_param", _axis, _call(F.split, "axis")),
    FunctionSpec("Pad", array.Pad, "pad_param",
                 _attrs("mode", "constant_value",
                        pad_width=lambda fn: [w for pair in fn.pairs[-len(fn.pad_width) // 2:]
                                              for w in pair]),
                 _call(F.pad, "pad_width", "mode", "constant_value")),
    FunctionSpec("Tile", array.Tile, "tile_param", _attrs("reps"), _call(F.tile, "reps")),
    FunctionSpec("Broadcast", array.Broadcast, "broadcast_param", _attrs(shape="out_shape"),
                 _broadcast),
    FunctionSpec("BroadcastTo", array.BroadcastTo, "broadcast_to_param",
                 _attrs(axis=lambda fn: _none_to(fn.axis, -1)), _call(F.broadcast_to, "axis")),
    FunctionSpec("Flip", array.Flip, "flip_param", _attrs("axes"), _call(F.flip, "axes")),
    FunctionSpec("Shift", array.Shift, "shift_param",
                 _attrs("border_mode",
                        shifts=lambda fn: _none_to(fn.shifts, (0,) * len(fn.in_shape))),
                 _call(F.shift, "shifts", "border_mode")),
    FunctionSpec("EyeLike", array.EyeLike, "eye_like_param", _attrs("k"), _call(F.eye_like, "k")),
    FunctionSpec("Meshgrid", array.Meshgrid, "meshgrid_param", _attrs(ij_indexing="ij"),
                 _call(F.meshgrid, "ij_indexing")),
    FunctionSpec("BatchMatmul", linalg.BatchMatmul, "batch_matmul_param",
                 _attrs(transpose_a="ta", transpose_b="tb"),
                 _call(F.batch_matmul, "transpose_a", "transpose_b")),
    FunctionSpec("Einsum", linalg.Einsum, "einsum_param", _attrs("equation"),
                 _call(F.einsum, "equation")),
    FunctionSpec("Trilu", array.Trilu, "trilu_param", _attrs("k", "upper"),
                 _call(F.trilu, "k", "upper")),
    FunctionSpec("Shape", array.Shape, "shape_param",
                 _attrs(start=lambda fn: _none_to(fn.start, 0), end=lambda fn: _none_to(fn.end, 0)),
                 _call(F.shape, "start", "end")),
    # indexing
    FunctionSpec("Gather", indexing.Gather, "gather_param", _attrs("axis", "batch_dims"),
                 _call(F.gather, "axis", "batch_dims")),
    FunctionSpec("ScatterNd", indexing.ScatterNd, "scatter_nd_param",
                 _attrs(shape=lambda fn: fn.outputs[0].shape, add=lambda fn: fn.add),
                 _scatter_nd),
    FunctionSpec("ScatterAdd", indexing.ScatterAdd, "scatter_add_param", _axis,
                 _call(F.scatter_add, "axis")),
    FunctionSpec("OneHot", indexing.OneHot, "one_hot_param", _attrs("shape"),
                 _call(F.one_hot, "shape")),
    FunctionSpec("BoolFill", indexing.BoolFill, "bool_fill_param", _attrs("value"),
                 _call(F.bool_fill, "value")),
    FunctionSpec("BoolScatter", indexing.BoolScatter, None, _no_params,
                 lambda xs, p, n: F.bool_scatter(*xs[:2], xs[2] if len(xs) == 3 else None)),
    # loss
    FunctionSpec("ConfusionMatrix", loss.ConfusionMatrix, "confusion_matrix_param", _axis,
                 _call(F.confusion_matrix, "axis")),
    FunctionSpec("SoftmaxCrossEntropy", loss.SoftmaxCrossEntropy, "softmax_cross_entropy_param",
                 _axis, _call(F.softmax_cross_entropy, "axis")),
    FunctionSpec("CategoricalCrossEntropy", loss.CategoricalCrossEntropy,
                 "categorical_cross_entropy_param", _axis,
                 _call(F.categorical_cross_entropy, "axis")),
    FunctionSpec("TopNError", loss.TopNError, "top_n_error_param", _attrs("axis", "n"),
                 _call(F.top_n_error, "axis", "n")),
    FunctionSpec("HuberLoss", loss.HuberLoss, "huber_loss_param", _attrs("delta"),
                 _call(F.huber_loss, "delta")),
    FunctionSpec("EpsilonInsensitiveLoss", loss.EpsilonInsensitiveLoss,
                 "epsilon_insensitive_loss_param", _attrs("epsilon"),
                 _call(F.epsilon_insensitive_loss, "epsilon")),
    FunctionSpec("KLMultinomial", loss.KLMultinomial, "kl_multinomial_param",
                 _attrs("base_axis"), _call(F.kl_multinomial, "base_axis")),
    # math
    FunctionSpec("Mod2", math.Mod2, "mod2_param", _attrs("fmod"), _call(F.mod2, "fmod")),
    FunctionSpec("BitShift", math.BitShift, "bit_shift_param", _attrs("direction"),
                 _call(F.bit_shift, "direction")),
    FunctionSpec("Floor", elementary.Floor, "floor_param", _no_params, _unary(F.floor)),
    FunctionSpec("Ceil", elementary.Ceil, "ceil_param", _no_params, _unary(F.ceil)),
    FunctionSpec("Round", elementary.Round, "round_param", _no_params, _unary(F.round)),
    FunctionSpec("Sign", elementary.Sign, "sign_param", _attrs("alpha"), _call(F.sign, "alpha")),
    FunctionSpec("ClipGradByNorm", math.ClipGradByNorm, "clip_grad_by_norm_param",
                 _attrs(clip_norm=lambda fn: _none_to(fn.clip_norm, 1.0), axes="reduced"),
                 _call(F.clip_grad_by_norm, "clip_norm", "axes")),
    # linalg
    FunctionSpec("BatchCholesky", linalg.BatchCholesky, "batch_cholesky_param", _attrs("upper"),
                 _call(F.batch_cholesky, "upper")),
    FunctionSpec("VATNoise", math.VATNoise, "vat_noise_param", _attrs("base_axis", "eps"),
                 _call(F.vat_noise, "base_axis", "eps")),
    # nn
    FunctionSpec("Affine", nn.Affine, "affine_param",
                 lambda fn: {"base_axis": int(fn.base_axis)}, _affine),
    FunctionSpec("Convolution", nn.Convolution, "convolution_param", _convolution_params,
                 _convolution),
    FunctionSpec("DepthwiseConvolution", nn.DepthwiseConvolution, "depthwise_convolution_param",
                 _depthwise_params("multiplier"),
                 _call(F.depthwise_convolution, "base_axis", "pad", "stride", "dilation",
                       "multiplier")),
    FunctionSpec("Deconvolution", nn.Deconvolution, "deconvolution_param", _deconvolution_params,
                 _call(F.deconvolution, "base_axis", "pad", "stride", "dilation", "group",
                       "channel_last", "output_padding")),
    FunctionSpec("DepthwiseDeconvolution", nn.DepthwiseDeconvolution,
                 "depthwise_deconvolution_param", _depthwise_params("divisor"),
                 _call(F.depthwise_deconvolution, "base_axis", "pad", "stride", "dilation",
                       "divisor")),
    FunctionSpec("PatchCorrelation", nn.PatchCorrelation, "patch_correlation_param",
                 _patch_correlation_params,
                 lambda xs, p, n: F.patch_correlation(
                     *xs, p["patch"], p["shift"], p["patch_step"], p["shift_step"],
                     p["padding"], channel_last=True)),
    # normalization
    FunctionSpec("BatchNormalization", normalization.BatchNormalization,
                 "batch_normalization_param", _batch_norm_params, _batch_norm),
    FunctionSpec("FusedBatchNormalization", normalization.FusedBatchNormalization,
                 "fused_batch_normalization_param", _fused_batch_norm_params, _fused_batch_norm),
    FunctionSpec("SyncBatchNormalization", normalization.SyncBatchNormalization,
                 "sync_batch_normalization_param", _sync_batch_norm_params, _sync_batch_norm),
    FunctionSpec("LayerNormalization", normalization.LayerNormalization,
                 "layer_normalization_param",
                 lambda fn: {"batch_axis": _axis_list(fn.batch_axis), "eps": fn.eps,
                             **_scale_bias(fn)}, _layer_norm),
    FunctionSpec("InstanceNormalization", normalization.InstanceNormalization,
                 "instance_normalization_param",
                 lambda fn: {"channel_axis": int(fn.channel_axis),
                             "batch_axis": _axis_list(fn.batch_axis), "eps": fn.eps,
                             **_scale_bias(fn)}, _instance_norm),
    FunctionSpec("GroupNormalization", normalization.GroupNormalization,
                 "group_normalization_param",
                 lambda fn: {"num_groups": int(fn.num_groups),
                             "channel_axis": int(fn.channel_axis),
                             "batch_axis": _axis_list(fn.batch_axis), "eps": fn.eps,
                             **_scale_bias(fn)}, _group_norm),
    FunctionSpec("TensorNormalization", normalization.TensorNormalization,
                 "tensor_normalization_param",
                 lambda fn: {"axes": _axis_list(fn.axes), "eps": fn.eps, **_scale_bias(fn)},
                 _tensor_norm),
    FunctionSpec("WeightStandardization", normalization.WeightStandardization,
                 "weight_standardization_param", _attrs("channel_axis", "eps"),
                 lambda xs, p, n: F.weight_standardization(xs[0], p["channel_axis"], p["eps"],
                                                           output_stat=n == 3)),
    FunctionSpec("NormNormalization", normalization.NormNormalization,
                 "norm_normalization_param", _attrs("p", "axes", "eps"),
                 _call(F.norm_normalization, "p", "axes", "eps")),
    FunctionSpec("WeightNormalization", normalization.WeightNormalization,
                 "weight_normalization_param", _attrs("dim", "eps"),
                 _call(F.weight_normalization, "dim", "eps")),
    FunctionSpec("MeanSubtraction", normalization.MeanSubtraction, "mean_subtraction_param",
                 _attrs("base_axis", update_running_mean="update"),
                 _call(F.mean_subtraction, "base_axis", "update_running_mean")),
    FunctionSpec("SpectralNorm", normalization.SpectralNorm, "spectral_norm_param",
                 _attrs("dim", "itr", "eps", "test", "output_u"),
                 _call(F.spectral_norm, "dim", "itr", "eps", "test", "output_u")),
    # pooling
    FunctionSpec("MaxPooling", pooling.MaxPooling, "max_pooling_param", _pooling_params,
                 _max_pooling),
    FunctionSpec("AveragePooling", pooling.AveragePooling, "average_pooling_param",
                 _average_pooling_params, _average_pooling),
    FunctionSpec("SumPooling", pooling.SumPooling, "sum_pooling_param", _pooling_params,
                 _call(F.sum_pooling, "kernel", "stride", "ignore_border", "pad",
                       "channel_last")),
    FunctionSpec("MaxPoolingBackward", pooling.MaxPoolingBackward, "max_pooling_backward_param",
                 lambda fn: _pooling_params(fn.pooling),
                 _call(F.max_pooling_backward, "kernel", "stride", "ignore_border", "pad",
                       "channel_last")),
    FunctionSpec("ONNXResize", pooling.ONNXResize, "onnx_resize_param",
                 _attrs("roi", "scales", "sizes", "mode", "nearest_mode",
                        coordinate_transformation_mode="transform", cubic_coeff_a="a",
                        exclude_outside=lambda fn: int(fn.exclude_outside),
                        extrapolation_value="extrapolation"),
                 _call(F.onnx_resize, "roi", "scales", "sizes", "mode",
                       "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                       "extrapolation_value", "nearest_mode")),
    FunctionSpec("Unpooling", pooling.Unpooling, "unpooling_param",
                 _attrs("kernel", "channel_last"), _call(F.unpooling, "kernel", "channel_last")),
    FunctionSpec("Interpolate", pooling.Interpolate, "interpolate_param",
                 _attrs("output_size", "mode", "align_corners", "half_pixel",
                        "half_pixel_for_nn", "channel_last"),
                 _call(F.interpolate, "output_size", "mode", "align_corners", "half_pixel",
                       "half_pixel_for_nn", "channel_last")),
    # recurrent
    FunctionSpec("RNN", recurrent.RNN, "rnn_param",
                 lambda fn: {**_recurrent_params(fn), "nonlinearity": fn.nonlinearity},
                 _recurrent(F.rnn, 1, True)),
    FunctionSpec("LSTM", recurrent.LSTM, "lstm_param", _recurrent_params,
                 _recurrent(F.lstm, 2, False)),
    FunctionSpec("GRU", recurrent.GRU, "gru_param", _recurrent_params,
                 _recurrent(F.gru, 1, False)),
    # reduction
    FunctionSpec("Sum", reduction.Sum, "sum_param", _reduction_params, _reduction(F.sum)),
    FunctionSpec("Mean", reduction.Mean, "mean_param", _reduction_params, _reduction(F.mean)),
    FunctionSpec("Prod", reduction.Prod, "prod_param", _reduction_params, _reduction(F.prod)),
    FunctionSpec("Max", reduction.Max, "max_param", _extremum_params, _extremum(F.max)),
    FunctionSpec("Min", reduction.Min, "min_param", _extremum_params, _extremum(F.min)),
    FunctionSpec("Norm", reduction.Norm, "norm_param",
                 lambda fn: {"p": float(fn.p), **_reduction_params(fn)},
                 lambda xs, p, n: F.norm(xs[0], p["p"], axis=tuple(p["axes"]),
                                         keepdims=p["keep_dims"])),
    FunctionSpec("CumSum", reduction.CumSum, "cumsum_param",
                 _attrs("axis", "exclusive", "reverse"),
                 _call(F.cumsum, "axis", "exclusive", "reverse")),
    FunctionSpec("CumProd", reduction.CumProd, "cumprod_param",
                 _attrs("axis", "exclusive", "reverse"),
                 _call(F.cumprod, "axis", "exclusive", "reverse")),
    FunctionSpec("Sort", reduction.Sort, "sort_param", _sort_params,
                 _call(F.sort, "axis", "reverse", "with_index", "only_index")),
    FunctionSpec("TopKData", reduction.TopKData, "top_k_data_param",
                 _attrs("k", "abs", "reduce", "base_axis", "largest", "with_index"),
                 _call(F.top_k_data, "k", "abs", "reduce", "base_axis", "largest",
                       "with_index")),
    FunctionSpec("TopKGrad", reduction.TopKGrad, "top_k_grad_param",
                 _attrs("k", "abs", "base_axis"), _call(F.top_k_grad, "k", "abs", "base_axis")),
    FunctionSpec("SearchSorted", reduction.SearchSorted, "searchsorted_param",
                 _attrs(right=lambda fn: bool(fn.right)), _call(F.searchsorted, "right")),
    FunctionSpec("Unique", reduction.Unique, "unique_param",
                 lambda fn: _plain({"flatten": fn.flatten, "axis": _none_to(fn.axis, 0),
                                    "sorted": fn.sorted, "with_index": fn.extra[0],
                                    "with_inverse": fn.extra[1], "with_counts": fn.extra[2]}),
                 _call(F.unique, "flatten", "axis", "sorted", "with_index", "with_inverse",
                       "with_counts")),
    # sequence
    FunctionSpec("PackPaddedSequence", sequence.PackPaddedSequence, "pack_padded_sequence_param",
                 _attrs("batch_first"), _call(F.pack_padded_sequence, "batch_first")),
    FunctionSpec("PadPackedSequence", sequence.PadPackedSequence, "pad_packed_sequence_param",
                 _attrs("batch_first", padding_value=lambda fn: _none_to(fn.padding_value, 0.0),
                        total_length=lambda fn: _none_to(fn.total_length, -1)),
                 _call(F.pad_packed_sequence, "batch_first", "padding_value", "total_length")),
    # stochastic
    FunctionSpec("Dropout", stochastic.Dropout, "dropout_param", _attrs("p", "seed"),
                 _call(F.dropout, "p", "seed")),
    FunctionSpec("ImageAugmentation", stochastic.ImageAugmentation, "image_augmentation_param",
                 _image_augmentation_params, _image_augmentation),
    FunctionSpec("Rand", stochastic.Rand, "rand_param", _sampler("low", "high"),
                 _call(F.rand, "low", "high", "shape", "seed")),
    FunctionSpec("Randn", stochastic.Randn, "randn_param", _sampler("mu", "sigma"),
                 _call(F.randn, "mu", "sigma", "shape", "seed")),
    FunctionSpec("Randint", stochastic.Randint, "randint_param", _sampler("low", "high"),
                 _call(F.randint, "low", "high", "shape", "seed")),
    FunctionSpec("RandBinomial", stochastic.RandBinomial, "rand_binomial_param",
                 _sampler("n", "p"), _call(F.rand_binomial, "n", "p", "shape", "seed")),
    FunctionSpec("RandBeta", stochastic.RandBeta, "rand_beta_param", _sampler("alpha", "beta"),
                 _call(F.rand_beta, "alpha", "beta", "shape", "seed")),
    FunctionSpec("RandGamma", stochastic.RandGamma, "rand_gamma_param", _sampler("k", "theta"),
                 _call(F.rand_gamma, "k", "theta", "shape", "seed")),
    FunctionSpec("RandomChoice", stochastic.RandomChoice, "random_choice_param",
                 _attrs("shape", "replace", "seed"),
                 _call(F.random_choice, "shape", "replace", "seed")),
    FunctionSpec("RandomCrop", stochastic.RandomCrop, "random_crop_param",
                 _attrs("shape", "base_axis", "seed"),
                 _call(F.random_crop, "shape", "base_axis", "seed")),
    FunctionSpec("RandomFlip", stochastic.RandomFlip, "random_flip_param",
                 _attrs("axes", "base_axis", "seed"),
                 _call(F.random_flip, "axes", "base_axis", "seed")),
    FunctionSpec("RandomShift", stochastic.RandomShift, "random_shift_param",
                 _attrs("shifts", "border_mode", "base_axis", "seed", constant_value="fill"),
                 _call(F.random_shift, "shifts", "border_mode", "constant_value", "base_axis",
                       "seed")),
    FunctionSpec("RandomErase", stochastic.RandomErase, "random_erase_param",
                 _attrs("prob", "area_ratios", "aspect_ratios", "replacements", "n", "share",
                        "base_axis", "seed", "channel_last", "ste_fine_grained",
                        inplace=_false),
                 _call(F.random_erase, "prob", "area_ratios", "aspect_ratios", "replacements",
                       "n", "share", "base_axis", "seed", "channel_last", "ste_fine_grained")),
]

# Looked up by the exact class, so that SyncBatchNormalization is not taken for its base;
# array.Generated by the nnabla type it keeps.
_BY_CLASS = {spec.cls: spec for spec in _SPECS if spec.cls is not array.Generated}
_BY_TYPE = {spec.type_name: spec for spec in _SPECS}
if len(_BY_TYPE) != len(_SPECS):
    raise DpnbError("function_specs: two specs share an nnabla type name")

# Function classes with no nnabla form of their own, and why.
NOT_WRITABLE = {
    normalization.Standardization: "the shared base of the standardizations; each of its "
                                   "subclasses is written as its own nnabla type",
    **dict.fromkeys((attention.AppendKey, attention.AttentionWeights, attention.AttentionOutput),
                    "a fused step of dpnb's multi_head_attention, which nnabla builds from "
                    "its primitive functions and has no type of its own for"),
    **dict.fromkeys((subscript.GetItem, subscript.SetItem),
                    "x[key] and x[key] = value in one step, which nnabla builds from Slice, "
                    "Reshape and the gathers and has no type of its own for"),
}


def spec_of_function(fn: Function) -> FunctionSpec:
    """The spec of a function in a dpnb graph, or an error naming a function with none."""
    if isinstance(fn, array.Generated):
        return _BY_TYPE[fn.type_name]
    spec = _BY_CLASS.get(type(fn))
    if spec is None:
        reason = NOT_WRITABLE.get(type(fn))
        detail = f" ({reason})" if reason else ""
        raise DpnbError(f"function {type(fn).__name__} cannot be written to an nnabla network "
                        f"file{detail}: dpnb knows how to write {', '.join(sorted(_BY_TYPE))}; "
                        "build the network from those")
    return spec


def spec_of_class(cls: type) -> FunctionSpec | None:
    """The spec written for functions of class ``cls`` (None where there is none)."""
    return next((spec for spec in _SPECS if spec.cls is cls), None)


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


def _arguments(fn: Function) -> Params:
    """``Function.arguments``: a function's ``*_param`` values as it was called with them
    (a file holds Reshape's shape resolved, its arguments keep the -1 given)."""
    spec = spec_of_function(fn)
    return (spec.arguments or spec.export)(fn)


install_arguments(_arguments)

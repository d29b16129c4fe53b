"""Binary networks (BinaryConnect, BinaryNet, XNOR-Net's binary weights): activations and
weights quantized to +-1 in forward, trained by straight-through gradients, as nnabla's.

The binary affine and convolution functions run dpnb's own affine and convolution on the
binarized weight, write it (and its scale) into their ``binary_weight`` (and ``alpha``)
inputs as nnabla does, and give the float ``weight`` the gradient of the binarized one."""
from __future__ import annotations

import math
from collections.abc import Sequence

from ..graph import Function, Variable
from .base import Unary, default_outputs
from .graph_module import bilinear_backward_graph, on_variables
from .nn import Affine, Convolution
from .specs import FunctionSpec, Params, call, ints, without_params

__all__ = ["binary_sigmoid", "binary_tanh", "binary_connect_affine",
           "binary_connect_convolution", "binary_weight_affine", "binary_weight_convolution"]


class _BinaryActivation(Unary):
    """A step in forward; in backward the gradient passes, scaled by ``slope``, where
    |x| < 1 (the straight-through estimator of a hard sigmoid or hard tanh)."""

    slope = 1.0

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * (xp.abs(xs[0]) < 1) * self.slope,)


class BinarySigmoid(_BinaryActivation):
    """1 for x > 0, else 0; gradient 1/2 where |x| < 1."""

    nnabla_spec = without_params("BinarySigmoid", "binary_sigmoid")
    slope = 0.5

    def forward_arrays(self, xp, xs):
        return ((xs[0] > 0).astype(xs[0].dtype),)


class BinaryTanh(_BinaryActivation):
    """1 for x > 0, else -1; gradient 1 where |x| < 1."""

    nnabla_spec = without_params("BinaryTanh", "binary_tanh")

    def forward_arrays(self, xp, xs):
        x = xs[0]
        return (xp.where(x > 0, 1, -1).astype(x.dtype),)


def binary_sigmoid(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise step to {0, 1}, with the straight-through gradient 1/2 on |x| < 1."""
    default_outputs("F.binary_sigmoid", n_outputs, outputs)
    return BinarySigmoid()(x)


def binary_tanh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise step to {-1, 1}, with the straight-through gradient 1 on |x| < 1."""
    default_outputs("F.binary_tanh", n_outputs, outputs)
    return BinaryTanh()(x)


# -- binary weights ------------------------------------------------------------------

class _BinaryWeighted(Function):
    """An affine or convolution (``self.inner``) computed with the binarized weight; inputs
    x, weight, binary_weight, [alpha,] [bias].  Forward writes the binarized weight (and
    alpha) into those inputs; backward gives x and the bias the inner function's gradients,
    and the weight that of the binarized weight (straight through); binary_weight and
    alpha get none."""

    scaled = False  # XNOR-Net's: the sign times alpha, the mean |w| of each output
    inner: Function

    @property
    def bias_at(self) -> int:
        """The bias's place among the inputs, after binary_weight (and alpha)."""
        return 4 if self.scaled else 3

    def _split(self, xs):
        """(x, weight, bias or None) of the inputs (variables or arrays)."""
        return xs[0], xs[1], xs[self.bias_at] if len(xs) > self.bias_at else None

    def _inner_inputs(self, x, w, b) -> list:
        return [x, w] if b is None else [x, w, b]

    def output_specs(self, inputs):
        x, w, b = self._split(inputs)
        self.inner.error = self.error  # its complaints about the inputs name this function
        specs = self.inner.output_specs(self._inner_inputs(x, w, b))
        # nnabla reads and writes both by their sizes, whatever their shapes
        if inputs[2].size != w.size:
            raise self.error(f"binary_weight must have the weight's {w.size} elements (shape "
                             f"{w.shape}), got shape {inputs[2].shape}")
        outputs = math.prod(self.alpha_view(w.shape))
        if self.scaled and inputs[3].size != outputs:
            raise self.error(f"alpha must have {outputs} elements (one per output of the "
                             f"weight of shape {w.shape}), got shape {inputs[3].shape}")
        return specs

    def alpha_view(self, w_shape) -> tuple:
        """alpha's shape as it broadcasts against the weight (1 on the averaged axes)."""
        raise NotImplementedError

    def inner_call(self, F, x, w, b) -> Variable:
        """The inner function on variables."""
        raise NotImplementedError

    def binarized(self, xp, w) -> tuple:
        """(the sign of the weight, alpha or None, the weight the inner function uses)."""
        def mask(m):
            return m.astype(w.dtype)
        wb = mask(w > 0) - mask(w < 0) + self.quantize_zero_to * mask(w == 0)
        if not self.scaled:
            return wb, None, wb
        alpha = xp.abs(w).mean(axis=self.averaged_axes(w.ndim), keepdims=True)
        return wb, alpha, wb * alpha

    def averaged_axes(self, ndim: int) -> tuple:
        """The weight's axes alpha averages |w| over: the inputs of each output."""
        raise NotImplementedError

    def forward_arrays(self, xp, xs):
        x, w, b = self._split(xs)
        wb, alpha, effective = self.binarized(xp, w)
        self.inputs[2].d = wb.reshape(self.inputs[2].shape)
        if self.scaled:
            self.inputs[3].d = alpha.reshape(self.inputs[3].shape)
        return self.inner.forward_arrays(xp, self._inner_inputs(x, effective, b))

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        need = self._inner_inputs(*self._split(need_grads))
        operands = [xs[0], self.binarized(xp, xs[1])[2]] + [None] * (len(need) - 2)  # no bias
        gx, gw, *gb = self.inner.backward_arrays(xp, operands, None, gys, need)
        return (gx, gw) + (None,) * (self.bias_at - 2) + tuple(gb)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Backward as a graph: the inner function's, on the weight ``binarized`` computes
        run on variables (its sign without gradient, alpha with that of the mean |w|)."""
        x, w, b = self._split(xs)
        effective = on_variables(lambda xp, v: self.binarized(xp, v)[2], w)
        inner = self.inner_call(F, x, effective, b).parent
        need_x, need_w, need_b = self._split(need_grads)
        gx, gw, *gb = bilinear_backward_graph(inner, F, inner.inputs, inner.outputs, gys,
                                              self._inner_inputs(need_x, need_w, need_b))
        return [gx, gw] + [None] * (self.bias_at - 2) + gb


class _BinaryAffine(_BinaryWeighted):
    """The affine kind: weight (inputs, *outputs), alpha of one element per output."""

    def __init__(self, base_axis: int, quantize_zero_to: float):
        self.inner = Affine(base_axis)
        self.quantize_zero_to = float(quantize_zero_to)

    def alpha_view(self, w_shape):
        return (1,) + tuple(w_shape[1:])

    def averaged_axes(self, ndim):
        return (0,)

    def inner_call(self, F, x, w, b):
        return F.affine(x, w, b, self.inner.base_axis)


def _affine_params(fn) -> Params:
    return {"base_axis": int(fn.inner.base_axis), "quantize_zero_to": fn.quantize_zero_to}


class BinaryConnectAffine(_BinaryAffine):
    """x times sign(weight), plus bias (BinaryConnect)."""

    nnabla_spec = FunctionSpec("BinaryConnectAffine", "binary_connect_affine_param",
                               ("base_axis", "quantize_zero_to"), _affine_params,
                               call("binary_connect_affine", "base_axis", "quantize_zero_to"))
    grad_skips_inputs = (2, 3)  # binary_weight, bias


class BinaryWeightAffine(_BinaryAffine):
    """x times sign(weight) * mean |weight| of each output, plus bias (XNOR-Net's BWN)."""

    nnabla_spec = FunctionSpec("BinaryWeightAffine", "binary_weight_affine_param",
                               ("base_axis", "quantize_zero_to"), _affine_params,
                               call("binary_weight_affine", "base_axis", "quantize_zero_to"))
    scaled = True
    grad_skips_inputs = (2, 3, 4)  # binary_weight, alpha, bias


def binary_connect_affine(x: Variable, weight: Variable, binary_weight: Variable,
                          bias: Variable | None = None, base_axis: int = 1,
                          quantize_zero_to: float = 1.0, n_outputs: int = -1,
                          outputs=None) -> Variable:
    """Affine with sign(weight) (``quantize_zero_to`` at 0), written into
    ``binary_weight``; the weight's gradient is that of its sign (straight through)."""
    default_outputs("F.binary_connect_affine", n_outputs, outputs)
    inputs = (x, weight, binary_weight) + (() if bias is None else (bias,))
    return BinaryConnectAffine(base_axis, quantize_zero_to)(*inputs)


def binary_weight_affine(x: Variable, weight: Variable, binary_weight: Variable,
                         alpha: Variable, bias: Variable | None = None, base_axis: int = 1,
                         quantize_zero_to: float = 1.0, n_outputs: int = -1,
                         outputs=None) -> Variable:
    """Affine with sign(weight) times ``alpha``, the mean |weight| of each output (both
    written into their inputs); the weight's gradient is that of the product."""
    default_outputs("F.binary_weight_affine", n_outputs, outputs)
    inputs = (x, weight, binary_weight, alpha) + (() if bias is None else (bias,))
    return BinaryWeightAffine(base_axis, quantize_zero_to)(*inputs)


class _BinaryConvolution(_BinaryWeighted):
    """The convolution kind (channels first): weight (OC, C/group, *kernel), alpha of OC
    elements."""

    def __init__(self, base_axis: int, pad, stride, dilation, group: int,
                 quantize_zero_to: float):
        self.inner = Convolution(base_axis, pad, stride, dilation, group, False)
        self.quantize_zero_to = float(quantize_zero_to)

    def alpha_view(self, w_shape):
        return (w_shape[0],) + (1,) * (len(w_shape) - 1)

    def averaged_axes(self, ndim):
        return tuple(range(1, ndim))

    def inner_call(self, F, x, w, b):
        c = self.inner
        return F.convolution(x, w, b, c.axis, c.pad, c.stride, c.dilation, c.group)


def _convolution_params(fn) -> Params:
    c = fn.inner
    return {"base_axis": int(c.axis), "pad": ints(c.pad), "stride": ints(c.stride),
            "dilation": ints(c.dilation), "group": int(c.group),
            "quantize_zero_to": fn.quantize_zero_to}


_CONVOLUTION_FIELDS = ("base_axis", "pad", "stride", "dilation", "group", "quantize_zero_to")


class BinaryConnectConvolution(_BinaryConvolution):
    """The convolution of x with sign(weight), plus bias (BinaryConnect)."""

    nnabla_spec = FunctionSpec("BinaryConnectConvolution", "binary_connect_convolution_param",
                               _CONVOLUTION_FIELDS, _convolution_params,
                               call("binary_connect_convolution", *_CONVOLUTION_FIELDS))
    grad_skips_inputs = (2, 3)  # binary_weight, bias


class BinaryWeightConvolution(_BinaryConvolution):
    """The convolution of x with sign(weight) * mean |weight| of each output channel, plus
    bias (XNOR-Net's BWN)."""

    nnabla_spec = FunctionSpec("BinaryWeightConvolution", "binary_weight_convolution_param",
                               _CONVOLUTION_FIELDS, _convolution_params,
                               call("binary_weight_convolution", *_CONVOLUTION_FIELDS))
    scaled = True
    grad_skips_inputs = (2, 3, 4)  # binary_weight, alpha, bias


def binary_connect_convolution(x: Variable, weight: Variable, binary_weight: Variable,
                               bias: Variable | None = None, base_axis: int = 1,
                               pad: Sequence[int] | None = None,
                               stride: Sequence[int] | None = None,
                               dilation: Sequence[int] | None = None, group: int = 1,
                               quantize_zero_to: float = 1.0, n_outputs: int = -1,
                               outputs=None) -> Variable:
    """Convolution with sign(weight) (``quantize_zero_to`` at 0), written into
    ``binary_weight``; the weight's gradient is that of its sign (straight through)."""
    default_outputs("F.binary_connect_convolution", n_outputs, outputs)
    inputs = (x, weight, binary_weight) + (() if bias is None else (bias,))
    return BinaryConnectConvolution(base_axis, pad, stride, dilation, group,
                                    quantize_zero_to)(*inputs)


def binary_weight_convolution(x: Variable, weight: Variable, binary_weight: Variable,
                              alpha: Variable, bias: Variable | None = None,
                              base_axis: int = 1, pad: Sequence[int] | None = None,
                              stride: Sequence[int] | None = None,
                              dilation: Sequence[int] | None = None, group: int = 1,
                              quantize_zero_to: float = 1.0, n_outputs: int = -1,
                              outputs=None) -> Variable:
    """Convolution with sign(weight) times ``alpha``, the mean |weight| of each output
    channel (both written into their inputs); the weight's gradient is that of the product."""
    default_outputs("F.binary_weight_convolution", n_outputs, outputs)
    inputs = (x, weight, binary_weight, alpha) + (() if bias is None else (bias,))
    return BinaryWeightConvolution(base_axis, pad, stride, dilation, group,
                                   quantize_zero_to)(*inputs)

"""Activation functions: elementwise nonlinearities, their concatenated and
parametric forms, and softmax."""
from __future__ import annotations

import numpy as np

from .. import kernels
from ..graph import Function, Variable
from .base import Unary, base_axis_of, default_outputs, one_axis, sum_to
from .specs import (FunctionSpec, always_false, attrs, call, inplace_false, int_axis, unary,
                    without_params)

__all__ = ["relu", "elu", "leaky_relu", "tanh", "sigmoid", "softmax", "log_softmax", "relu6",
           "selu", "celu", "crelu", "gelu", "mish", "swish", "softplus", "softsign",
           "log_sigmoid", "hard_sigmoid", "hard_tanh", "tanh_shrink", "prelu"]


def logistic(xp, x):
    """1 / (1 + exp(-x)) of an array, without overflow: exp is taken of -|x| only (also
    what the sigmoid losses compute with)."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1, e) / (1 + e)


def log_softmax_of(xp, x, axis: int):
    """log softmax(x) of an array along ``axis``, shifted by the maximum so that exp
    cannot overflow (also what the softmax losses compute with)."""
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


class ReLU(Unary):
    """x where x > 0, else +0 (NaN too, as nnabla's max(0, x) gives); the gradient passes
    where the output is positive."""

    nnabla_spec = FunctionSpec("ReLU", "relu_param", ("inplace",), inplace_false, unary("relu"))

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (where_positive(xp, xs[0], xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (where_positive(xp, gys[0], ys[0]),)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """As a graph (higher orders, nn.grad): gy times the step y > 0, whose own
        gradient is zero."""
        return [gys[0] * F.greater_scalar(ys[0], 0)]


def where_positive(xp, g, y):
    """``g`` where ``y > 0`` and +0 elsewhere, even where ``g`` is infinite or NaN: ReLU
    itself (``g`` = ``y`` = x) and its gradient, as nnabla's (``g * (y > 0)`` would give
    NaN there).  One compiled loop where dpnb.kernels serves the arrays, 3.5x faster than
    NumPy's ``maximum``; else a mask of all-ones bits ANDed with ``g``'s bits, which runs
    without branches, as ``where()`` does not (13x slower)."""
    if (kernels.for_arrays(xp, g, y) and g.shape == y.shape and g.flags.c_contiguous
            and y.flags.c_contiguous):
        return kernels.where_positive(g, y)
    mask = (y > 0).astype(f"i{g.dtype.itemsize}")
    xp.negative(mask, out=mask)  # 1 -> -1: every bit set
    return xp.bitwise_and(g.view(mask.dtype), mask, out=mask).view(g.dtype)


def relu(x: Variable, inplace: bool = False, n_outputs: int = -1, outputs=None) -> Variable:
    """Rectified linear unit."""
    default_outputs("F.relu", n_outputs, outputs)
    return ReLU()(x)


class ELU(Unary):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""

    nnabla_spec = FunctionSpec("ELU", "elu_param", ("alpha",), attrs("alpha"),
                               call("elu", "alpha"))

    def __init__(self, alpha: float):
        self.alpha = alpha

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (xp.where(x > 0, x, self.alpha * xp.expm1(xp.minimum(x, 0))),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        return (gy * xp.where(x > 0, 1, self.alpha * xp.exp(xp.minimum(x, 0))),)


def elu(x: Variable, alpha: float = 1.0, n_outputs: int = -1, outputs=None) -> Variable:
    """Exponential linear unit."""
    default_outputs("F.elu", n_outputs, outputs)
    return ELU(alpha)(x)


def _leaky_slope(xp, x, alpha: float):
    """Leaky ReLU's derivative: 1 where x > 0, alpha elsewhere, exactly (by arithmetic:
    xp.where is ten times slower in NumPy)."""
    positive = x > 0
    return positive + xp.asarray(alpha, x.dtype) * ~positive


class LeakyReLUSlope(Function):
    """Leaky ReLU's derivative at x, for its backward as a graph: it only scales the
    gradient, and carries none itself."""

    no_nnabla_spec = "a part of LeakyReLU's backward graph"
    differentiable = False

    def __init__(self, alpha: float):
        self.alpha = alpha

    def output_specs(self, inputs):
        return [(inputs[0].shape, inputs[0].dtype)]

    def forward_arrays(self, xp, xs):
        return (_leaky_slope(xp, xs[0], self.alpha),)


class LeakyReLU(Unary):
    """x for x > 0, alpha * x otherwise."""

    nnabla_spec = FunctionSpec("LeakyReLU", "leaky_relu_param", ("alpha", "inplace"),
                               attrs("alpha", inplace=always_false), call("leaky_relu", "alpha"))

    def __init__(self, alpha: float):
        self.alpha = alpha

    def forward_arrays(self, xp, xs):
        (x,) = xs
        # x > 0 picks x exactly where x is the larger of x and alpha x, for alpha <= 1
        larger = xp.maximum if self.alpha <= 1 else xp.minimum
        return (larger(x, self.alpha * x),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * _leaky_slope(xp, xs[0], self.alpha),)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        return [gys[0] * LeakyReLUSlope(self.alpha)(xs[0])]


def leaky_relu(x: Variable, alpha: float = 0.1, inplace: bool = False,
               n_outputs: int = -1, outputs=None) -> Variable:
    """Leaky rectified linear unit: slope ``alpha`` below zero."""
    default_outputs("F.leaky_relu", n_outputs, outputs)
    return LeakyReLU(alpha)(x)


class Tanh(Unary):
    """Hyperbolic tangent; its gradient 1 - y**2 comes from the output."""

    nnabla_spec = without_params("Tanh", "tanh")

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (xp.tanh(xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (y,) = ys
        return (gys[0] * (1 - y * y),)


def tanh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise hyperbolic tangent."""
    default_outputs("F.tanh", n_outputs, outputs)
    return Tanh()(x)


class Sigmoid(Unary):
    """1 / (1 + exp(-x)); its gradient y (1 - y) comes from the output."""

    nnabla_spec = without_params("Sigmoid", "sigmoid")

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (logistic(xp, xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (y,) = ys
        return (gys[0] * y * (1 - y),)


def sigmoid(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise logistic sigmoid."""
    default_outputs("F.sigmoid", n_outputs, outputs)
    return Sigmoid()(x)


class _AlongAxis(Function):
    """Base of the normalizations along one axis (None: the last)."""

    def __init__(self, axis: int | None):
        self.axis = axis

    def output_specs(self, inputs):
        (x,) = inputs
        self.axis = one_axis(self, self.axis, x.ndim)
        return [(x.shape, x.dtype)]


class Softmax(_AlongAxis):
    """exp(x) / sum(exp(x)) along an axis, shifted by the maximum for stability."""

    nnabla_spec = FunctionSpec("Softmax", "softmax_param", ("axis",), int_axis,
                               call("softmax", "axis"))

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        (x,) = xs
        e = xp.exp(x - x.max(axis=self.axis, keepdims=True))
        return (e / e.sum(axis=self.axis, keepdims=True),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (y,), (gy,) = ys, gys
        return (y * (gy - (gy * y).sum(axis=self.axis, keepdims=True)),)


def softmax(x: Variable, axis: int | None = None, n_outputs: int = -1, outputs=None) -> Variable:
    """Softmax along ``axis`` (default: the last axis)."""
    default_outputs("F.softmax", n_outputs, outputs)
    return Softmax(axis)(x)


class LogSoftmax(_AlongAxis):
    """x - log(sum(exp(x))) along an axis, shifted by the maximum for stability."""

    nnabla_spec = FunctionSpec("LogSoftmax", "log_softmax_param", ("axis",), int_axis,
                               call("log_softmax", "axis"))

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward_arrays(self, xp, xs):
        return (log_softmax_of(xp, xs[0], self.axis),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (y,), (gy,) = ys, gys
        return (gy - xp.exp(y) * gy.sum(axis=self.axis, keepdims=True),)


def log_softmax(x: Variable, axis: int | None = None,
                n_outputs: int = -1, outputs=None) -> Variable:
    """Logarithm of the softmax along ``axis`` (default: the last axis)."""
    default_outputs("F.log_softmax", n_outputs, outputs)
    return LogSoftmax(axis)(x)


def _softplus(xp, x):
    """log(1 + exp(x)) without overflow."""
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


class ReLU6(Unary):
    """min(max(x, 0), 6); the gradient passes where 0 < x < 6."""

    nnabla_spec = without_params("ReLU6", "relu6")

    def forward_arrays(self, xp, xs):
        return (xp.clip(xs[0], 0, 6),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        return (gys[0] * ((x > 0) & (x < 6)),)


def relu6(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """ReLU capped at 6."""
    default_outputs("F.relu6", n_outputs, outputs)
    return ReLU6()(x)


class SELU(Unary):
    """scale * x for x > 0, scale * alpha * (exp(x) - 1) otherwise."""

    nnabla_spec = FunctionSpec("SELU", "selu_param", ("scale", "alpha"), attrs("scale", "alpha"),
                               call("selu", "scale", "alpha"))

    def __init__(self, scale: float, alpha: float):
        self.scale, self.alpha = float(scale), float(alpha)

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (self.scale * xp.where(x > 0, x, self.alpha * xp.expm1(xp.minimum(x, 0))),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        slope = xp.where(x > 0, self.scale, self.scale * self.alpha * xp.exp(xp.minimum(x, 0)))
        return (gy * slope,)


def selu(x: Variable, scale: float = 1.05070098735548, alpha: float = 1.673263242354377,
         n_outputs: int = -1, outputs=None) -> Variable:
    """Scaled exponential linear unit (self-normalizing defaults)."""
    default_outputs("F.selu", n_outputs, outputs)
    return SELU(scale, alpha)(x)


class _Mirrored(Function):
    """Base of f(x) and f(-x) concatenated along ``axis``: the output is twice as long there."""

    def __init__(self, axis: int):
        self.axis = axis

    def output_specs(self, inputs):
        (x,) = inputs
        self.axis = one_axis(self, self.axis, x.ndim)
        shape = list(x.shape)
        shape[self.axis] *= 2
        return [(tuple(shape), x.dtype)]

    def half(self, xp, x):
        raise NotImplementedError

    def slope(self, xp, x):
        raise NotImplementedError

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (xp.concatenate([self.half(xp, x), self.half(xp, -x)], axis=self.axis),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        first, second = xp.split(gy, 2, axis=self.axis)
        return (first * self.slope(xp, x) - second * self.slope(xp, -x),)


class CELU(_Mirrored):
    """elu(x) and elu(-x), concatenated along an axis."""

    nnabla_spec = FunctionSpec("CELU", "celu_param", ("alpha", "axis"), attrs("alpha", "axis"),
                               call("celu", "alpha", "axis"))

    def __init__(self, alpha: float, axis: int):
        super().__init__(axis)
        self.alpha = float(alpha)

    def half(self, xp, x):
        return xp.where(x > 0, x, self.alpha * xp.expm1(xp.minimum(x, 0)))

    def slope(self, xp, x):
        return xp.where(x > 0, 1, self.alpha * xp.exp(xp.minimum(x, 0)))


def celu(x: Variable, alpha: float = 1.0, axis: int = 1,
         n_outputs: int = -1, outputs=None) -> Variable:
    """Concatenated ELU: elu(x, alpha) and elu(-x, alpha) joined along ``axis``."""
    default_outputs("F.celu", n_outputs, outputs)
    return CELU(alpha, axis)(x)


class CReLU(_Mirrored):
    """relu(x) and relu(-x), concatenated along an axis."""

    nnabla_spec = FunctionSpec("CReLU", "crelu_param", ("axis",), int_axis, call("crelu", "axis"))

    def half(self, xp, x):
        return xp.maximum(x, 0)

    def slope(self, xp, x):
        return x > 0


def crelu(x: Variable, axis: int = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """Concatenated ReLU: relu(x) and relu(-x) joined along ``axis``."""
    default_outputs("F.crelu", n_outputs, outputs)
    return CReLU(axis)(x)


_GELU_C = float(np.sqrt(2 / np.pi))


class GELU(Unary):
    """x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x**3))), the tanh form nnabla uses."""

    nnabla_spec = without_params("GELU", "gelu")

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (x / 2 * (1 + xp.tanh(_GELU_C * (x + 0.044715 * x ** 3))),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        t = xp.tanh(_GELU_C * (x + 0.044715 * x ** 3))
        inner = _GELU_C * (1 + 3 * 0.044715 * x * x)
        return (gy * ((1 + t) / 2 + x / 2 * (1 - t * t) * inner),)


def gelu(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Gaussian error linear unit (tanh approximation, as nnabla)."""
    default_outputs("F.gelu", n_outputs, outputs)
    return GELU()(x)


class Mish(Unary):
    """x * tanh(softplus(x))."""

    nnabla_spec = without_params("Mish", "mish")

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (x * xp.tanh(_softplus(xp, x)),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        t = xp.tanh(_softplus(xp, x))
        return (gy * (t + x * (1 - t * t) * logistic(xp, x)),)


def mish(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Mish: x * tanh(log(1 + exp(x)))."""
    default_outputs("F.mish", n_outputs, outputs)
    return Mish()(x)


class Swish(Unary):
    """x * sigmoid(x)."""

    nnabla_spec = without_params("Swish", "swish")

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (x * logistic(xp, x),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        s = logistic(xp, x)
        return (gy * s * (1 + x * (1 - s)),)


def swish(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Swish (SiLU): x * sigmoid(x)."""
    default_outputs("F.swish", n_outputs, outputs)
    return Swish()(x)


class SoftPlus(Unary):
    """log(1 + exp(beta x)) / beta, computed without overflow."""

    nnabla_spec = FunctionSpec("SoftPlus", "softplus_param", ("beta",), attrs("beta"),
                               call("softplus", "beta"))

    def __init__(self, beta: float):
        self.beta = float(beta)

    def output_specs(self, inputs):
        if self.beta == 0:
            raise self.error("beta must not be 0: softplus is log(1 + exp(beta x)) / beta; "
                             "give a non-zero beta (1.0 is the usual)")
        return super().output_specs(inputs)

    def forward_arrays(self, xp, xs):
        return (_softplus(xp, self.beta * xs[0]) / self.beta,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * logistic(xp, self.beta * xs[0]),)


def softplus(x: Variable, beta: float = 1.0, n_outputs: int = -1, outputs=None) -> Variable:
    """Smooth ReLU: log(1 + exp(beta x)) / beta."""
    default_outputs("F.softplus", n_outputs, outputs)
    return SoftPlus(beta)(x)


class SoftSign(Unary):
    """x / (1 + |x|)."""

    nnabla_spec = without_params("SoftSign", "softsign")

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (x / (1 + xp.abs(x)),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        d = 1 + xp.abs(xs[0])
        return (gys[0] / (d * d),)


def softsign(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """SoftSign: x / (1 + |x|)."""
    default_outputs("F.softsign", n_outputs, outputs)
    return SoftSign()(x)


class LogSigmoid(Unary):
    """log(sigmoid(x)) = -softplus(-x), computed without overflow."""

    nnabla_spec = without_params("LogSigmoid", "log_sigmoid")

    def forward_arrays(self, xp, xs):
        return (-_softplus(xp, -xs[0]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * logistic(xp, -xs[0]),)


def log_sigmoid(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Logarithm of the logistic sigmoid."""
    default_outputs("F.log_sigmoid", n_outputs, outputs)
    return LogSigmoid()(x)


class HardSigmoid(Unary):
    """clip(0.2 x + 0.5, 0, 1); the gradient 0.2 passes where |x| < 2.5."""

    nnabla_spec = without_params("HardSigmoid", "hard_sigmoid")

    def forward_arrays(self, xp, xs):
        return (xp.clip(0.2 * xs[0] + 0.5, 0, 1),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        return (gys[0] * (xp.abs(x) < 2.5) * 0.2,)


def hard_sigmoid(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Piecewise-linear sigmoid: clip(0.2 x + 0.5, 0, 1)."""
    default_outputs("F.hard_sigmoid", n_outputs, outputs)
    return HardSigmoid()(x)


class HardTanh(Unary):
    """clip(x, -1, 1); the gradient passes where |x| < 1."""

    nnabla_spec = without_params("HardTanh", "hard_tanh")

    def forward_arrays(self, xp, xs):
        return (xp.clip(xs[0], -1, 1),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * (xp.abs(xs[0]) < 1),)


def hard_tanh(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Piecewise-linear tanh: clip(x, -1, 1)."""
    default_outputs("F.hard_tanh", n_outputs, outputs)
    return HardTanh()(x)


class TanhShrink(Unary):
    """x - tanh(x); its gradient is tanh(x)**2."""

    nnabla_spec = without_params("TanhShrink", "tanh_shrink")

    def forward_arrays(self, xp, xs):
        (x,) = xs
        return (x - xp.tanh(x),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        t = xp.tanh(xs[0])
        return (gys[0] * t * t,)


def tanh_shrink(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Tanh shrink: x - tanh(x)."""
    default_outputs("F.tanh_shrink", n_outputs, outputs)
    return TanhShrink()(x)


class PReLU(Function):
    """x for x > 0, w x otherwise, with a learned slope ``w``: one value (size 1) or
    one per channel of the axis ``base_axis``."""

    nnabla_spec = FunctionSpec("PReLU", "prelu_param", ("base_axis",), attrs("base_axis"),
                               call("prelu", "base_axis"))

    def __init__(self, base_axis: int):
        self.base_axis = base_axis

    def output_specs(self, inputs):
        x, w = inputs
        self.base_axis = base_axis_of(self, self.base_axis, x.ndim)
        channels = x.shape[self.base_axis]
        self.w_shape = w.shape
        if w.size == 1:
            self.view = ()
        elif w.shape == (channels,):
            self.view = (channels,) + (1,) * (x.ndim - self.base_axis - 1)
        else:
            raise self.error(f"the slope must have one value (size 1) or one per channel, shape "
                             f"({channels},) for axis {self.base_axis} of the input {x.shape}, got "
                             f"shape {w.shape}; change the slope or base_axis")
        return [(x.shape, np.result_type(x.dtype, w.dtype))]

    def forward_arrays(self, xp, xs):
        x, w = xs
        w = w.reshape(self.view)
        return (xp.where(x > 0, x, w * x),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x, w), (gy,) = xs, gys
        below = x <= 0
        gx = xp.where(below, w.reshape(self.view) * gy, gy) if need_grads[0] else None
        gw = None
        if need_grads[1]:
            gw = sum_to(gy * x * below, self.view).reshape(self.w_shape)
        return (gx, gw)


def prelu(x0: Variable, x1: Variable, base_axis: int = 1,
          n_outputs: int = -1, outputs=None) -> Variable:
    """Parametric ReLU of ``x0`` with negative slope(s) ``x1``: one value, or one per
    channel of axis ``base_axis``."""
    default_outputs("F.prelu", n_outputs, outputs)
    return PReLU(base_axis)(x0, x1)

"""Activation functions: elementwise nonlinearities and softmax."""
from __future__ import annotations

from ..graph import Function, Variable
from .base import Unary, one_axis

__all__ = ["relu", "elu", "leaky_relu", "tanh", "sigmoid", "softmax", "log_softmax"]


def _sigmoid(xp, x):
    """1 / (1 + exp(-x)) without overflow: exp is taken of -|x| only."""
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1, e) / (1 + e)


def _log_softmax(xp, x, axis: int):
    """log softmax(x) along ``axis``, shifted by the maximum so that exp cannot overflow."""
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))


class ReLU(Unary):
    """max(x, 0); the gradient passes where the output is positive."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (xp.maximum(xs[0], 0),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * (ys[0] > 0),)


def relu(x: Variable, inplace: bool = False) -> Variable:
    """Rectified linear unit."""
    return ReLU()(x)


class ELU(Unary):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""

    def __init__(self, alpha: float):
        self.alpha = alpha

    def forward(self, xp, xs):
        (x,) = xs
        return (xp.where(x > 0, x, self.alpha * xp.expm1(xp.minimum(x, 0))),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        return (gy * xp.where(x > 0, 1, self.alpha * xp.exp(xp.minimum(x, 0))),)


def elu(x: Variable, alpha: float = 1.0) -> Variable:
    """Exponential linear unit."""
    return ELU(alpha)(x)


class LeakyReLU(Unary):
    """x for x > 0, alpha * x otherwise."""

    def __init__(self, alpha: float):
        self.alpha = alpha

    def forward(self, xp, xs):
        (x,) = xs
        return (xp.where(x > 0, x, self.alpha * x),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x,), (gy,) = xs, gys
        return (xp.where(x > 0, gy, self.alpha * gy),)


def leaky_relu(x: Variable, alpha: float = 0.1, inplace: bool = False) -> Variable:
    """Leaky rectified linear unit: slope ``alpha`` below zero."""
    return LeakyReLU(alpha)(x)


class Tanh(Unary):
    """Hyperbolic tangent; its gradient 1 - y**2 comes from the output."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (xp.tanh(xs[0]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (y,) = ys
        return (gys[0] * (1 - y * y),)


def tanh(x: Variable) -> Variable:
    """Elementwise hyperbolic tangent."""
    return Tanh()(x)


class Sigmoid(Unary):
    """1 / (1 + exp(-x)); its gradient y (1 - y) comes from the output."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (_sigmoid(xp, xs[0]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (y,) = ys
        return (gys[0] * y * (1 - y),)


def sigmoid(x: Variable) -> Variable:
    """Elementwise logistic sigmoid."""
    return Sigmoid()(x)


class _AlongAxis(Function):
    """Base of the normalizations along one axis (None: the last)."""

    def __init__(self, axis: int | None):
        self.axis = axis

    def setup(self, inputs):
        (x,) = inputs
        self.axis = one_axis(self, self.axis, x.ndim)
        return [(x.shape, x.dtype)]


class Softmax(_AlongAxis):
    """exp(x) / sum(exp(x)) along an axis, shifted by the maximum for stability."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        (x,) = xs
        e = xp.exp(x - x.max(axis=self.axis, keepdims=True))
        return (e / e.sum(axis=self.axis, keepdims=True),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (y,), (gy,) = ys, gys
        return (y * (gy - (gy * y).sum(axis=self.axis, keepdims=True)),)


def softmax(x: Variable, axis: int | None = None) -> Variable:
    """Softmax along ``axis`` (default: the last axis)."""
    return Softmax(axis)(x)


class LogSoftmax(_AlongAxis):
    """x - log(sum(exp(x))) along an axis, shifted by the maximum for stability."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (_log_softmax(xp, xs[0], self.axis),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (y,), (gy,) = ys, gys
        return (gy - xp.exp(y) * gy.sum(axis=self.axis, keepdims=True),)


def log_softmax(x: Variable, axis: int | None = None) -> Variable:
    """Logarithm of the softmax along ``axis`` (default: the last axis)."""
    return LogSoftmax(axis)(x)

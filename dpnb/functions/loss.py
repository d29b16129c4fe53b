"""Loss functions and error metrics."""
from __future__ import annotations

import numpy as np

from ..graph import Function, Variable
from .activation import _log_softmax, _sigmoid
from .base import Binary, one_axis

__all__ = ["softmax_cross_entropy", "sigmoid_cross_entropy", "squared_error", "top_n_error"]


class _Labelled(Function):
    """Base of the functions of scores ``x`` and integer class labels ``target``
    along ``axis`` (default: the last): the target has x's shape with size 1
    on that axis, and so has the output."""

    def __init__(self, axis: int | None):
        self.axis = axis

    def setup(self, inputs):
        x, t = inputs
        self.axis = one_axis(self, self.axis, x.ndim)
        expected = x.shape[:self.axis] + (1,) + x.shape[self.axis + 1:]
        if t.shape != expected:
            raise self.error(f"target must have shape {expected} (x's shape {x.shape} with 1 on "
                             f"axis {self.axis}), got {t.shape}; reshape the labels")
        if not (np.issubdtype(t.dtype, np.integer) or np.issubdtype(t.dtype, np.floating)):
            raise self.error(f"target must hold class numbers (int or float), got dtype {t.dtype}")
        return [(expected, x.dtype)]

    def _labels(self, t, classes: int):
        """The target as int64 labels, or an error naming a value that is no class."""
        labels = t.astype(np.int64)
        bad = (labels != t) | (labels < 0) | (labels >= classes)
        if bool(bad.any()):
            value = t[bad][0].item()
            raise self.error(f"target holds {value!r}, but labels must be integers in "
                             f"[0, {classes}) for {classes} classes on axis {self.axis}; "
                             "check the labels or the number of outputs")
        return labels


class SoftmaxCrossEntropy(_Labelled):
    """-log softmax(x)[target] along an axis; the gradient goes to x only."""

    def forward(self, xp, xs):
        x, t = xs
        labels = self._labels(t, x.shape[self.axis])
        return (-xp.take_along_axis(_log_softmax(xp, x, self.axis), labels, axis=self.axis),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x, t), (gy,) = xs, gys
        if not need_grads[0]:
            return (None, None)
        p = xp.exp(_log_softmax(xp, x, self.axis))
        classes = xp.arange(x.shape[self.axis]).reshape(
            tuple(-1 if a == self.axis else 1 for a in range(x.ndim)))
        return (gy * (p - (classes == t.astype(np.int64))), None)


def softmax_cross_entropy(x: Variable, target: Variable, axis: int | None = None) -> Variable:
    """Cross entropy of softmax(x) along ``axis`` (default: the last) against
    integer labels of x's shape with size 1 on that axis; the output has that shape."""
    return SoftmaxCrossEntropy(axis)(x, target)


class TopNError(_Labelled):
    """1 where the target's score is not among the n largest along the axis, else 0;
    ties count against the target."""

    differentiable = False

    def __init__(self, axis: int | None, n: int):
        super().__init__(axis)
        self.n = n

    def setup(self, inputs):
        specs = super().setup(inputs)
        if not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise self.error(f"n must be a positive int, got {self.n!r}")
        return specs

    def forward(self, xp, xs):
        x, t = xs
        labels = self._labels(t, x.shape[self.axis])
        score = xp.take_along_axis(x, labels, axis=self.axis)
        rank = (x >= score).sum(axis=self.axis, keepdims=True)
        return ((rank > self.n).astype(x.dtype),)


def top_n_error(x: Variable, target: Variable, axis: int | None = None, n: int = 1) -> Variable:
    """Top-n error per sample: 1 where the label is not among the n highest scores
    along ``axis`` (default: the last), else 0; not differentiable."""
    return TopNError(axis, n)(x, target)


class SigmoidCrossEntropy(Function):
    """Binary cross entropy of sigmoid(x) against targets in [0, 1], computed
    stably from x; the gradient goes to x only."""

    def setup(self, inputs):
        x, t = inputs
        if t.shape != x.shape:
            raise self.error(f"target must have x's shape {x.shape}, got {t.shape}")
        return [(x.shape, x.dtype)]

    def forward(self, xp, xs):
        x, t = xs
        return (xp.maximum(x, 0) - x * t + xp.log1p(xp.exp(-xp.abs(x))),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x, t), (gy,) = xs, gys
        if not need_grads[0]:
            return (None, None)
        return (gy * (_sigmoid(xp, x) - t), None)


def sigmoid_cross_entropy(x: Variable, target: Variable) -> Variable:
    """Elementwise -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x)))."""
    return SigmoidCrossEntropy()(x, target)


class SquaredError(Binary):
    """(x0 - x1) ** 2, with NumPy broadcasting."""

    def forward(self, xp, xs):
        d = xs[0] - xs[1]
        return (d * d,)

    def backward(self, xp, xs, ys, gys, need_grads):
        g = 2 * gys[0] * (xs[0] - xs[1])
        return self.reduce_grads((g, -g if need_grads[1] else None), need_grads)


def squared_error(x0: Variable, x1: Variable) -> Variable:
    """Elementwise squared difference (broadcasting)."""
    return SquaredError()(x0, x1)

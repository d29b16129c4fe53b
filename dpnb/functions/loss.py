"""Loss functions and error metrics, and the confusion matrix."""
from __future__ import annotations

import math

import numpy as np

from ..graph import Function, Variable
from .activation import log_softmax_of, logistic
from .base import Binary, base_axis_of, default_outputs, one_axis
from .graph_module import on_variables
from .specs import FunctionSpec, attrs, call, int_axis, without_params

__all__ = ["softmax_cross_entropy", "sigmoid_cross_entropy", "squared_error", "top_n_error",
           "binary_cross_entropy", "categorical_cross_entropy", "huber_loss", "absolute_error",
           "epsilon_insensitive_loss", "kl_multinomial", "binary_error", "confusion_matrix"]


class _Labelled(Function):
    """Base of the functions of scores ``x`` and integer class labels ``target``
    along ``axis`` (default: the last): the target has x's shape with size 1
    on that axis, and so has the output."""

    # True: a negative label leaves its sample out (loss and gradient 0), as nnabla's
    # cross entropies do; False: it is an error like any label that is no class
    ignores_negative_labels = False

    def __init__(self, axis: int | None):
        self.axis = axis

    def output_specs(self, inputs):
        x, t = inputs
        self.axis = one_axis(self, self.axis, x.ndim)
        expected = x.shape[:self.axis] + (1,) + x.shape[self.axis + 1:]
        if t.shape != expected:
            raise self.error(f"target must have shape {expected} (x's shape {x.shape} with 1 on "
                             f"axis {self.axis}), got {t.shape}; reshape the labels")
        if not (np.issubdtype(t.dtype, np.integer) or np.issubdtype(t.dtype, np.floating)):
            raise self.error(f"target must hold class numbers (int or float), got dtype {t.dtype}")
        # x as (before, classes, after): a sample's class k is entry start + k * after of
        # the flat x, where start (the target's shape) is its class 0
        before, after = math.prod(x.shape[:self.axis]), math.prod(x.shape[self.axis + 1:])
        self.stride = after
        self.starts = {np: (np.arange(before)[:, None] * (x.shape[self.axis] * after)
                            + np.arange(after)).reshape(expected)}  # array module -> its copy
        return [(expected, x.dtype)]

    def _labels(self, t, classes: int):
        """The target as int64 labels, or an error naming a value that is no class."""
        labels = t.astype(np.int64)
        bad = labels >= classes
        if not self.ignores_negative_labels:
            bad |= labels < 0
        if t.dtype.kind == "f":
            bad |= labels != t
        if bool(bad.any()):
            value = t[bad][0].item()
            negative = (" (or negative, to leave a sample out)"
                        if self.ignores_negative_labels else "")
            raise self.error(f"target holds {value!r}, but labels must be integers in "
                             f"[0, {classes}){negative} for {classes} classes on axis "
                             f"{self.axis}; check the labels or the number of outputs")
        return labels

    def _flat_index(self, xp, labels):
        """Where each sample's label is in the flat x (its class 0 where the label is
        negative), and where the labels are classes."""
        kept = labels >= 0
        starts = self.starts.get(xp)
        if starts is None:  # copied to the device once, not at every pass
            starts = self.starts[xp] = xp.asarray(self.starts[np])
        return starts + xp.maximum(labels, 0) * self.stride, kept

    def _picked(self, xp, x, labels):
        """x at each sample's label along the axis (x's first class where the label is
        negative), and where the labels are classes."""
        index, kept = self._flat_index(xp, labels)
        return x.reshape(-1)[index], kept


class SoftmaxCrossEntropy(_Labelled):
    """-log softmax(x)[target] along an axis (0 where the target is negative); the
    gradient goes to x only.  Forward keeps log softmax(x) for backward, as nnabla's."""

    nnabla_spec = FunctionSpec("SoftmaxCrossEntropy", "softmax_cross_entropy_param", ("axis",),
                               int_axis, call("softmax_cross_entropy", "axis"))

    ignores_negative_labels = True
    log_p = None  # log softmax(x), from the last forward

    def forward_arrays(self, xp, xs):
        x, t = xs
        labels = self._labels(t, x.shape[self.axis])
        self.log_p = log_softmax_of(xp, x, self.axis)
        picked, kept = self._picked(xp, self.log_p, labels)
        xp.negative(picked, out=picked)
        picked *= kept
        return (picked.astype(x.dtype, copy=False),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x, t), (gy,) = xs, gys
        if not need_grads[0]:
            return (None, None)
        index, kept = self._flat_index(xp, t.astype(np.int64))
        gy = gy * kept
        gx = xp.exp(log_softmax_of(xp, x, self.axis) if self.log_p is None else self.log_p)
        gx *= gy
        gx.reshape(-1)[index] -= gy  # minus gy at the label: p - one_hot(label), times gy
        return (gx, None)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its backward as a graph, from x: (softmax(x) - one_hot(target)) * gy, 0 where the
        target is negative."""
        if not need_grads[0]:
            return [None, None]

        def compute(xp, x, t, gy):
            labels = t.astype(np.int64)
            p = xp.exp(log_softmax_of(xp, x, self.axis))
            classes = xp.arange(x.shape[self.axis]).reshape(
                tuple(-1 if a == self.axis else 1 for a in range(x.ndim)))
            return xp.where(labels >= 0, gy, 0) * (p - (classes == labels))
        return [on_variables(compute, xs[0], xs[1], gys[0]), None]


def softmax_cross_entropy(x: Variable, target: Variable, axis: int | None = None,
                          n_outputs: int = -1, outputs=None) -> Variable:
    """Cross entropy of softmax(x) along ``axis`` (default: the last) against
    integer labels of x's shape with size 1 on that axis; the output has that shape."""
    default_outputs("F.softmax_cross_entropy", n_outputs, outputs)
    return SoftmaxCrossEntropy(axis)(x, target)


class TopNError(_Labelled):
    """1 where the target's score is not among the n largest along the axis, else 0;
    ties count against the target."""

    nnabla_spec = FunctionSpec("TopNError", "top_n_error_param", ("axis", "n"), attrs("axis", "n"),
                               call("top_n_error", "axis", "n"))

    differentiable = False

    def __init__(self, axis: int | None, n: int):
        super().__init__(axis)
        self.n = n

    def output_specs(self, inputs):
        specs = super().output_specs(inputs)
        if not isinstance(self.n, (int, np.integer)) or self.n < 1:
            raise self.error(f"n must be a positive int, got {self.n!r}")
        return specs

    def forward_arrays(self, xp, xs):
        x, t = xs
        labels = self._labels(t, x.shape[self.axis])
        score = xp.take_along_axis(x, labels, axis=self.axis)
        rank = (x >= score).sum(axis=self.axis, keepdims=True)
        return ((rank > self.n).astype(x.dtype),)


def top_n_error(x: Variable, target: Variable, axis: int | None = None, n: int = 1,
                n_outputs: int = -1, outputs=None) -> Variable:
    """Top-n error per sample: 1 where the label is not among the n highest scores
    along ``axis`` (default: the last), else 0; not differentiable."""
    default_outputs("F.top_n_error", n_outputs, outputs)
    return TopNError(axis, n)(x, target)


class SigmoidCrossEntropy(Function):
    """Binary cross entropy of sigmoid(x) against targets in [0, 1], computed
    stably from x; the gradient goes to x only."""

    nnabla_spec = without_params("SigmoidCrossEntropy", "sigmoid_cross_entropy")

    def output_specs(self, inputs):
        x, t = inputs
        if t.shape != x.shape:
            raise self.error(f"target must have x's shape {x.shape}, got {t.shape}")
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x, t = xs
        return (xp.maximum(x, 0) - x * t + xp.log1p(xp.exp(-xp.abs(x))),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x, t), (gy,) = xs, gys
        if not need_grads[0]:
            return (None, None)
        return (gy * (logistic(xp, x) - t), None)


def sigmoid_cross_entropy(x: Variable, target: Variable,
                          n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))).  Targets may be
    probabilities; nnabla 1.39 truncates them to integer labels, so the two agree on 0 and 1."""
    default_outputs("F.sigmoid_cross_entropy", n_outputs, outputs)
    return SigmoidCrossEntropy()(x, target)


class SquaredError(Binary):
    """(x0 - x1) ** 2, with NumPy broadcasting."""

    nnabla_spec = without_params("SquaredError", "squared_error")

    def forward_arrays(self, xp, xs):
        d = xs[0] - xs[1]
        return (d * d,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = 2 * gys[0] * (xs[0] - xs[1])
        return self.reduce_grads((g, -g if need_grads[1] else None), need_grads)


def squared_error(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise squared difference (broadcasting)."""
    default_outputs("F.squared_error", n_outputs, outputs)
    return SquaredError()(x0, x1)


def _tiny(dtype) -> float:
    """The smallest normal number of ``dtype``: nnabla's floor under logarithms and divisors."""
    return float(np.finfo(dtype).tiny)


class _SameShape(Function):
    """Base of the elementwise functions of two inputs that must have one shape."""

    first, second = "x", "target"

    def output_specs(self, inputs):
        a, b = inputs
        if a.shape != b.shape:
            raise self.error(f"{self.second} must have {self.first}'s shape {a.shape}, got "
                             f"{b.shape}; reshape one of them")
        return [(a.shape, a.dtype)]


class BinaryCrossEntropy(_SameShape):
    """-(t log x + (1 - t) log(1 - x)) for probabilities ``x``, with the logarithms'
    arguments floored at the dtype's smallest normal number; both inputs get gradients."""

    nnabla_spec = without_params("BinaryCrossEntropy", "binary_cross_entropy")

    def forward_arrays(self, xp, xs):
        x, t = xs
        tiny = _tiny(x.dtype)
        return (-(t * xp.log(xp.maximum(x, tiny)) + (1 - t) * xp.log(xp.maximum(1 - x, tiny))),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x, t), (gy,) = xs, gys
        tiny = _tiny(x.dtype)
        gx = gy * (x - t) / xp.maximum(x * (1 - x), tiny) if need_grads[0] else None
        gt = None
        if need_grads[1]:
            gt = gy * (xp.log(xp.maximum(1 - x, tiny)) - xp.log(xp.maximum(x, tiny)))
        return (gx, gt)


def binary_cross_entropy(x: Variable, target: Variable,
                         n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise cross entropy of probabilities ``x`` against targets in [0, 1]."""
    default_outputs("F.binary_cross_entropy", n_outputs, outputs)
    return BinaryCrossEntropy()(x, target)


class CategoricalCrossEntropy(_Labelled):
    """-log x[target] for probabilities ``x`` along an axis (floored at the smallest
    normal number; 0 where the target is negative); the gradient goes to x only."""

    nnabla_spec = FunctionSpec("CategoricalCrossEntropy", "categorical_cross_entropy_param",
                               ("axis",), int_axis, call("categorical_cross_entropy", "axis"))

    ignores_negative_labels = True

    def forward_arrays(self, xp, xs):
        x, t = xs
        labels = self._labels(t, x.shape[self.axis])
        picked, kept = self._picked(xp, x, labels)
        return (xp.where(kept, -xp.log(xp.maximum(picked, _tiny(x.dtype))), 0).astype(x.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (x, t), (gy,) = xs, gys
        if not need_grads[0]:
            return (None, None)
        labels = t.astype(np.int64)
        picked, _ = self._picked(xp, x, labels)
        classes = xp.arange(x.shape[self.axis]).reshape(
            tuple(-1 if a == self.axis else 1 for a in range(x.ndim)))
        return ((classes == labels) * (-gy / xp.maximum(picked, _tiny(x.dtype))), None)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its backward with the label's entry picked by a one-hot sum instead of an index."""
        if not need_grads[0]:
            return [None, None]

        def compute(xp, x, t, gy):
            classes = xp.arange(x.shape[self.axis]).reshape(
                tuple(-1 if a == self.axis else 1 for a in range(x.ndim)))
            hit = classes == t  # one-hot; all 0 where the label is negative
            left_out = 1 - hit.sum(axis=self.axis, keepdims=True)  # 1 there: no 0 to divide by
            picked = (x * hit).sum(axis=self.axis, keepdims=True) + left_out
            return hit * (-gy / xp.maximum(picked, _tiny(x.dtype)))
        return [on_variables(compute, xs[0], xs[1], gys[0]), None]


def categorical_cross_entropy(x: Variable, target: Variable, axis: int | None = None,
                              n_outputs: int = -1, outputs=None) -> Variable:
    """Cross entropy of probabilities ``x`` along ``axis`` (default: the last) against
    integer labels of x's shape with size 1 on that axis; the output has that shape."""
    default_outputs("F.categorical_cross_entropy", n_outputs, outputs)
    return CategoricalCrossEntropy(axis)(x, target)


class HuberLoss(Binary):
    """d**2 where |d| < delta, else delta (2 |d| - delta), for d = x0 - x1 (nnabla's
    scale: twice the textbook Huber loss)."""

    nnabla_spec = FunctionSpec("HuberLoss", "huber_loss_param", ("delta",), attrs("delta"),
                               call("huber_loss", "delta"))

    def __init__(self, delta: float):
        self.delta = float(delta)

    def output_specs(self, inputs):
        if self.delta <= 0:
            raise self.error(f"delta must be > 0, got {self.delta}")
        return super().output_specs(inputs)

    def forward_arrays(self, xp, xs):
        d = xs[0] - xs[1]
        a = xp.abs(d)
        return (xp.where(a < self.delta, d * d, self.delta * (2 * a - self.delta)),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        d = xs[0] - xs[1]
        g = 2 * gys[0] * xp.clip(d, -self.delta, self.delta)
        return self.reduce_grads((g, -g if need_grads[1] else None), need_grads)


def huber_loss(x0: Variable, x1: Variable, delta: float = 1.0,
               n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise Huber loss of x0 - x1: quadratic below ``delta``, linear above."""
    default_outputs("F.huber_loss", n_outputs, outputs)
    return HuberLoss(delta)(x0, x1)


class AbsoluteError(Binary):
    """|x0 - x1|, with NumPy broadcasting."""

    nnabla_spec = without_params("AbsoluteError", "absolute_error")

    def forward_arrays(self, xp, xs):
        return (xp.abs(xs[0] - xs[1]),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = gys[0] * xp.sign(xs[0] - xs[1])
        return self.reduce_grads((g, -g if need_grads[1] else None), need_grads)


def absolute_error(x0: Variable, x1: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise absolute difference (broadcasting)."""
    default_outputs("F.absolute_error", n_outputs, outputs)
    return AbsoluteError()(x0, x1)


class EpsilonInsensitiveLoss(Binary):
    """max(|x0 - x1| - epsilon, 0), with NumPy broadcasting."""

    nnabla_spec = FunctionSpec("EpsilonInsensitiveLoss", "epsilon_insensitive_loss_param",
                               ("epsilon",), attrs("epsilon"),
                               call("epsilon_insensitive_loss", "epsilon"))

    def __init__(self, epsilon: float):
        self.epsilon = float(epsilon)

    def output_specs(self, inputs):
        if self.epsilon < 0:
            raise self.error(f"epsilon must be >= 0, got {self.epsilon}")
        return super().output_specs(inputs)

    def forward_arrays(self, xp, xs):
        return (xp.maximum(xp.abs(xs[0] - xs[1]) - self.epsilon, 0),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        d = xs[0] - xs[1]
        g = gys[0] * xp.sign(d) * (xp.abs(d) > self.epsilon)
        return self.reduce_grads((g, -g if need_grads[1] else None), need_grads)


def epsilon_insensitive_loss(x0: Variable, x1: Variable, epsilon: float,
                             n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise |x0 - x1| less ``epsilon``, floored at zero (broadcasting)."""
    default_outputs("F.epsilon_insensitive_loss", n_outputs, outputs)
    return EpsilonInsensitiveLoss(epsilon)(x0, x1)


class KLMultinomial(Function):
    """sum p (log p - log q) over the axes from ``base_axis`` on, as nnabla: 1e-8 is
    added under both logarithms, and the gradients are log(p + 1e-8) - log(q + 1e-8) + 1
    for p and -p / q for q."""

    nnabla_spec = FunctionSpec("KLMultinomial", "kl_multinomial_param", ("base_axis",),
                               attrs("base_axis"), call("kl_multinomial", "base_axis"))

    _EPS = 1e-8

    def __init__(self, base_axis: int):
        self.base_axis = base_axis

    def output_specs(self, inputs):
        p, q = inputs
        if p.shape != q.shape:
            raise self.error(f"q must have p's shape {p.shape}, got {q.shape}")
        self.base_axis = base_axis_of(self, self.base_axis, p.ndim)
        self.axes = tuple(range(self.base_axis, p.ndim))
        self.kept = p.shape[:self.base_axis] + (1,) * len(self.axes)
        return [(p.shape[:self.base_axis] + (1,), p.dtype)]

    def _log_ratio(self, xp, p, q):
        return xp.log(p + self._EPS) - xp.log(q + self._EPS)

    def forward_arrays(self, xp, xs):
        p, q = xs
        kl = (p * self._log_ratio(xp, p, q)).sum(axis=self.axes)
        return (kl.reshape(p.shape[:self.base_axis] + (1,)),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (p, q), (gy,) = xs, gys
        g = gy.reshape(self.kept)
        gp = g * (self._log_ratio(xp, p, q) + 1) if need_grads[0] else None
        gq = -g * p / q if need_grads[1] else None
        return (gp, gq)


def kl_multinomial(p: Variable, q: Variable, base_axis: int = 1,
                   n_outputs: int = -1, outputs=None) -> Variable:
    """KL divergence of multinomial distributions ``p`` from ``q`` over the axes from
    ``base_axis`` on; the output has shape p.shape[:base_axis] + (1,)."""
    default_outputs("F.kl_multinomial", n_outputs, outputs)
    return KLMultinomial(base_axis)(p, q)


class BinaryError(_SameShape):
    """1 where x and the target fall on different sides of 0.5 (at 0.5: the upper
    side), else 0; not differentiable."""

    nnabla_spec = without_params("BinaryError", "binary_error")

    differentiable = False

    def forward_arrays(self, xp, xs):
        x, t = xs
        return (((x >= 0.5) != (t >= 0.5)).astype(x.dtype),)


def binary_error(x: Variable, target: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Elementwise 0/1 error of probabilities ``x`` thresholded at 0.5 against the target."""
    default_outputs("F.binary_error", n_outputs, outputs)
    return BinaryError()(x, target)


class ConfusionMatrix(_Labelled):
    """The (C, C) int32 count of samples by label (rows) and by the class of the largest
    score along the axis (columns; the first of equal ones), summed over all samples."""

    nnabla_spec = FunctionSpec("ConfusionMatrix", "confusion_matrix_param", ("axis",), int_axis,
                               call("confusion_matrix", "axis"))

    differentiable = False

    def output_specs(self, inputs):
        super().output_specs(inputs)
        self.classes = inputs[0].shape[self.axis]
        return [((self.classes,) * 2, np.dtype(np.int32))]

    def forward_arrays(self, xp, xs):
        x, t = xs
        labels = self._labels(t, self.classes).reshape(-1)
        guess = x.argmax(axis=self.axis).reshape(-1)
        cells = xp.bincount(labels * self.classes + guess, minlength=self.classes ** 2)
        return (cells.reshape(self.classes, self.classes).astype(np.int32),)


def confusion_matrix(x: Variable, target: Variable, axis: int | None = None, n_outputs: int = -1,
                     outputs=None) -> Variable:
    """The confusion matrix of scores ``x`` against integer labels ``target`` (x's shape
    with 1 on ``axis``, default the last): row = label, column = predicted class."""
    default_outputs("F.confusion_matrix", n_outputs, outputs)
    return ConfusionMatrix(axis)(x, target)

"""Arithmetic, elementwise math and reductions."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable


def _broadcast_shape(fn: Function, a: Variable, b: Variable) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise fn.error(f"shapes {a.shape} and {b.shape} do not broadcast together") from None


def _sum_to(xp, g, shape: tuple[int, ...]):
    """Reduce a broadcast gradient back to ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


def _axis(fn: Function, axis: int | None, ndim: int) -> int:
    """One axis (``None``: the last one), checked and made non-negative."""
    axis = ndim - 1 if axis is None else axis
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise fn.error(f"axis must be an int in [{-ndim}, {ndim}) for an input of {ndim} "
                       f"dimensions, got {axis!r}")
    return int(axis) % ndim


def _axes(fn: Function, axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """Reduction axes (``None``: all of them), checked, non-negative and sorted."""
    if axis is None:
        return tuple(range(ndim))
    given = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    axes = tuple(sorted(_axis(fn, a, ndim) for a in given))
    if len(set(axes)) != len(axes):
        raise fn.error(f"axis {axis!r} names an axis more than once; give each axis once")
    return axes


__all__ = [
    "add2", "sub2", "mul2", "div2", "pow2",
    "add_scalar", "mul_scalar", "pow_scalar", "r_sub_scalar", "r_div_scalar", "r_pow_scalar",
    "exp", "log", "sum", "mean", "max", "min",
]


class _Binary(Function):
    """Base of the elementwise functions of two variables, with NumPy broadcasting."""

    def setup(self, inputs):
        a, b = inputs
        self.shapes = (a.shape, b.shape)
        return [(_broadcast_shape(self, a, b), np.result_type(a.dtype, b.dtype))]

    def _reduce(self, xp, gxs, need_grads):
        """The full-shape gradients ``gxs`` summed back to each input's shape."""
        return tuple(_sum_to(xp, g, s) if need else None
                     for g, s, need in zip(gxs, self.shapes, need_grads))


class Add2(_Binary):
    """x0 + x1, with NumPy broadcasting."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] + xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        return self._reduce(xp, (gy, gy), need_grads)


def add2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise sum (broadcasting)."""
    return Add2()(x0, x1)


class Sub2(_Binary):
    """x0 - x1, with NumPy broadcasting."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] - xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        return self._reduce(xp, (gy, -gy if need_grads[1] else None), need_grads)


def sub2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise difference (broadcasting)."""
    return Sub2()(x0, x1)


class Mul2(_Binary):
    """x0 * x1, with NumPy broadcasting."""

    def forward(self, xp, xs):
        return (xs[0] * xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        g0 = gy * x1 if need_grads[0] else None
        g1 = gy * x0 if need_grads[1] else None
        return self._reduce(xp, (g0, g1), need_grads)


def mul2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise product (broadcasting)."""
    return Mul2()(x0, x1)


class Div2(_Binary):
    """x0 / x1, with NumPy broadcasting."""

    def forward(self, xp, xs):
        return (xs[0] / xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (gy,) = xs, gys
        g0 = gy / x1 if need_grads[0] else None
        g1 = -gy * x0 / (x1 * x1) if need_grads[1] else None
        return self._reduce(xp, (g0, g1), need_grads)


def div2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise quotient (broadcasting)."""
    return Div2()(x0, x1)


class Pow2(_Binary):
    """x0 ** x1, with NumPy broadcasting."""

    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (xs[0] ** xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x0, x1), (y,), (gy,) = xs, ys, gys
        g0 = gy * x1 * x0 ** (x1 - 1) if need_grads[0] else None
        g1 = gy * y * xp.log(x0) if need_grads[1] else None
        return self._reduce(xp, (g0, g1), need_grads)


def pow2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise power x0 ** x1 (broadcasting); the gradient to x1 needs x0 > 0."""
    return Pow2()(x0, x1)


class _Scalar(Function):
    """Base of the elementwise functions of a variable and a Python number ``val``."""

    def __init__(self, val: float):
        self.val = val

    def setup(self, inputs):
        (x,) = inputs
        if not np.isscalar(self.val) or isinstance(self.val, (str, bytes)):
            raise self.error(f"val must be a number, got {type(self.val).__name__}; "
                             "for two variables use add2/sub2/mul2/div2/pow2")
        return [(x.shape, x.dtype)]


class AddScalar(_Scalar):
    """x + val."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] + self.val,)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)


def add_scalar(x: Variable, val: float = 1, inplace: bool = False) -> Variable:
    """Add a number to every element."""
    return AddScalar(val)(x)


class MulScalar(_Scalar):
    """x * val."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0] * self.val,)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * self.val,)


def mul_scalar(x: Variable, val: float = 1, inplace: bool = False) -> Variable:
    """Multiply every element by a number."""
    return MulScalar(val)(x)


class PowScalar(_Scalar):
    """x ** val."""

    def forward(self, xp, xs):
        return (xs[0] ** self.val,)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * self.val * xs[0] ** (self.val - 1),)


def pow_scalar(x: Variable, val: float = 1, inplace: bool = False) -> Variable:
    """Raise every element to the power ``val``."""
    return PowScalar(val)(x)


class RSubScalar(_Scalar):
    """val - x."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (self.val - xs[0],)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (-gys[0],)


def r_sub_scalar(x: Variable, val: float = 1) -> Variable:
    """A number minus every element (``val - x``)."""
    return RSubScalar(val)(x)


class RDivScalar(_Scalar):
    """val / x."""

    def forward(self, xp, xs):
        return (self.val / xs[0],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x,) = xs
        return (-gys[0] * self.val / (x * x),)


def r_div_scalar(x: Variable, val: float = 1) -> Variable:
    """A number divided by every element (``val / x``)."""
    return RDivScalar(val)(x)


class RPowScalar(_Scalar):
    """val ** x."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (self.val ** xs[0],)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ys[0] * float(np.log(self.val)),)


def r_pow_scalar(x: Variable, val: float = 1) -> Variable:
    """A number raised to every element (``val ** x``); differentiable for val > 0."""
    return RPowScalar(val)(x)


class _Unary(Function):
    """Base of the elementwise functions of one variable: same shape and dtype out."""

    def setup(self, inputs):
        (x,) = inputs
        return [(x.shape, x.dtype)]


class Exp(_Unary):
    """exp(x); its gradient is its output."""

    grad_depends_on_inputs = False
    grad_depends_on_outputs = True

    def forward(self, xp, xs):
        return (xp.exp(xs[0]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] * ys[0],)


def exp(x: Variable) -> Variable:
    """Elementwise natural exponential."""
    return Exp()(x)


class Log(_Unary):
    """Natural logarithm."""

    def forward(self, xp, xs):
        return (xp.log(xs[0]),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0] / xs[0],)


def log(x: Variable) -> Variable:
    """Elementwise natural logarithm."""
    return Log()(x)


class _Reduction(Function):
    """Base of the reductions over ``axis`` (None: all axes), keeping the
    reduced axes as size 1 when ``keepdims``."""

    def __init__(self, axis: int | Sequence[int] | None, keepdims: bool):
        self.axis = axis
        self.keepdims = bool(keepdims)

    def setup(self, inputs):
        (x,) = inputs
        self.axes = _axes(self, self.axis, x.ndim)
        self.in_shape = x.shape
        self.kept_shape = tuple(1 if i in self.axes else s for i, s in enumerate(x.shape))
        shape = self.kept_shape if self.keepdims else tuple(
            s for i, s in enumerate(x.shape) if i not in self.axes)
        return [(shape, x.dtype)]

    def _spread(self, xp, gy):
        """The output gradient repeated over the reduced axes (as a new array)."""
        return xp.broadcast_to(gy.reshape(self.kept_shape), self.in_shape).copy()


class Sum(_Reduction):
    """Sum over axes."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0].sum(axis=self.axes, keepdims=self.keepdims),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (self._spread(xp, gys[0]),)


def sum(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    """Sum of the elements over ``axis`` (an int, a tuple, or None for all axes)."""
    return Sum(axis, keepdims)(x)


class Mean(_Reduction):
    """Mean over axes."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0].mean(axis=self.axes, keepdims=self.keepdims),)

    def backward(self, xp, xs, ys, gys, need_grads):
        count = int(np.prod([self.in_shape[a] for a in self.axes], dtype=np.int64))
        return (self._spread(xp, gys[0]) / count,)


def mean(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    """Mean of the elements over ``axis`` (an int, a tuple, or None for all axes)."""
    return Mean(axis, keepdims)(x)


class _Extremum(_Reduction):
    """Maximum or minimum over axes, optionally with the flat index (row-major over the
    reduced axes, uint64 as in nnabla) of the first extreme element.  The gradient of
    the values (with ``only_index``, of the index output, as nnabla does) goes to that
    element; the index output of ``with_index`` passes none."""

    kind = ""       # "maximum" or "minimum", for messages
    reduction = ""  # the array method: "max" or "min" (and "argmax" or "argmin")

    def __init__(self, axis, keepdims: bool, with_index: bool, only_index: bool):
        super().__init__(axis, keepdims)
        self.outputs_kept = "index" if only_index else ("both" if with_index else "value")

    def setup(self, inputs):
        ((shape, dtype),) = super().setup(inputs)
        if any(self.in_shape[a] == 0 for a in self.axes):
            raise self.error(f"cannot take the {self.kind} over an empty axis of shape "
                             f"{self.in_shape}; reduce only over axes with at least one element")
        return {"value": [(shape, dtype)], "index": [(shape, np.dtype(np.uint64))],
                "both": [(shape, dtype), (shape, np.dtype(np.uint64))]}[self.outputs_kept]

    def _flat_index(self, xp, x):
        """The reduced axes moved last and flattened, and the first extreme's index there."""
        ndim, k = x.ndim, len(self.axes)
        moved = xp.moveaxis(x, self.axes, tuple(range(ndim - k, ndim)))
        flat = moved.reshape(moved.shape[:ndim - k] + (-1,))
        return moved.shape, flat, getattr(flat, "arg" + self.reduction)(axis=-1)

    def forward(self, xp, xs):
        (x,) = xs
        _, flat, index = self._flat_index(xp, x)
        out_shape = self.kept_shape if self.keepdims else index.shape
        index = index.astype(np.uint64).reshape(out_shape)
        if self.outputs_kept == "index":
            return (index,)
        value = getattr(x, self.reduction)(axis=self.axes, keepdims=self.keepdims)
        return (value, index) if self.outputs_kept == "both" else (value,)

    def backward(self, xp, xs, ys, gys, need_grads):
        (x,), gy = xs, gys[0].astype(xs[0].dtype, copy=False)
        moved_shape, flat, first = self._flat_index(xp, x)
        hit = xp.arange(flat.shape[-1]) == first[..., None]
        g = (gy.reshape(first.shape)[..., None] * hit).reshape(moved_shape)
        last = tuple(range(x.ndim - len(self.axes), x.ndim))
        return (xp.moveaxis(g, last, self.axes),)


class Max(_Extremum):
    """Maximum over axes (see ``_Extremum``)."""

    kind, reduction = "maximum", "max"


class Min(_Extremum):
    """Minimum over axes (see ``_Extremum``)."""

    kind, reduction = "minimum", "min"


def max(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False,
        with_index: bool = False, only_index: bool = False):
    """Maximum of the elements over ``axis`` (an int, a tuple, or None for all axes);
    ``with_index`` also returns the flat index of the first maximum over the reduced
    axes (uint64), ``only_index`` returns that index alone, as in nnabla."""
    return Max(axis, keepdims, with_index, only_index)(x)


def min(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False,
        with_index: bool = False, only_index: bool = False):
    """Minimum of the elements over ``axis``, with ``with_index`` / ``only_index`` as F.max."""
    return Min(axis, keepdims, with_index, only_index)(x)

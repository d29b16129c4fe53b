"""Reductions over axes: sum, mean, max and min."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..graph import Variable
from .base import Reduction

__all__ = ["sum", "mean", "max", "min"]


class Sum(Reduction):
    """Sum over axes."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0].sum(axis=self.axes, keepdims=self.keepdims),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (self.spread(xp, gys[0]),)


def sum(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    """Sum of the elements over ``axis`` (an int, a tuple, or None for all axes)."""
    return Sum(axis, keepdims)(x)


class Mean(Reduction):
    """Mean over axes."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0].mean(axis=self.axes, keepdims=self.keepdims),)

    def backward(self, xp, xs, ys, gys, need_grads):
        count = int(np.prod([self.in_shape[a] for a in self.axes], dtype=np.int64))
        return (self.spread(xp, gys[0]) / count,)


def mean(x: Variable, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Variable:
    """Mean of the elements over ``axis`` (an int, a tuple, or None for all axes)."""
    return Mean(axis, keepdims)(x)


class _Extremum(Reduction):
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

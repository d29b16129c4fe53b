"""Arithmetic, elementwise math and reductions."""
from __future__ import annotations

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


__all__ = ["add2"]


class Add2(Function):
    """x0 + x1, with NumPy broadcasting."""

    grad_depends_on_inputs = False

    def setup(self, inputs):
        a, b = inputs
        self.shapes = (a.shape, b.shape)
        return [(_broadcast_shape(self, a, b), np.result_type(a.dtype, b.dtype))]

    def forward(self, xp, xs):
        return (xs[0] + xs[1],)

    def backward(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        return tuple(_sum_to(xp, gy, s) if need else None for s, need in zip(self.shapes, need_grads))


def add2(x0: Variable, x1: Variable, inplace: bool = False) -> Variable:
    """Elementwise sum (broadcasting)."""
    return Add2()(x0, x1)

"""Array manipulation: reshape, transpose, concatenate, slice, identity, and the
graph-joining sink."""
from __future__ import annotations

import builtins
from collections.abc import Sequence

import numpy as np

from ..graph import Function, Variable
from .base import Unary, one_axis

__all__ = ["reshape", "transpose", "concatenate", "slice", "identity", "sink"]


class Reshape(Function):
    """The same elements in a new shape; one size may be -1 (inferred)."""

    grad_depends_on_inputs = False

    def __init__(self, shape: Sequence[int], inplace: bool):
        self.shape = tuple(int(s) for s in shape)
        self.inplace = inplace

    def setup(self, inputs):
        (x,) = inputs
        if self.shape.count(-1) > 1 or any(s < -1 for s in self.shape):
            raise self.error(f"shape may hold non-negative sizes and at most one -1, got {self.shape}")
        mismatch = self.error(f"cannot reshape {x.shape} ({x.size} elements) to {self.shape}; "
                              "the new shape must hold the same number of elements")
        shape = self.shape
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
            if known == 0 or x.size % known:
                raise mismatch
            shape = tuple(x.size // known if s == -1 else s for s in shape)
        if int(np.prod(shape, dtype=np.int64)) != x.size:
            raise mismatch
        self.in_shape, self.out_shape = x.shape, shape
        return [(shape, x.dtype)]

    def forward(self, xp, xs):
        y = xs[0].reshape(self.out_shape)
        return (y if self.inplace else y.copy(),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0].reshape(self.in_shape),)


def reshape(x: Variable, shape: Sequence[int], inplace: bool = True) -> Variable:
    """``x`` in a new shape; with ``inplace`` the output shares ``x``'s memory where it can."""
    return Reshape(shape, inplace)(x)


class Transpose(Function):
    """Axes permuted as ``axes`` says (output axis i is input axis axes[i])."""

    grad_depends_on_inputs = False

    def __init__(self, axes: Sequence[int]):
        self.axes = tuple(int(a) for a in axes)

    def setup(self, inputs):
        (x,) = inputs
        if sorted(self.axes) != list(range(x.ndim)):
            raise self.error(f"axes must be a permutation of 0..{x.ndim - 1} for an input of "
                             f"shape {x.shape}, got {self.axes}")
        self.inverse = tuple(int(a) for a in np.argsort(self.axes))
        return [(tuple(x.shape[a] for a in self.axes), x.dtype)]

    def forward(self, xp, xs):
        return (xp.ascontiguousarray(xs[0].transpose(self.axes)),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0].transpose(self.inverse),)


def transpose(x: Variable, axes: Sequence[int]) -> Variable:
    """Permute the axes of ``x``."""
    return Transpose(axes)(x)


class Concatenate(Function):
    """Inputs joined along one axis; their other sizes must match."""

    grad_depends_on_inputs = False

    def __init__(self, axis: int | None):
        self.axis = axis

    def setup(self, inputs):
        if not inputs:
            raise self.error("needs at least one input variable")
        first = inputs[0].shape
        self.axis = one_axis(self, self.axis, len(first))
        for i, x in enumerate(inputs):
            if x.ndim != len(first) or any(s != t for a, (s, t) in enumerate(zip(x.shape, first))
                                           if a != self.axis):
                raise self.error(f"input {i} has shape {x.shape} but input 0 has {first}; the "
                                 f"shapes must be equal except on axis {self.axis}")
        sizes = [x.shape[self.axis] for x in inputs]
        self.offsets = np.cumsum(sizes)[:-1].tolist()
        shape = first[:self.axis] + (sum(sizes),) + first[self.axis + 1:]
        return [(shape, np.result_type(*[x.dtype for x in inputs]))]

    def forward(self, xp, xs):
        return (xp.concatenate(xs, axis=self.axis),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return tuple(xp.split(gys[0], self.offsets, axis=self.axis))


def concatenate(*x: Variable, axis: int | None = None) -> Variable:
    """Join variables along ``axis`` (default: the last axis)."""
    return Concatenate(axis)(*x)


class Slice(Function):
    """A strided sub-array, with Python's slicing rules on each axis."""

    grad_depends_on_inputs = False

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step

    def setup(self, inputs):
        (x,) = inputs
        given = [len(v) for v in (self.start, self.stop, self.step) if v is not None]
        n = given[0] if given else x.ndim
        if any(k != n for k in given) or n > x.ndim:
            raise self.error(f"start, stop and step must have the same length, at most the "
                             f"number of dimensions {x.ndim} of {x.shape}; got start="
                             f"{self.start}, stop={self.stop}, step={self.step}")
        start, stop, step = ([None] * n if v is None else list(v)
                             for v in (self.start, self.stop, self.step))
        if not all(a is None or isinstance(a, (int, np.integer)) for a in start + stop + step):
            raise self.error(f"start, stop and step must hold ints or None, got start={start}, "
                             f"stop={stop}, step={step}")
        if any(s == 0 for s in step):
            raise self.error(f"step must not be 0, got {step}")
        lead = [builtins.slice(None)] * (x.ndim - n)
        self.index = tuple(lead + [builtins.slice(*a) for a in zip(start, stop, step)])
        self.in_shape = x.shape
        shape = tuple(len(range(*s.indices(size))) for s, size in zip(self.index, x.shape))
        return [(shape, x.dtype)]

    def forward(self, xp, xs):
        return (xs[0][self.index].copy(),)

    def backward(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        gx = xp.zeros(self.in_shape, gy.dtype)
        gx[self.index] = gy
        return (gx,)


def slice(x: Variable, start: Sequence[int | None] | None = None,
          stop: Sequence[int | None] | None = None,
          step: Sequence[int | None] | None = None) -> Variable:
    """``x[start0:stop0:step0, start1:stop1:step1, ...]`` (Python's rules; None
    entries and omitted lists mean the whole axis); lists shorter than
    ``x.ndim`` apply to the last axes, as in nnabla."""
    return Slice(start, stop, step)(x)


class Identity(Unary):
    """A copy of ``x``: the same values in a variable of its own."""

    grad_depends_on_inputs = False

    def forward(self, xp, xs):
        return (xs[0].copy(),)

    def backward(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)


def identity(x: Variable) -> Variable:
    """The input's values, copied into a new variable."""
    return Identity()(x)


class Sink(Function):
    """A dummy end of several graphs: forward does nothing; backward gives each
    input a gradient of ones, or (``one_input_grad=False``) the gradient it holds."""

    grad_depends_on_inputs = False

    def __init__(self, one_input_grad: bool):
        self.one_input_grad = bool(one_input_grad)

    def setup(self, inputs):
        if not inputs:
            raise self.error("needs at least one input variable, got none; pass the variables "
                             "to join, e.g. F.sink(loss1, loss2)")
        self.dtype = self.context.dtype
        return [((), self.dtype)]

    def forward(self, xp, xs):
        return (xp.zeros((), self.dtype),)

    def backward(self, xp, xs, ys, gys, need_grads):
        if self.one_input_grad:
            return tuple(xp.ones(x.shape, x.dtype) if need else None
                         for x, need in zip(self.inputs, need_grads))
        return tuple(x.g if need else None for x, need in zip(self.inputs, need_grads))


def sink(*x: Variable, one_input_grad: bool = True) -> Variable:
    """One variable of shape () depending on all of ``x``, to run forward and backward
    of several graphs at once (``F.sink(loss1, loss2).backward()``)."""
    return Sink(one_input_grad)(*x)

"""Array manipulation: reshaping, joining and splitting, padding, shifting and
broadcasting, generated arrays (arange, constant, eye), diagonals, matrix products,
einsum, masks, assignment, and the graph-joining sink."""
from __future__ import annotations

import builtins
from collections.abc import Sequence

import numpy as np

from ..errors import DpnbError, DpnbTypeError, DpnbValueError
from ..graph import Function, Variable
from .base import (Unary, axes_of, default_outputs, number_of, one_axis, shape_of, sum_to,
                   variadic_keywords)
from .graph_module import linear_backward_graph
from .specs import (FunctionSpec, Params, attrs, call, int_axis, ints, none_to, plain, public,
                    without_params)

__all__ = ["reshape", "transpose", "concatenate", "slice", "identity", "sink", "stack", "split",
           "pad", "tile", "broadcast", "broadcast_to", "flip", "shift", "arange", "linspace",
           "constant", "eye_like", "matrix_diag", "matrix_diag_part", "meshgrid", "nonzero", "trilu", "unlink", "assign", "shape"]


class Reshape(Function):
    """The same elements in a new shape; one size may be -1 (inferred)."""

    nnabla_spec = FunctionSpec("Reshape", "reshape_param", ("shape", "inplace"),
                               lambda fn: {"shape": ints(fn.out_shape),
                                           "inplace": bool(fn.inplace)},
                               call("reshape", "shape", "inplace"),
                               arguments=lambda fn: {"shape": ints(fn.shape),
                                                     "inplace": bool(fn.inplace)})

    grad_depends_on_inputs = False

    def __init__(self, shape: Sequence[int], inplace: bool):
        self.shape = tuple(int(s) for s in shape)
        self.inplace = inplace
        self.output_views_input = inplace

    def output_specs(self, inputs):
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

    def forward_arrays(self, xp, xs):
        y = xs[0].reshape(self.out_shape)
        return (y if self.inplace else y.copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0].reshape(self.in_shape),)


def reshape(x: Variable, shape: Sequence[int], inplace: bool = True, n_outputs: int = -1,
            outputs=None) -> Variable:
    """``x`` in a new shape; with ``inplace`` the output shares ``x``'s memory where it can."""
    default_outputs("F.reshape", n_outputs, outputs)
    return Reshape(shape, inplace)(x)


class Transpose(Function):
    """Axes permuted as ``axes`` says (output axis i is input axis axes[i])."""

    nnabla_spec = FunctionSpec("Transpose", "transpose_param", ("axes",), attrs("axes"),
                               call("transpose", "axes"))

    grad_depends_on_inputs = False

    def __init__(self, axes: Sequence[int]):
        self.axes = tuple(int(a) for a in axes)

    def output_specs(self, inputs):
        (x,) = inputs
        if sorted(self.axes) != list(range(x.ndim)):
            raise self.error(f"axes must be a permutation of 0..{x.ndim - 1} for an input of "
                             f"shape {x.shape}, got {self.axes}")
        self.inverse = tuple(int(a) for a in np.argsort(self.axes))
        return [(tuple(x.shape[a] for a in self.axes), x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.ascontiguousarray(xs[0].transpose(self.axes)),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0].transpose(self.inverse),)


def transpose(x: Variable, axes: Sequence[int], n_outputs: int = -1, outputs=None) -> Variable:
    """Permute the axes of ``x``."""
    default_outputs("F.transpose", n_outputs, outputs)
    return Transpose(axes)(x)


class Concatenate(Function):
    """Inputs joined along one axis; their other sizes must match."""

    nnabla_spec = FunctionSpec("Concatenate", "concatenate_param", ("axis",), int_axis,
                               call("concatenate", "axis"))

    grad_depends_on_inputs = False

    def __init__(self, axis: int | None):
        self.axis = axis

    def output_specs(self, inputs):
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

    def forward_arrays(self, xp, xs):
        return (xp.concatenate(xs, axis=self.axis),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return tuple(xp.split(gys[0], self.offsets, axis=self.axis))


def concatenate(*x: Variable, **kw) -> Variable:
    """Join variables along ``axis`` (keyword; default: the last axis)."""
    (axis,) = variadic_keywords("F.concatenate", kw, {"axis": None})
    return Concatenate(axis)(*x)


def _slice_params(fn) -> Params:
    """Start, stop and step of the axes given (the last ones, as in nnabla), as given; a
    None as the bound Python resolves (a stop before index 0 of a reversed slice as one
    below -size, so that it stays there)."""
    given = [len(v) for v in (fn.start, fn.stop, fn.step) if v is not None]
    n = given[0] if given else len(fn.in_shape)
    start, stop, step = [], [], []
    axes = list(zip(fn.index, fn.in_shape))[len(fn.in_shape) - n:]
    for index, size in axes:
        a, b, s = index.indices(size)
        start.append(int(index.start) if index.start is not None else a)
        stop.append(int(index.stop) if index.stop is not None else b if b >= 0 else -size - 1)
        step.append(s)
    return {"start": start, "stop": stop, "step": step}


class Slice(Function):
    """A strided sub-array, with Python's slicing rules on each axis."""

    nnabla_spec = FunctionSpec("Slice", "slice_param", ("start", "stop", "step"), _slice_params,
                               call("slice", "start", "stop", "step"))

    grad_depends_on_inputs = False

    def __init__(self, start, stop, step):
        self.start, self.stop, self.step = start, stop, step

    def output_specs(self, inputs):
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

    def forward_arrays(self, xp, xs):
        return (xs[0][self.index].copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (gy,) = gys
        gx = xp.zeros(self.in_shape, gy.dtype)
        gx[self.index] = gy
        return (gx,)

    backward_graph = linear_backward_graph  # its backward writes into zeros


def slice(x: Variable, start: Sequence[int | None] | None = None,
          stop: Sequence[int | None] | None = None,
          step: Sequence[int | None] | None = None, n_outputs: int = -1,
          outputs=None) -> Variable:
    """``x[start0:stop0:step0, start1:stop1:step1, ...]`` (Python's rules; None
    entries and omitted lists mean the whole axis); lists shorter than
    ``x.ndim`` apply to the last axes, as in nnabla."""
    default_outputs("F.slice", n_outputs, outputs)
    return Slice(start, stop, step)(x)


class Identity(Unary):
    """A copy of ``x``: the same values in a variable of its own."""

    nnabla_spec = without_params("Identity", "identity")

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (xs[0].copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0],)


def identity(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The input's values, copied into a new variable."""
    default_outputs("F.identity", n_outputs, outputs)
    return Identity()(x)


class Sink(Function):
    """A dummy end of several graphs: forward does nothing; backward gives each
    input a gradient of ones, or (``one_input_grad=False``) the gradient it holds.
    Its inputs are the results asked for: forward never frees them, as in nnabla."""

    nnabla_spec = FunctionSpec("Sink", "sink_param", ("one_input_grad",), attrs("one_input_grad"),
                               call("sink", "one_input_grad"))

    grad_depends_on_inputs = False
    keeps_inputs = True

    def __init__(self, one_input_grad: bool):
        self.one_input_grad = bool(one_input_grad)

    def output_specs(self, inputs):
        if not inputs:
            raise self.error("needs at least one input variable, got none; pass the variables "
                             "to join, e.g. F.sink(loss1, loss2)")
        self.dtype = self.context.dtype
        return [((), self.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.zeros((), self.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if self.one_input_grad:
            return tuple(xp.ones(x.shape, x.dtype) if need else None
                         for x, need in zip(self.inputs, need_grads))
        return tuple(x.g if need else None for x, need in zip(self.inputs, need_grads))


def sink(*x: Variable, **kw) -> Variable:
    """One variable of shape () depending on all of ``x``, to run forward and backward
    of several graphs at once (``F.sink(loss1, loss2).backward()``); keyword
    ``one_input_grad`` (default True) as below."""
    (one_input_grad,) = variadic_keywords("F.sink", kw, {"one_input_grad": True})
    return Sink(one_input_grad)(*x)


class Stack(Function):
    """Inputs of one shape joined along a new axis."""

    nnabla_spec = FunctionSpec("Stack", "stack_param", ("axis",), int_axis, call("stack", "axis"))

    grad_depends_on_inputs = False

    def __init__(self, axis: int):
        self.axis = axis

    def output_specs(self, inputs):
        if not inputs:
            raise self.error("needs at least one input variable, got none")
        first = inputs[0].shape
        for i, x in enumerate(inputs):
            if x.shape != first:
                raise self.error(f"input {i} has shape {x.shape} but input 0 has {first}; "
                                 "stacked inputs must have one shape")
        self.axis = one_axis(self, self.axis, len(first) + 1)
        shape = first[:self.axis] + (len(inputs),) + first[self.axis:]
        return [(shape, np.result_type(*[x.dtype for x in inputs]))]

    def forward_arrays(self, xp, xs):
        return (xp.stack(xs, axis=self.axis),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return tuple(xp.take(gys[0], i, axis=self.axis) for i in range(len(need_grads)))


def stack(*x: Variable, **kw) -> Variable:
    """Variables of one shape joined along a new axis ``axis`` (keyword; default 0)."""
    (axis,) = variadic_keywords("F.stack", kw, {"axis": 0})
    return Stack(axis)(*x)


class Split(Function):
    """The slices of the input along one axis, that axis removed: as many outputs as its size."""

    nnabla_spec = FunctionSpec("Split", "split_param", ("axis",), int_axis, call("split", "axis"))

    grad_depends_on_inputs = False

    def __init__(self, axis: int):
        self.axis = axis

    def output_specs(self, inputs):
        (x,) = inputs
        self.axis = one_axis(self, self.axis, x.ndim)
        if 0 in x.shape[self.axis:]:  # as nnabla's, which refuses these
            raise self.error(f"cannot split x of shape {x.shape} along axis {self.axis}: that "
                             "axis or one after it is empty (nnabla refuses this too)")
        shape = x.shape[:self.axis] + x.shape[self.axis + 1:]
        return [(shape, x.dtype)] * x.shape[self.axis]

    def forward_arrays(self, xp, xs):
        return tuple(xp.take(xs[0], i, axis=self.axis) for i in range(xs[0].shape[self.axis]))

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (xp.stack(gys, axis=self.axis),)


def split(x: Variable, axis: int = 0):
    """The slices of ``x`` along ``axis``, each without that axis: a tuple of variables."""
    return Split(axis)(x)


def _along(xp, a, axis: int, index: np.ndarray):
    """``a``'s entries along ``axis`` at ``index`` (a gather along one axis)."""
    return xp.take(a, xp.asarray(index), axis=axis)


def _along_grad(xp, g, axis: int, index: np.ndarray, size: int):
    """The gradient of ``_along``: ``g``'s entries summed back to the ``size`` places they
    were taken from, as a product with the one-hot matrix of ``index``."""
    hit = xp.asarray((index[None, :] == np.arange(size)[:, None]).astype(g.dtype))
    moved = xp.moveaxis(g, axis, -1)
    return xp.moveaxis(moved @ hit.T, -1, axis)


def _reflected(index: np.ndarray, size: int, edge_repeated: bool) -> np.ndarray:
    """Out-of-range positions mirrored into ``[0, size)``: about the end elements
    (reflect, period 2(size-1)) or about the ends with the end elements repeated
    (symmetric, period 2 size)."""
    if edge_repeated:
        period = 2 * size
        index = index % period
        return np.where(index < size, index, period - 1 - index)
    if size == 1:
        return np.zeros_like(index)
    period = 2 * (size - 1)
    index = index % period
    return np.where(index < size, index, period - index)


class Pad(Function):
    """Padding of the last len(pad_width)/2 axes: with a constant, with the input
    mirrored about its end elements (reflect), or with its end elements repeated."""

    nnabla_spec = FunctionSpec("Pad", "pad_param", ("pad_width", "mode", "constant_value"),
                               attrs("mode", "constant_value",
                                     pad_width=lambda fn: [w for pair in
                                                           fn.pairs[-len(fn.pad_width) // 2:]
                                                           for w in pair]),
                               call("pad", "pad_width", "mode", "constant_value"))

    MODES = ("constant", "reflect", "repeat")

    def __init__(self, pad_width: Sequence[int], mode: str, constant_value: float):
        self.pad_width, self.mode, self.constant_value = pad_width, mode, constant_value

    def output_specs(self, inputs):
        (x,) = inputs
        width = tuple(self.pad_width) if isinstance(self.pad_width, (tuple, list)) else None
        if width is None or len(width) % 2 or len(width) > 2 * x.ndim or not all(
                isinstance(w, (int, np.integer)) and w >= 0 for w in width):
            raise self.error(f"pad_width must be an even number (at most {2 * x.ndim}) of ints "
                             f">= 0, a (before, after) pair per padded axis from the innermost "
                             f"of {x.shape}, got {self.pad_width!r}")
        if self.mode not in self.MODES:
            raise self.error(f"mode must be one of {', '.join(self.MODES)}, got {self.mode!r}")
        lead = x.ndim - len(width) // 2
        self.pairs = [(0, 0)] * lead + [(int(width[i]), int(width[i + 1]))
                                        for i in range(0, len(width), 2)]
        self.in_shape = x.shape
        self.index = []
        for size, (before, after) in zip(x.shape, self.pairs):
            if self.mode != "constant" and (before or after) and size == 0:
                raise self.error(f"cannot pad an empty axis of {x.shape} in mode {self.mode!r}")
            positions = np.arange(-before, size + after)
            self.index.append(np.clip(positions, 0, size - 1) if self.mode == "repeat"
                              else _reflected(positions, size, False))
        shape = tuple(s + b + a for s, (b, a) in zip(x.shape, self.pairs))
        return [(shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        (x,) = xs
        if self.mode == "constant":
            return (xp.pad(x, self.pairs, mode="constant", constant_values=self.constant_value),)
        for axis, (index, pair) in enumerate(zip(self.index, self.pairs)):
            if pair != (0, 0):
                x = _along(xp, x, axis, index)
        return (x,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (g,) = gys
        if self.mode == "constant":
            return (g[tuple(builtins.slice(b, b + s) for s, (b, _) in
                            zip(self.in_shape, self.pairs))],)
        for axis in reversed(range(len(self.pairs))):
            if self.pairs[axis] != (0, 0):
                g = _along_grad(xp, g, axis, self.index[axis], self.in_shape[axis])
        return (g,)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Constant padding is affine (its constant has no gradient): the slice of gy that x
        filled.  The other modes are linear: their backward on arrays, as a function."""
        if self.mode != "constant":
            return linear_backward_graph(self, F, xs, ys, gys, need_grads)
        start = [b for b, _ in self.pairs]
        stop = [b + s for s, (b, _) in zip(self.in_shape, self.pairs)]
        return [F.slice(gys[0], start, stop, [1] * len(start))]


def pad(x: Variable, pad_width: Sequence[int], mode: str = "constant", constant_value: float = 0,
        n_outputs: int = -1, outputs=None) -> Variable:
    """``x`` padded on its innermost axes, ``pad_width`` = (before, after) per axis, by
    ``mode`` "constant" (``constant_value``), "reflect" or "repeat"."""
    default_outputs("F.pad", n_outputs, outputs)
    return Pad(pad_width, mode, constant_value)(x)


class Tile(Function):
    """The input repeated ``reps`` times along each axis (NumPy's tile)."""

    nnabla_spec = FunctionSpec("Tile", "tile_param", ("reps",), attrs("reps"),
                               call("tile", "reps"))

    grad_depends_on_inputs = False

    def __init__(self, reps):
        self.reps = reps

    def output_specs(self, inputs):
        (x,) = inputs
        reps = tuple(self.reps) if isinstance(self.reps, (tuple, list)) else (self.reps,)
        if not all(isinstance(r, (int, np.integer)) and r >= 0 for r in reps):
            raise self.error(f"reps must be an int or a sequence of ints >= 0, got {self.reps!r}")
        ndim = builtins.max(len(reps), x.ndim)
        self.reps = (1,) * (ndim - len(reps)) + tuple(int(r) for r in reps)
        self.in_shape = (1,) * (ndim - x.ndim) + x.shape
        self.x_shape = x.shape
        return [(tuple(s * r for s, r in zip(self.in_shape, self.reps)), x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.tile(xs[0].reshape(self.in_shape), self.reps),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        split = tuple(v for pair in zip(self.reps, self.in_shape) for v in pair)
        g = gys[0].reshape(split).sum(axis=tuple(range(0, 2 * len(self.reps), 2)))
        return (g.reshape(self.x_shape),)


def tile(x: Variable, reps: int | Sequence[int]) -> Variable:
    """``x`` repeated ``reps`` times along each axis; the shorter of ``reps`` and the
    shape gets leading ones, as in NumPy."""
    return Tile(reps)(x)


def _broadcast(xs, p, n):
    """A leading -1 (a variable batch size, as nnabla writes it) is the input's first size."""
    shape = list(p["shape"])
    if shape and shape[0] == -1:
        shape[0] = xs[0].shape[0]
    return broadcast(xs[0], shape)


class Broadcast(Function):
    """The input broadcast to a shape (NumPy's rules: size-1 axes grow, axes are
    added in front)."""

    nnabla_spec = FunctionSpec("Broadcast", "broadcast_param", ("shape",),
                               attrs(shape="out_shape"), _broadcast)

    grad_depends_on_inputs = False

    def __init__(self, shape: Sequence[int]):
        self.shape = shape

    def output_specs(self, inputs):
        (x,) = inputs
        shape = shape_of(self, self.shape)
        if len(shape) < x.ndim or not all(
                s in (1, t) for s, t in zip(x.shape, shape[len(shape) - x.ndim:])):
            raise self.error(f"cannot broadcast {x.shape} to {shape}; each axis of the input "
                             "must be 1 or equal to the matching (trailing) axis of shape")
        self.in_shape, self.out_shape = x.shape, shape
        return [(shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.broadcast_to(xs[0], self.out_shape).copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (sum_to(gys[0], self.in_shape),)


def broadcast(x: Variable, shape: Sequence[int], n_outputs: int = -1, outputs=None) -> Variable:
    """``x`` broadcast to ``shape``."""
    default_outputs("F.broadcast", n_outputs, outputs)
    return Broadcast(shape)(x)


class BroadcastTo(Function):
    """``y`` broadcast to the shape of ``x``, its axes matched to those of ``x`` from
    ``axis`` on (default, and any negative axis as in nnabla: the trailing ones).  The
    gradient goes to ``y`` (nnabla has none); ``x`` gives only its shape."""

    nnabla_spec = FunctionSpec("BroadcastTo", "broadcast_to_param", ("axis",),
                               attrs(axis=lambda fn: none_to(fn.axis, -1)),
                               call("broadcast_to", "axis"))

    grad_depends_on_inputs = False

    def __init__(self, axis: int | None):
        self.axis = axis

    def output_specs(self, inputs):
        x, y = inputs
        if y.ndim > x.ndim:
            raise self.error(f"y of shape {y.shape} has more axes than x of shape {x.shape}")
        axis = self.axis
        if axis is None or isinstance(axis, (int, np.integer)) and axis < 0:
            axis = x.ndim - y.ndim
        if not isinstance(axis, (int, np.integer)) or not 0 <= axis <= x.ndim - y.ndim or \
                x.shape[axis:axis + y.ndim] != y.shape:
            raise self.error(f"y of shape {y.shape} must equal the axes of x {x.shape} from "
                             f"axis on; got axis={self.axis!r}")
        self.kept = (1,) * axis + y.shape + (1,) * (x.ndim - axis - y.ndim)
        self.y_shape, self.x_shape = y.shape, x.shape
        return [(x.shape, y.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.broadcast_to(xs[1].reshape(self.kept), self.x_shape).copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (None, sum_to(gys[0], self.kept).reshape(self.y_shape))


def broadcast_to(x: Variable, y: Variable, axis: int | None = None, n_outputs: int = -1,
                 outputs=None) -> Variable:
    """``y`` broadcast to ``x``'s shape, its axes lined up with those of ``x`` from
    ``axis`` (None: the trailing ones)."""
    default_outputs("F.broadcast_to", n_outputs, outputs)
    return BroadcastTo(axis)(x, y)


class Flip(Function):
    """The input reversed along some axes."""

    nnabla_spec = FunctionSpec("Flip", "flip_param", ("axes",), attrs("axes"),
                               call("flip", "axes"))

    grad_depends_on_inputs = False

    def __init__(self, axes):
        self.axes = axes

    def output_specs(self, inputs):
        (x,) = inputs
        self.axes = axes_of(self, [x.ndim - 1] if self.axes is None else self.axes, x.ndim)
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.flip(xs[0], self.axes).copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (xp.flip(gys[0], self.axes),)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def flip(x: Variable, axes: Sequence[int] | None = None, n_outputs: int = -1,
         outputs=None) -> Variable:
    """``x`` reversed along ``axes`` (None: the last axis, as nnabla)."""
    default_outputs("F.flip", n_outputs, outputs)
    return Flip(axes)(x)


class Shift(Function):
    """The input's elements moved by ``shifts`` along its innermost axes, the places
    left open filled from the nearest end or by mirroring (edge repeated)."""

    nnabla_spec = FunctionSpec("Shift", "shift_param", ("shifts", "border_mode"),
                               attrs("border_mode",
                                     shifts=lambda fn: none_to(fn.shifts,
                                                               (0,) * len(fn.in_shape))),
                               call("shift", "shifts", "border_mode"))

    grad_depends_on_inputs = False
    MODES = ("nearest", "reflect")

    def __init__(self, shifts, border_mode: str):
        self.shifts, self.border_mode = shifts, border_mode

    def output_specs(self, inputs):
        (x,) = inputs
        shifts = (0,) * x.ndim if self.shifts is None else self.shifts
        if not isinstance(shifts, (tuple, list)) or len(shifts) > x.ndim or not all(
                isinstance(s, (int, np.integer)) for s in shifts):
            raise self.error(f"shifts must be at most {x.ndim} ints (for the innermost axes of "
                             f"{x.shape}), got {self.shifts!r}")
        if self.border_mode not in self.MODES:
            raise self.error(f"border_mode must be one of {', '.join(self.MODES)}, got "
                             f"{self.border_mode!r}")
        shifts = (0,) * (x.ndim - len(shifts)) + tuple(int(s) for s in shifts)
        self.in_shape = x.shape
        self.index = []
        for size, s in zip(x.shape, shifts):
            source = np.arange(size) - s
            self.index.append(None if s == 0 or size == 0 else
                              np.clip(source, 0, size - 1) if self.border_mode == "nearest"
                              else _reflected(source, size, True))
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        x = xs[0]
        for axis, index in enumerate(self.index):
            if index is not None:
                x = _along(xp, x, axis, index)
        return (x if x is not xs[0] else x.copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = gys[0]
        for axis in reversed(range(len(self.index))):
            if self.index[axis] is not None:
                g = _along_grad(xp, g, axis, self.index[axis], self.in_shape[axis])
        return (g,)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def shift(x: Variable, shifts: Sequence[int] | None = None, border_mode: str = "nearest",
          n_outputs: int = -1, outputs=None) -> Variable:
    """``x`` shifted by ``shifts`` along its innermost axes; the open places are filled by
    ``border_mode`` "nearest" (the end element) or "reflect" (mirrored)."""
    default_outputs("F.shift", n_outputs, outputs)
    return Shift(shifts, border_mode)(x)


def _generated(type_name: str, field: str, params: tuple[str, ...],
               function: str) -> FunctionSpec:
    """arange, linspace and constant: one class, told apart by the type it keeps."""
    return FunctionSpec(type_name, field, params, lambda fn: plain(dict(fn.args)),
                        lambda xs, p, n: public(function)(**p))


class Generated(Function):
    """An array made from arguments alone (no inputs), in the context's float type;
    ``type_name`` and ``args`` are the nnabla function and arguments that made it."""

    nnabla_spec = (
        _generated("Arange", "arange_param", ("start", "stop", "step"), "arange"),
        _generated("Linspace", "linspace_param", ("start", "stop", "num"), "linspace"),
        _generated("Constant", "constant_param", ("val", "shape"), "constant"))

    differentiable = False

    def __init__(self, values: np.ndarray, type_name: str, args: dict):
        self.values = values
        self.type_name, self.args = type_name, args

    @property
    def name(self) -> str:
        return self.type_name

    def output_specs(self, inputs):
        self.dtype = self.context.dtype
        return [(self.values.shape, self.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.asarray(self.values, dtype=self.dtype),)


def arange(start: float, stop: float, step: float = 1, n_outputs: int = -1, outputs=None) -> Variable:
    """The 1-D array start, start + step, ... up to but not including ``stop``."""
    default_outputs("F.arange", n_outputs, outputs)
    start, stop, step = (number_of("F.arange", n, v) for n, v in
                         (("start", start), ("stop", stop), ("step", step)))
    if step == 0:
        raise DpnbError("F.arange: step must not be 0")
    count = builtins.max(0, int(np.ceil((stop - start) / step)))
    return Generated(start + step * np.arange(count), "Arange",
                      {"start": start, "stop": stop, "step": step})()


def linspace(start: float, stop: float, num: int) -> Variable:
    """``num`` evenly spaced values from ``start`` to ``stop``, both included."""
    if isinstance(num, bool) or not isinstance(num, (int, np.integer)):
        raise DpnbTypeError(f"F.linspace: num must be an int >= 0, got {num!r}")
    if num < 0:
        raise DpnbValueError(f"F.linspace: num must be an int >= 0, got {num!r}")
    start, stop = number_of("F.linspace", "start", start), number_of("F.linspace", "stop", stop)
    return Generated(np.linspace(start, stop, int(num)), "Linspace",
                      {"start": start, "stop": stop, "num": int(num)})()


def constant(val: float = 0, shape: Sequence[int] = (), n_outputs: int = -1,
             outputs=None) -> Variable:
    """An array of ``shape`` filled with ``val``."""
    default_outputs("F.constant", n_outputs, outputs)
    val = number_of("F.constant", "val", val, finite=False)  # -inf masks, as in nnabla
    size = shape_of("F.constant", shape)
    return Generated(np.full(size, val), "Constant", {"val": val, "shape": list(size)})()


class EyeLike(Function):
    """Ones on the k-th diagonal of a matrix of the input's shape and dtype, zeros elsewhere."""

    nnabla_spec = FunctionSpec("EyeLike", "eye_like_param", ("k",), attrs("k"),
                               call("eye_like", "k"))

    grad_depends_on_inputs = False

    def __init__(self, k: int):
        self.k = k

    def output_specs(self, inputs):
        (x,) = inputs
        if x.ndim != 2:
            raise self.error(f"needs a 2-D input, got shape {x.shape}")
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)):
            raise self.error(f"k must be an int, got {self.k!r}")
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        rows, cols = xs[0].shape
        return (xp.eye(rows, cols, int(self.k), dtype=xs[0].dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (None,)


def eye_like(x: Variable, k: int = 0, n_outputs: int = -1, outputs=None) -> Variable:
    """A matrix like ``x`` with ones on diagonal ``k`` (0: the main one, > 0 above)."""
    default_outputs("F.eye_like", n_outputs, outputs)
    return EyeLike(k)(x)


class MatrixDiag(Function):
    """Square matrices with the input's last axis on their diagonals."""

    nnabla_spec = without_params("MatrixDiag", "matrix_diag")

    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        (x,) = inputs
        if x.ndim < 1:
            raise self.error("needs an input of at least 1 dimension, got a scalar")
        return [(x.shape + x.shape[-1:], x.dtype)]

    def forward_arrays(self, xp, xs):
        (x,) = xs
        n = x.shape[-1]
        return (x[..., None] * xp.eye(n, dtype=x.dtype),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (xp.diagonal(gys[0], axis1=-2, axis2=-1).copy(),)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def matrix_diag(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """(..., n) to (..., n, n): each last-axis vector made a diagonal matrix."""
    default_outputs("F.matrix_diag", n_outputs, outputs)
    return MatrixDiag()(x)


class MatrixDiagPart(Function):
    """The diagonals of the square matrices on the input's last two axes."""

    nnabla_spec = without_params("MatrixDiagPart", "matrix_diag_part")

    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        (x,) = inputs
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise self.error(f"needs square matrices on the last two axes, got shape {x.shape}")
        return [(x.shape[:-1], x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.diagonal(xs[0], axis1=-2, axis2=-1).copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (g,) = gys
        return (g[..., None] * xp.eye(g.shape[-1], dtype=g.dtype),)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def matrix_diag_part(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """(..., n, n) to (..., n): the diagonal of each matrix."""
    default_outputs("F.matrix_diag_part", n_outputs, outputs)
    return MatrixDiagPart()(x)


class Meshgrid(Function):
    """Coordinate arrays of 1-D inputs: output i repeats input i along every other axis;
    without ``ij_indexing`` the first two axes are swapped (NumPy's "xy")."""

    nnabla_spec = FunctionSpec("Meshgrid", "meshgrid_param", ("ij_indexing",),
                               attrs(ij_indexing="ij"), call("meshgrid", "ij_indexing"))

    grad_depends_on_inputs = False

    def __init__(self, ij_indexing: bool):
        self.ij = bool(ij_indexing)

    def output_specs(self, inputs):
        if not inputs:
            raise self.error("needs at least one input variable, got none")
        for i, x in enumerate(inputs):
            if x.ndim != 1:
                raise self.error(f"input {i} must be 1-D, got shape {x.shape}")
        sizes = [x.shape[0] for x in inputs]
        self.axis_of = list(range(len(inputs)))
        if not self.ij and len(inputs) > 1:
            self.axis_of[0], self.axis_of[1] = 1, 0
            sizes[0], sizes[1] = sizes[1], sizes[0]
        self.shape = tuple(sizes)
        return [(self.shape, x.dtype) for x in inputs]

    def forward_arrays(self, xp, xs):
        ndim = len(self.shape)
        return tuple(xp.broadcast_to(x.reshape([-1 if a == axis else 1 for a in range(ndim)]),
                                     self.shape).copy() for x, axis in zip(xs, self.axis_of))

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        ndim = len(self.shape)
        return tuple(g.sum(axis=tuple(a for a in range(ndim) if a != axis))
                     for g, axis in zip(gys, self.axis_of))


def meshgrid(*x: Variable, ij_indexing: bool = False):
    """Coordinate grids of 1-D variables, one output each ("xy" indexing unless
    ``ij_indexing``)."""
    return Meshgrid(ij_indexing)(*x)


class NonZero(Function):
    """The indices of the non-zero elements, one row per axis (uint64); the output takes
    its size from each forward."""

    nnabla_spec = without_params("NonZero", "nonzero")

    differentiable = False

    def output_specs(self, inputs):
        (x,) = inputs
        count = int((x.d != 0).sum()) if x.data.allocated else 0
        self.ndim = x.ndim
        return [((x.ndim, count), np.dtype(np.uint64))]

    def forward_arrays(self, xp, xs):
        (x,) = xs
        if self.ndim:
            where = xp.stack(xp.nonzero(x))
        else:
            where = xp.zeros((0, int(x != 0)), np.uint64)
        if where.shape != self.outputs[0].shape:  # the count is known only now
            self.outputs[0].data.reset_shape(where.shape, force=True)
        return (where.astype(np.uint64),)


def nonzero(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The (ndim, count) indices of the non-zero elements of ``x``."""
    default_outputs("F.nonzero", n_outputs, outputs)
    return NonZero()(x)


class Trilu(Function):
    """The upper (or lower) triangle of the matrices on the last two axes from diagonal
    ``k`` on, the rest zeroed."""

    nnabla_spec = FunctionSpec("Trilu", "trilu_param", ("k", "upper"), attrs("k", "upper"),
                               call("trilu", "k", "upper"))

    grad_depends_on_inputs = False

    def __init__(self, k: int, upper: bool):
        self.k, self.upper = k, bool(upper)

    def output_specs(self, inputs):
        (x,) = inputs
        if x.ndim < 2:
            raise self.error(f"needs matrices on the last two axes, got shape {x.shape}")
        if isinstance(self.k, bool) or not isinstance(self.k, (int, np.integer)):
            raise self.error(f"k must be an int, got {self.k!r}")
        rows, cols = x.shape[-2:]
        band = np.arange(cols)[None, :] - np.arange(rows)[:, None]
        self.mask = band >= self.k if self.upper else band <= self.k
        return [(x.shape, x.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.where(xp.asarray(self.mask), xs[0], 0).astype(xs[0].dtype, copy=False),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (xp.where(xp.asarray(self.mask), gys[0], 0).astype(gys[0].dtype, copy=False),)

    backward_graph = linear_backward_graph  # linear: its backward on arrays is a function


def trilu(x: Variable, k: int = 0, upper: bool = True, n_outputs: int = -1,
          outputs=None) -> Variable:
    """The upper triangle of the last two axes from diagonal ``k`` (``upper=False``: the
    lower triangle up to diagonal ``k``)."""
    default_outputs("F.trilu", n_outputs, outputs)
    return Trilu(k, upper)(x)


class Unlink(Unary):
    """A copy of the input that passes no gradient back."""

    nnabla_spec = without_params("Unlink", "unlink")

    grad_depends_on_inputs = False

    def forward_arrays(self, xp, xs):
        return (xs[0].copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (None,)


def unlink(x: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """``x``'s values in a variable whose gradient stops there."""
    default_outputs("F.unlink", n_outputs, outputs)
    return Unlink()(x)


class Assign(Function):
    """Copies ``src`` into ``dst``'s data at each forward and outputs it; the gradient
    goes to ``dst`` (as nnabla), none to ``src``."""

    nnabla_spec = without_params("Assign", "assign")

    grad_depends_on_inputs = False

    def output_specs(self, inputs):
        dst, src = inputs
        if dst.shape != src.shape:
            raise self.error(f"dst of shape {dst.shape} and src of shape {src.shape} must have "
                             "one shape")
        return [(dst.shape, dst.dtype)]

    def forward_arrays(self, xp, xs):
        dst, src = xs
        dst[...] = src
        return (dst.copy(),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        return (gys[0], None)


def assign(dst: Variable, src: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """Write ``src``'s values into ``dst`` when run, returning them."""
    default_outputs("F.assign", n_outputs, outputs)
    return Assign()(dst, src)


class Shape(Function):
    """The sizes of the input's axes from ``start`` to ``end`` (exclusive; 0 or None:
    to the last), as a 1-D array of the context's float type, as nnabla."""

    nnabla_spec = FunctionSpec("Shape", "shape_param", ("start", "end"),
                               attrs(start=lambda fn: none_to(fn.start, 0),
                                     end=lambda fn: none_to(fn.end, 0)),
                               call("shape", "start", "end"))

    differentiable = False
    grad_depends_on_inputs = False

    def __init__(self, start: int | None, end: int | None):
        self.start, self.end = start, end

    def output_specs(self, inputs):
        (x,) = inputs
        for name, value in (("start", self.start), ("end", self.end)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
                raise self.error(f"{name} must be an int or None, got {value!r}")
        start = 0 if self.start is None else int(self.start)
        end = 0 if self.end is None else int(self.end)
        self.values = x.shape[start:end if end else None]
        self.dtype = self.context.dtype
        return [((len(self.values),), self.dtype)]

    def forward_arrays(self, xp, xs):
        return (xp.asarray(self.values, dtype=self.dtype),)


def shape(x: Variable, start: int | None = None, end: int | None = None, n_outputs: int = -1,
          outputs=None) -> Variable:
    """The shape of ``x`` (axes ``start`` to ``end``) as a 1-D variable."""
    default_outputs("F.shape", n_outputs, outputs)
    return Shape(start, end)(x)

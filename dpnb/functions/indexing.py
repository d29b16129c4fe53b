"""Gathering and scattering by index: gather, gather_nd, scatter_nd, scatter_add, one_hot,
embed, and by mask: bool_fill, bool_gather, bool_scatter.

Indices are read as integers at each forward; one outside its axis raises a
``DpnbError`` (nnabla reads out of bounds silently in some of these, and on GPUs)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import DpnbError
from ..graph import Function, Variable
from ..ndarray import NdArray
from .base import add_at, default_outputs, one_axis, shape_of
from .graph_module import LinearBackward, linear_backward_graph
from .specs import FunctionSpec, attrs, call, int_axis, no_params, without_params

__all__ = ["gather", "gather_nd", "scatter_nd", "scatter_add", "one_hot", "embed", "bool_fill",
           "bool_gather", "bool_scatter"]


def _int_input(owner: Function, x: Variable, name: str) -> None:
    """Index inputs need no gradient; integers, or floats holding integers, as nnabla."""
    if not (np.issubdtype(x.dtype, np.integer) or np.issubdtype(x.dtype, np.floating)):
        raise owner.error(f"{name} must hold integers, got dtype {x.dtype}")


def _checked(owner: Function, xp, index, size: int, what: str, negative: bool = False):
    """``index`` as int64, every entry inside ``[0, size)`` (``negative``: ``[-size, size)``,
    made non-negative)."""
    index = index.astype(np.int64)
    low = -size if negative else 0
    bad = (index < low) | (index >= size)
    if bool(bad.any()):
        first = int(index[bad].reshape(-1)[0])
        raise owner.error(f"index {first} is outside {what} of size {size}; indices must lie in "
                          f"[{low}, {size})")
    return index % size if negative and size else index


def _as_variable(indices) -> Variable:
    """nnabla's gather_nd and scatter_nd take indices as lists and arrays too."""
    if isinstance(indices, Variable):
        return indices
    if isinstance(indices, NdArray):
        return Variable.from_numpy_array(indices.data)
    return Variable.from_numpy_array(np.asarray(indices, dtype=np.int64))


class Gather(Function):
    """``x`` indexed along ``axis`` by an index array; the first ``batch_dims`` axes of
    ``x`` and the indices are matched one to one."""

    nnabla_spec = FunctionSpec("Gather", "gather_param", ("axis", "batch_dims"),
                               attrs("axis", "batch_dims"), call("gather", "axis", "batch_dims"))

    def __init__(self, axis: int, batch_dims: int):
        self.axis, self.batch_dims = axis, batch_dims

    def output_specs(self, inputs):
        x, idx = inputs
        _int_input(self, idx, "Indices")
        b = self.batch_dims
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or not 0 <= b <= idx.ndim:
            raise self.error(f"batch_dims must be an int in [0, {idx.ndim}] (the index has "
                             f"{idx.ndim} dimensions), got {b!r}")
        self.axis = one_axis(self, self.axis, x.ndim)
        if self.axis < b or x.shape[:b] != idx.shape[:b]:
            raise self.error(f"with batch_dims={b}, x {x.shape} and Indices {idx.shape} must share "
                             f"their first {b} sizes and axis ({self.axis}) must be >= batch_dims")
        self.x_shape, self.i_shape = x.shape, idx.shape
        self.b = int(b)
        return [(x.shape[:self.axis] + idx.shape[b:] + x.shape[self.axis + 1:], x.dtype)]

    def _layout(self, xp, idx):
        """The batch index and the checked indices, shaped (batch, *index axes)."""
        b = self.b
        n = int(np.prod(self.x_shape[:b], dtype=np.int64))
        index = _checked(self, xp, idx, self.x_shape[self.axis], f"axis {self.axis}")
        index = index.reshape((n,) + self.i_shape[b:])
        batch = xp.arange(n).reshape((n,) + (1,) * (len(self.i_shape) - b))
        return n, batch, index

    def _moved(self, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The batched shape of ``x`` with ``axis`` moved next to the batch, and the
        axes that take a gathered (batch, *index, *before, *after) to the output order."""
        b, a = self.b, self.axis
        before, after = self.x_shape[b:a], self.x_shape[a + 1:]
        moved = (n, self.x_shape[a]) + before + after
        k = len(self.i_shape) - b
        order = ((0,) + tuple(range(1 + k, 1 + k + len(before))) + tuple(range(1, 1 + k))
                 + tuple(range(1 + k + len(before), 1 + k + len(before) + len(after))))
        return moved, order

    def forward_arrays(self, xp, xs):
        x, idx = xs
        n, batch, index = self._layout(xp, idx)
        moved, order = self._moved(n)
        xt = xp.moveaxis(x.reshape((n,) + self.x_shape[self.b:]), 1 + self.axis - self.b, 1)
        picked = xt[batch, index]
        return (xp.ascontiguousarray(picked.transpose(order)).reshape(self.outputs[0].shape),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not need_grads[0]:
            return (None, None)
        n, batch, index = self._layout(xp, xs[1])
        moved, order = self._moved(n)
        g = gys[0].reshape((n,) + tuple(self.outputs[0].shape[self.b:]))
        g = g.transpose(tuple(int(a) for a in np.argsort(order)))
        gt = xp.zeros(moved, gys[0].dtype)
        add_at(xp, gt, (batch, index), g)
        gx = xp.moveaxis(gt, 1, 1 + self.axis - self.b).reshape(self.x_shape)
        return (gx, None)

    backward_graph = linear_backward_graph  # linear in x; the indices only select


def gather(x: Variable, Indices: Variable, axis: int | None = None, batch_dims: int | None = None,
           n_outputs: int = -1, outputs=None) -> Variable:
    """``x`` indexed along ``axis`` (default 0) by ``Indices``; output shape
    ``x.shape[:axis] + Indices.shape[batch_dims:] + x.shape[axis + 1:]``."""
    default_outputs("F.gather", n_outputs, outputs)
    return Gather(0 if axis is None else axis, 0 if batch_dims is None else batch_dims)(x, Indices)


class GatherNd(Function):
    """Elements or slices of ``x`` at the index tuples held along the first axis of
    ``indices`` (M of them for the first M axes; negative ones count from the end)."""

    nnabla_spec = without_params("GatherNd", "gather_nd")

    def output_specs(self, inputs):
        x, idx = inputs
        _int_input(self, idx, "indices")
        if idx.ndim < 1 or not 1 <= idx.shape[0] <= x.ndim:
            raise self.error(f"indices of shape {idx.shape} must hold M <= {x.ndim} index rows "
                             f"(shape (M, ...)) for data of shape {x.shape}")
        self.x_shape, self.m = x.shape, idx.shape[0]
        return [(idx.shape[1:] + x.shape[self.m:], x.dtype)]

    def _where(self, xp, idx):
        return tuple(_checked(self, xp, idx[m], self.x_shape[m], f"axis {m}", negative=True)
                     for m in range(self.m))

    def forward_arrays(self, xp, xs):
        x, idx = xs
        return (x[self._where(xp, idx)],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not need_grads[0]:
            return (None, None)
        gx = xp.zeros(self.x_shape, gys[0].dtype)
        add_at(xp, gx, self._where(xp, xs[1]), gys[0])
        return (gx, None)

    backward_graph = linear_backward_graph  # linear in x; the indices only select


def gather_nd(data: Variable, indices) -> Variable:
    """Elements or slices of ``data`` at the index tuples in ``indices`` (M, Y...):
    output shape ``(Y..., data.shape[M:])``; lists and arrays are taken as indices too."""
    return GatherNd()(data, _as_variable(indices))


def _scatter_nd(xs, p, n):
    if len(xs) == 3:
        return scatter_nd(xs[0], xs[1], out=xs[2], add=p["add"])
    return scatter_nd(xs[0], xs[1], shape=p["shape"], add=p["add"])


class ScatterNd(Function):
    """``data`` written (``add``: added) at the index tuples of ``indices`` into zeros of
    ``shape`` or into a copy of ``out``, which (as in nnabla) also receives the result."""

    nnabla_spec = FunctionSpec("ScatterNd", "scatter_nd_param", ("shape", "add"),
                               attrs(shape=lambda fn: fn.outputs[0].shape, add=lambda fn: fn.add),
                               _scatter_nd)

    def __init__(self, shape: tuple[int, ...], add: bool, has_out: bool):
        self.shape, self.add, self.has_out = shape, bool(add), has_out

    def output_specs(self, inputs):
        data, idx = inputs[:2]
        _int_input(self, idx, "indices")
        if idx.ndim < 1 or not 1 <= idx.shape[0] <= len(self.shape):
            raise self.error(f"indices of shape {idx.shape} must hold M <= {len(self.shape)} index "
                             f"rows (shape (M, ...)) for an output of shape {self.shape}")
        self.m = idx.shape[0]
        expected = idx.shape[1:] + self.shape[self.m:]
        if data.shape != expected:
            raise self.error(f"data of shape {data.shape} does not fit indices {idx.shape} and "
                             f"output {self.shape}: expected data of shape {expected}")
        return [(self.shape, data.dtype)]

    def _where(self, xp, idx):
        where = tuple(_checked(self, xp, idx[m], self.shape[m], f"output axis {m}", negative=True)
                      for m in range(self.m))
        if not self.add:
            flat = xp.zeros(where[0].shape, np.int64)
            for w, n in zip(where, self.shape):
                flat = flat * n + w
            if int(xp.unique(flat).size) != flat.size:
                raise self.error("indices name one destination more than once with add=False, "
                                 "where which value lands is undefined; pass add=True to sum "
                                 "them, or make the destinations distinct")
        return where

    def forward_arrays(self, xp, xs):
        data, idx = xs[:2]
        where = self._where(xp, idx)
        y = xs[2].copy() if self.has_out else xp.zeros(self.shape, data.dtype)
        if self.add:
            add_at(xp, y, where, data)
        else:
            y[where] = data
        if self.has_out:
            xs[2][...] = y
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (g,) = gys
        where = self._where(xp, xs[1])
        gdata = g[where] if need_grads[0] else None
        gout = None
        if self.has_out and need_grads[2]:
            gout = g.copy()
            if not self.add:
                gout[where] = 0
        return (gdata, None, gout) if self.has_out else (gdata, None)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its backward as functions of the indices: data's gradient is g gathered at them;
        ``out``'s is g, less (add=False) what lands there, scattered back."""
        g, indices = gys[0], xs[1]
        picked = F.gather_nd(g, indices)
        grads = [picked if need_grads[0] else None, None]
        if self.has_out:
            kept = g if self.add or not need_grads[2] else F.sub2(
                g, F.scatter_nd(picked, indices, shape=self.shape))
            grads.append(kept)
        return grads


def scatter_nd(data: Variable, indices, shape: Sequence[int] | None = None, out=None,
               add: bool = False) -> Variable:
    """``data`` scattered to the index tuples of ``indices`` in a new array of ``shape``,
    or into ``out`` (a variable, which is updated too); ``add`` sums what lands on one place."""
    if (shape is None) == (out is None):
        raise DpnbError("F.scatter_nd: give exactly one of shape= (a new output) and out= (an "
                        f"existing variable), got shape={shape!r}, out={out!r}")
    if out is not None:
        if not isinstance(out, Variable):
            raise DpnbError(f"F.scatter_nd: out must be an nn.Variable, got {type(out).__name__}")
        return ScatterNd(out.shape, add, True)(data, _as_variable(indices), out)
    shape = shape_of("F.scatter_nd", list(np.asarray(shape).tolist()) if isinstance(shape, np.ndarray)
                     else shape)
    return ScatterNd(shape, add, False)(data, _as_variable(indices))


class ScatterAdd(Function):
    """A copy of ``x0`` with each entry of ``x1`` (over the shape of ``indices``) added
    at the place along ``axis`` that ``indices`` names."""

    nnabla_spec = FunctionSpec("ScatterAdd", "scatter_add_param", ("axis",), int_axis,
                               call("scatter_add", "axis"))

    def __init__(self, axis: int):
        self.axis = axis

    def output_specs(self, inputs):
        x0, idx, x1 = inputs
        _int_input(self, idx, "indices")
        if not x0.ndim == idx.ndim == x1.ndim:
            raise self.error(f"x0 {x0.shape}, indices {idx.shape} and x1 {x1.shape} must have one "
                             "number of dimensions")
        self.axis = one_axis(self, self.axis, x0.ndim)
        if any(i > b for i, b in zip(idx.shape, x1.shape)) or any(
                i > a for d, (i, a) in enumerate(zip(idx.shape, x0.shape)) if d != self.axis):
            raise self.error(f"indices {idx.shape} may not be larger than x1 {x1.shape} on any "
                             f"axis, nor than x0 {x0.shape} on an axis other than {self.axis}")
        self.i_shape, self.x1_shape = idx.shape, x1.shape
        self.size = x0.shape[self.axis]
        return [(x0.shape, np.result_type(x0.dtype, x1.dtype))]

    def _where(self, xp, idx):
        index = _checked(self, xp, idx, self.size, f"axis {self.axis} of x0")
        grids = list(xp.meshgrid(*[xp.arange(s) for s in self.i_shape], indexing="ij"))
        grids[self.axis] = index
        return tuple(grids)

    def _part(self):
        return tuple(slice(0, s) for s in self.i_shape)

    def forward_arrays(self, xp, xs):
        x0, idx, x1 = xs
        y = x0.astype(self.outputs[0].dtype, copy=True)
        add_at(xp, y, self._where(xp, idx), x1[self._part()])
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (g,) = gys
        g1 = None
        if need_grads[2]:
            g1 = xp.zeros(self.x1_shape, g.dtype)
            g1[self._part()] = g[self._where(xp, xs[1])]
        return (g if need_grads[0] else None, None, g1)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Linear in x0 and x1 together, the indices only select: LinearBackward."""
        g0, g1 = LinearBackward(self, (0, 2))(gys[0], xs[1])
        return [g0, None, g1]


def scatter_add(x0: Variable, indices: Variable, x1: Variable, axis: int | None = None) -> Variable:
    """``x0`` plus ``x1`` scattered along ``axis`` (default 0) by ``indices``."""
    return ScatterAdd(0 if axis is None else axis)(x0, indices, x1)


class OneHot(Function):
    """One-hot arrays: the last axis of the integer input indexes an array of ``shape``;
    as in nnabla, a negative index counts from the end, and a sample with an index
    outside its axis gets an array of zeros."""

    nnabla_spec = FunctionSpec("OneHot", "one_hot_param", ("shape",), attrs("shape"),
                               call("one_hot", "shape"))

    differentiable = False

    def __init__(self, shape: Sequence[int]):
        self.shape = shape

    def output_specs(self, inputs):
        (x,) = inputs
        _int_input(self, x, "x")
        self.shape = shape_of(self, self.shape)
        if x.ndim < 1 or x.shape[-1] != len(self.shape):
            raise self.error(f"the last axis of x {x.shape} must have one entry per axis of "
                             f"shape {self.shape} ({len(self.shape)})")
        self.dtype = self.context.dtype
        return [(x.shape[:-1] + self.shape, self.dtype)]

    def forward_arrays(self, xp, xs):
        (x,) = xs
        flat = xp.zeros((int(np.prod(x.shape[:-1], dtype=np.int64)), int(np.prod(self.shape))),
                        self.dtype)
        position = xp.zeros(x.shape[:-1], np.int64)
        inside = xp.ones(x.shape[:-1], bool)
        for d, n in enumerate(self.shape):
            index = x[..., d].astype(np.int64)
            index = xp.where(index < 0, index + n, index)
            inside &= (index >= 0) & (index < n)
            position = position * n + xp.clip(index, 0, n - 1)
        flat[xp.arange(flat.shape[0]), position.reshape(-1)] = inside.reshape(-1)
        return (flat.reshape(self.outputs[0].shape),)


def one_hot(x: Variable, shape: Sequence[int], n_outputs: int = -1, outputs=None) -> Variable:
    """One-hot arrays of ``shape`` from integer labels (..., len(shape))."""
    default_outputs("F.one_hot", n_outputs, outputs)
    return OneHot(shape)(x)


class Embed(Function):
    """Rows of the table ``w`` looked up by integer ids; the gradient adds up in ``w``."""

    nnabla_spec = without_params("Embed", "embed")

    def output_specs(self, inputs):
        x, w = inputs
        _int_input(self, x, "x0")
        if w.ndim < 1:
            raise self.error("the table w needs at least one axis (one row per id), got a scalar")
        self.w_shape = w.shape
        return [(x.shape + w.shape[1:], w.dtype)]

    def _ids(self, xp, x):
        return _checked(self, xp, x, self.w_shape[0], "the rows of w")

    def forward_arrays(self, xp, xs):
        x, w = xs
        return (w[self._ids(xp, x)],)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not need_grads[1]:
            return (None, None)
        gw = xp.zeros(self.w_shape, gys[0].dtype)
        add_at(xp, gw, self._ids(xp, xs[0]), gys[0])
        return (None, gw)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Linear in w, the ids only select: its backward on arrays, as a function."""
        if not need_grads[1]:
            return [None, None]
        return [None, LinearBackward(self, (1,))(gys[0], xs[0])]


def embed(x0: Variable, w: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The rows of ``w`` at the integer ids ``x0``: shape ``x0.shape + w.shape[1:]``."""
    default_outputs("F.embed", n_outputs, outputs)
    return Embed()(x0, w)


def _mask_input(owner: Function, mask: Variable) -> None:
    """A mask is read as non-zero (true) or zero; it takes no gradient."""
    if not (np.issubdtype(mask.dtype, np.number) or mask.dtype == np.bool_):
        raise owner.error(f"mask must hold numbers (non-zero: true), got dtype {mask.dtype}")


def _leading_mask(owner: Function, mask: Variable, shape: tuple[int, ...], what: str) -> None:
    """The mask must have the leading axes of ``shape``."""
    _mask_input(owner, mask)
    if mask.ndim > len(shape) or shape[:mask.ndim] != mask.shape:
        raise owner.error(f"mask of shape {mask.shape} must have the leading axes of {what} "
                          f"{shape}: give a mask of shape {shape[:max(mask.ndim, 1)]}")


class BoolFill(Function):
    """``data`` with ``value`` where the mask (broadcast to data) is non-zero; the
    gradient passes where it is zero."""

    nnabla_spec = FunctionSpec("BoolFill", "bool_fill_param", ("value",), attrs("value"),
                               call("bool_fill", "value"))

    def __init__(self, value: float):
        self.value = value

    def output_specs(self, inputs):
        data, mask = inputs
        _mask_input(self, mask)
        if not np.isscalar(self.value) or isinstance(self.value, (str, bytes)):
            raise self.error(f"value must be a number, got {self.value!r}")
        try:
            fits = np.broadcast_shapes(data.shape, mask.shape) == data.shape
        except ValueError:
            fits = False
        if not fits:
            raise self.error(f"mask of shape {mask.shape} must broadcast to data's shape "
                             f"{data.shape}; give a mask of that shape or with 1 on the axes "
                             "to repeat it along")
        return [(data.shape, data.dtype)]

    def forward_arrays(self, xp, xs):
        data, mask = xs
        return (xp.where(mask != 0, xp.asarray(self.value, data.dtype), data),)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        g = gys[0] * (xs[1] == 0) if need_grads[0] else None
        return (g, None)


def bool_fill(data: Variable, mask: Variable, value: float = 0, n_outputs: int = -1,
              outputs=None) -> Variable:
    """``data`` with ``value`` wherever ``mask`` (broadcast to data's shape) is non-zero."""
    default_outputs("F.bool_fill", n_outputs, outputs)
    return BoolFill(value)(data, mask)


class BoolGather(Function):
    """The sub-arrays of ``input`` where the mask (its leading axes) is non-zero, stacked
    and flattened as nnabla's: shape (nnz,) or (nnz, size of the rest); the output takes
    its length from each forward."""

    nnabla_spec = without_params("BoolGather", "bool_gather")

    def output_specs(self, inputs):
        x, mask = inputs
        _leading_mask(self, mask, x.shape, "input")
        rest = x.shape[mask.ndim:]
        self.in_shape, self.rest = x.shape, (int(np.prod(rest, dtype=np.int64)),) if rest else ()
        count = int((mask.d != 0).sum()) if mask.data.allocated else 0
        return [((count,) + self.rest, x.dtype)]

    def forward_arrays(self, xp, xs):
        x, mask = xs
        y = x[mask != 0].reshape((-1,) + self.rest)
        if y.shape != self.outputs[0].shape:  # the count is known only now
            self.outputs[0].data.reset_shape(y.shape, force=True)
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        if not need_grads[0]:
            return (None, None)
        g = xp.zeros(self.in_shape, gys[0].dtype)
        where = xs[1] != 0
        g[where] = gys[0].reshape((-1,) + self.in_shape[where.ndim:])
        return (g, None)

    backward_graph = linear_backward_graph  # linear in x; the mask only selects


def bool_gather(input: Variable, mask: Variable, n_outputs: int = -1, outputs=None) -> Variable:
    """The sub-arrays of ``input`` at the non-zero entries of ``mask`` (the shape of
    input's leading axes), stacked: shape (nnz,) or, as nnabla's, (nnz, size of the rest)."""
    default_outputs("F.bool_gather", n_outputs, outputs)
    return BoolGather()(input, mask)


class BoolScatter(Function):
    """The rows of ``input`` (nnz, ...) written in order to the non-zero places of the
    mask, into zeros or into ``output``, which (as in nnabla) is updated too and gets
    the gradient of the places the mask leaves alone."""

    nnabla_spec = FunctionSpec("BoolScatter", None, (), no_params,
                               lambda xs, p, n: bool_scatter(*xs[:2],
                                                             xs[2] if len(xs) == 3 else None))

    def __init__(self, has_output: bool):
        self.has_output = has_output

    def output_specs(self, inputs):
        x, mask = inputs[:2]
        _mask_input(self, mask)
        if x.ndim < 1:
            raise self.error("input needs a leading axis of the masked entries (nnz, ...), got "
                             "a scalar")
        self.out_shape = mask.shape + x.shape[1:]
        if self.has_output and inputs[2].shape != self.out_shape:
            raise self.error(f"output of shape {inputs[2].shape} must have the mask's shape "
                             f"followed by input's trailing axes, {self.out_shape}")
        return [(self.out_shape, x.dtype)]

    def _where(self, xp, x, mask):
        where = mask != 0
        count = int(where.sum())
        if count != x.shape[0]:
            raise self.error(f"input holds {x.shape[0]} rows but the mask has {count} non-zero "
                             "entries; give one row per non-zero entry")
        return where

    def forward_arrays(self, xp, xs):
        x, mask = xs[:2]
        where = self._where(xp, x, mask)
        y = xs[2].copy() if self.has_output else xp.zeros(self.out_shape, x.dtype)
        y[where] = x
        if self.has_output:
            xs[2][...] = y
        return (y,)

    def backward_arrays(self, xp, xs, ys, gys, need_grads):
        (g,) = gys
        where = self._where(xp, xs[0], xs[1])
        grads = [g[where] if need_grads[0] else None, None]
        if self.has_output:
            grads.append(g * ~where.reshape(where.shape + (1,) * (g.ndim - where.ndim))
                         if need_grads[2] else None)
        return tuple(grads)

    def backward_graph(self, F, xs, ys, gys, need_grads):
        """Its backward as functions: the rows of g at the mask (bool_gather), and g where
        the mask keeps ``output``'s values."""
        g, mask = gys[0], xs[1]
        grads = [F.bool_gather(g, mask) if need_grads[0] else None, None]
        if self.has_output:
            keep = F.reshape(F.logical_not(mask), mask.shape + (1,) * (g.ndim - mask.ndim),
                             inplace=False)
            grads.append(F.mul2(g, keep) if need_grads[2] else None)
        return grads


def bool_scatter(input: Variable, mask: Variable, output: Variable | None = None,
                 n_outputs: int = -1, outputs=None) -> Variable:
    """The rows of ``input`` (nnz, ...) placed at the non-zero entries of ``mask``: shape
    ``mask.shape + input.shape[1:]``, zeros elsewhere, or ``output``'s values there
    (``output`` is updated in place, as in nnabla)."""
    default_outputs("F.bool_scatter", n_outputs, outputs)
    if output is None:
        return BoolScatter(False)(input, mask)
    return BoolScatter(True)(input, mask, output)
